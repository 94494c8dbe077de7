package talos

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

// BenchmarkRollingUpgrade upgrades a tenant of 3 control planes and 5
// workers, on simulated nodes with the default stage durations, and
// reports the plane's overhead per machine: the wall time of the rollout
// less the nodes' own time (upgrade stage, reboot, boot), divided by the
// machines.
//
//	go test -run '^$' -bench RollingUpgrade -benchtime 1x ./reconciler/talos/
func BenchmarkRollingUpgrade(b *testing.B) {
	timings := talosnode.DefaultTimings
	h, err := talosnode.Open(talosnode.Options{Dir: b.TempDir(), Timings: timings})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	st, err := bolt.Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	pool := NewPool(PoolOptions{})
	defer pool.Close()
	pl, err := New(Options{Store: st, Pool: pool})
	if err != nil {
		b.Fatal(err)
	}
	r := &rig{t: b, host: h, store: st, pool: pool, plane: pl, next: 10}
	secrets := bundle(b, "bench")
	cpCfg, wCfg := renderConfig(b, "bench", secrets, "controlplane"), renderConfig(b, "bench", secrets, "worker")
	tr := &tenantRig{rig: r, tenant: "bench", secrets: secrets, cpCfg: cpCfg, wCfg: wCfg}
	tr.ms = r.cluster("bench", 3, 5, cpCfg, wCfg)
	ctx := context.Background()
	if _, err := pl.Bootstrap(ctx, "bench", secrets, tr.ms); err != nil {
		b.Fatal(err)
	}
	if _, err := pl.Roll(ctx, tr.desired(cpCfg, wCfg, "1.12.6")); err != nil {
		b.Fatal(err)
	}
	own := time.Duration(len(tr.ms)) * (timings.Upgrade + timings.Reboot + timings.Boot)
	b.ResetTimer()
	var wall time.Duration
	for i := range b.N {
		start := time.Now()
		if _, err := pl.Roll(ctx, tr.desired(cpCfg, wCfg, fmt.Sprintf("1.12.%d", 7+i))); err != nil {
			b.Fatal(err)
		}
		wall += time.Since(start)
	}
	perRun := wall / time.Duration(b.N)
	b.ReportMetric(perRun.Seconds(), "wall-s/rollout")
	b.ReportMetric(own.Seconds(), "nodes-s/rollout")
	b.ReportMetric(float64((perRun-own).Milliseconds())/float64(len(tr.ms)), "overhead-ms/machine")
}
