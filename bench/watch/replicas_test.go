package watch

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/etcdtest"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	etcdstore "github.com/rezuscloud/rezuscloud/store/etcd"
)

// BenchmarkWatchFanoutReplicas is BenchmarkWatchFanout over three
// servers on one etcd, as three replicas serve the API: an etcd of three
// members and three backend.Servers, each on its own client and etcd
// store, in the benchmark's process. The -clients watches are spread
// over the three in turn; the writer changes machines through the first,
// so the other two see each change through their watch of etcd. With
// -reads N, N GETs a second of one machine go to the servers in turn
// while the changes flow, and their p50, p99 and max are logged and
// reported. The memory figures are of the process: the three servers and
// the three etcd members together. One op is the whole run: use
// -benchtime 1x.
func BenchmarkWatchFanoutReplicas(b *testing.B) {
	var res result
	for range b.N {
		res = runFanoutReplicas(b, 3)
	}
	b.ReportMetric(float64(res.Latency.P50)/1e6, "p50-ms")
	b.ReportMetric(float64(res.Latency.P99)/1e6, "p99-ms")
	b.ReportMetric(float64(res.Latency.Max)/1e6, "max-ms")
	b.ReportMetric(float64(res.AfterCommit.P99)/1e6, "p99-after-commit-ms")
	if *flagReads > 0 {
		b.ReportMetric(float64(res.Reads.P50)/1e6, "read-p50-ms")
		b.ReportMetric(float64(res.Reads.P99)/1e6, "read-p99-ms")
	}
	b.ReportMetric(res.ServerHWM, "process-peak-RSS-MiB")
	b.ReportMetric(float64(res.Delivered), "events-delivered")
}

func runFanoutReplicas(b *testing.B, n int) result {
	cluster := etcdtest.Start(b, 3)
	var servers []*servertest.Backend
	defer func() {
		for _, s := range servers {
			if err := s.Close(); err != nil {
				b.Error(err)
			}
		}
	}()
	for i := range n {
		st, err := etcdstore.Open(context.Background(), etcdstore.Config{Client: cluster.Client(b), Prefix: "/rezuscloud/"})
		if err != nil {
			b.Fatal(err)
		}
		srv, err := servertest.OpenBackend(backend.Config{DataDir: filepath.Join(b.TempDir(), fmt.Sprintf("r%d", i)), Store: st}, nil)
		if err != nil {
			st.Close()
			b.Fatal(err)
		}
		servers = append(servers, srv)
	}
	return fanout(b, servers)
}
