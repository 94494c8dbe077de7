package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

// backupPolicy is the spec.backup every tenant of BenchmarkServeIdleBackups
// declares.
const backupPolicy = "{interval: 6h, keep: 4}"

// idleWarmup is how long BenchmarkServeIdleBackups lets a server be,
// once it is settled, before it samples it: `-args -warmup D`. A restarted
// server finds its machines' statuses as the last one left them, so
// "settled" comes before its start-up's work is over.
var idleWarmup = 30 * time.Second

func init() {
	flag.DurationVar(&idleWarmup, "warmup", idleWarmup, "how long BenchmarkServeIdleBackups lets a settled server be before it samples it")
}

// clockTicks is the unit of utime and stime in /proc/PID/stat (USER_HZ,
// 100 on Linux).
const clockTicks = 100

// BenchmarkServeIdleBackups measures what etcd backups cost the real
// `rezuscloud serve` at idle: its CPU and resident memory on the fleet
// kept in -keep DIR by an earlier run of BenchmarkFleet, every tenant
// declaring backups every 6 hours (spec.backup: {interval: 6h, keep: 4}),
// with backups off and then on.
//
// The fleet's manifests, with the policy added to each Tenant, are served
// three times, each by a new server on the kept data dir and sim dir:
//
//  1. to settle: the first server on the manifests with the policy runs
//     tofu for the tenants whose manifests changed (the policy changes no
//     workspace), bootstraps the tenants' etcd where the kept fleet's
//     first server had not, and is stopped once every control plane is
//     observed an etcd member;
//  2. backups off: no backup store and no key (no --backup-age-recipients,
//     no REZUSCLOUD_STATE_PASSPHRASE); sampled once every machine is
//     observed connected and every control plane an etcd member;
//  3. backups on: --backup-store file://DIR/backups and an age key kept
//     in DIR/backup.key (--backup-age-recipients,
//     --backup-age-identity-file), made at the first run; each tenant's
//     first backup is due at once, and the server is sampled once every
//     tenant's status says a backup succeeded. No backup is due for six
//     hours after that: a later run within six hours (another op, or
//     another run of the benchmark on the same DIR) finds every tenant
//     backed up, and its server takes none. The log says how many the
//     server took.
//
// Each run waits -warmup (default 30 s) after that, then samples the
// server's VmRSS once a second for -idle (default 1m) and its CPU time (utime + stime of /proc/PID/stat) over the same
// window. The server's process serves the fleet's simulated Talos nodes,
// in both runs alike. The figures are reported side by side with their
// difference; the benchmark fails when the server with backups on does
// not back up every tenant, or when a run finds its fleet unsettled.
func BenchmarkServeIdleBackups(b *testing.B) {
	if keepDir == "" {
		b.Skip("needs -keep DIR holding a fleet applied by BenchmarkFleet")
	}
	if shared != nil { // the server opens the rig's data dir
		shared.close()
		shared = nil
	}
	kept, err := os.ReadFile(filepath.Join(keepDir, "fleet.json"))
	if err != nil {
		b.Skipf("no applied fleet in %s: %v", keepDir, err)
	}
	var k keptFleet
	if err := json.Unmarshal(kept, &k); err != nil {
		b.Fatal(err)
	}
	fleet := Fleet{Tenants: k.Tenants, PerTenant: k.PerTenant}
	servertest.Binary(b) // built before the timer
	repo := filepath.Join(b.TempDir(), "repo")
	if err := writeWithBackups(fleet, repo); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Minute)
	defer cancel()
	bk := &backupIdle{b: b, fleet: fleet, repo: repo, store: filepath.Join(keepDir, "backups")}
	bk.settle(ctx)
	for range b.N {
		off := bk.run(ctx, false)
		on := bk.run(ctx, true)
		b.ReportMetric(off.cpuPerS*1000, "off-cpu-ms/s")
		b.ReportMetric(on.cpuPerS*1000, "on-cpu-ms/s")
		b.ReportMetric(off.rss.meanMB, "off-RSS-MB")
		b.ReportMetric(on.rss.meanMB, "on-RSS-MB")
		b.Logf("%d tenants × %d machines (%d simulated Talos nodes in the server's process), each declaring backups %s, idle for %v:",
			fleet.Tenants, fleet.perTenant(), fleet.Machines(), backupPolicy, idleFor)
		for _, r := range []idleRun{off, on} {
			b.Logf("  %s: CPU %.1f ms/s (%.2f s in %v), VmRSS %.1f–%.1f MB (mean %.1f; %.1f MB anonymous, %.1f MB of the store file mapped at the end); Go heap in use %.1f MiB of %.1f MiB; %s",
				r.name, r.cpuPerS*1000, r.cpu.Seconds(), r.window.Round(time.Millisecond), r.rss.minMB, r.rss.maxMB, r.rss.meanMB, r.rss.anonMB, r.rss.dbMB, r.heap, r.sys, r.note)
		}
		b.Logf("  on − off: CPU %+.1f ms/s, VmRSS mean %+.1f MB, max %+.1f MB, anonymous %+.1f MB, Go heap in use %+.1f MiB",
			(on.cpuPerS-off.cpuPerS)*1000, on.rss.meanMB-off.rss.meanMB, on.rss.maxMB-off.rss.maxMB, on.rss.anonMB-off.rss.anonMB, on.heap-off.heap)
	}
}

// writeWithBackups writes the fleet's manifests under dir, each Tenant
// declaring backupPolicy, and checks that they load so.
func writeWithBackups(f Fleet, dir string) error {
	if err := f.WriteDir(dir); err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(dir, "tenants", "*.yaml"))
	if err != nil {
		return err
	}
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		i := bytes.Index(b, []byte("kind: Tenant\n"))
		j := bytes.Index(b[max(i, 0):], []byte("\nspec:\n"))
		if i < 0 || j < 0 {
			return fmt.Errorf("%s: no Tenant with a spec", path)
		}
		at := i + j + len("\nspec:\n")
		out := append(append(bytes.Clone(b[:at]), "  backup: "+backupPolicy+"\n"...), b[at:]...)
		if err := os.WriteFile(path, out, 0o644); err != nil {
			return err
		}
	}
	d, err := schema.Load(os.DirFS(dir), ".", nil)
	if err != nil {
		return err
	}
	if len(d.Tenants) != f.Tenants {
		return fmt.Errorf("%d tenants loaded, want %d", len(d.Tenants), f.Tenants)
	}
	for _, td := range d.Tenants {
		if p := td.Tenant.Spec.Backup; p == nil || p.Interval != "6h" || p.Keep != 4 {
			return fmt.Errorf("tenant %s declares backups %+v, want %s", td.Tenant.Metadata.Name, p, backupPolicy)
		}
	}
	return nil
}

// backupIdle is the benchmark's fleet and the manifests it serves.
type backupIdle struct {
	b     *testing.B
	fleet Fleet
	repo  string
	store string // the backup store's directory
}

// idleRun is what one run measured.
type idleRun struct {
	name      string
	cpu       time.Duration // CPU time of the server in the window
	window    time.Duration
	cpuPerS   float64 // CPU seconds a second
	rss       rssSamples
	heap, sys float64 // MiB, at the end
	note      string
}

// serve starts a server on the kept fleet and the manifests with the
// policy, with args besides the fleet's.
func (bk *backupIdle) serve(args ...string) *serveProc {
	args = append([]string{"--sim-dir", filepath.Join(keepDir, "sim"), "--debounce", "0"}, args...)
	return newServe(bk.b, servertest.Options{Data: filepath.Join(keepDir, "data"), Dir: bk.repo, SimCloud: true, Args: args})
}

// settle serves the manifests with the policy until they are applied and
// every tenant's etcd is bootstrapped, and stops.
func (bk *backupIdle) settle(ctx context.Context) {
	b := bk.b
	srv := bk.serve()
	start := time.Now()
	srv.Start()
	first := srv.waitApplied(b, ctx, "")
	applied := time.Since(start)
	srv.waitEtcd(b, ctx, bk.fleet.Tenants*bk.fleet.ControlPlanes())
	b.Logf("settled: the manifests with %s applied after %v (%d tofu processes), every control plane an etcd member after %v",
		backupPolicy, applied.Round(time.Millisecond), first.tofuRuns, time.Since(start).Round(time.Millisecond))
	srv.Stop()
}

// run serves the settled fleet with backups off or on, waits until it is
// idle, and samples it.
func (bk *backupIdle) run(ctx context.Context, on bool) idleRun {
	b := bk.b
	out := idleRun{name: "backups off"}
	var args []string
	if on {
		out.name = "backups on"
		args = backupArgs(b, bk.store)
	}
	db := filepath.Join(keepDir, "data", bolt.DBFile)
	if abs, err := filepath.Abs(db); err == nil {
		db = abs
	}
	objectsBefore, _ := dirSize(bk.store)
	srv := bk.serve(args...)
	dropCache(b, db)
	start := time.Now()
	srv.Start()
	first := srv.waitApplied(b, ctx, "")
	if first.tofuRuns != 0 {
		b.Errorf("%s: the server ran tofu %d times on the settled fleet, want 0", out.name, first.tofuRuns)
	}
	srv.waitObserved(b, ctx, bk.fleet.Machines(), start)
	srv.waitEtcd(b, ctx, bk.fleet.Tenants*bk.fleet.ControlPlanes())
	if on {
		srv.waitBackups(b, ctx, bk.fleet.Tenants)
		objects, size := dirSize(bk.store)
		out.note = fmt.Sprintf("every tenant backed up %v after the start, %d backups taken by this server (%d objects, %.1f MB in the store)",
			time.Since(start).Round(time.Millisecond), (objects-objectsBefore)/3, objects, float64(size)/1e6)
	} else {
		out.note = fmt.Sprintf("settled %v after the start", time.Since(start).Round(time.Millisecond))
	}
	select {
	case <-ctx.Done():
		b.Fatal(ctx.Err())
	case <-srv.Done():
		b.Fatalf("rezuscloud serve exited\n%s", srv.Tail(40))
	case <-time.After(idleWarmup):
	}
	cpu0, t0 := srv.cpuTime(b), time.Now()
	out.rss = srv.sampleRSS(b, idleFor, db)
	out.cpu, out.window = srv.cpuTime(b)-cpu0, time.Since(t0)
	out.cpuPerS = out.cpu.Seconds() / out.window.Seconds()
	_, out.heap, out.sys = srv.scrape(b, ctx)
	srv.Stop()
	return out
}

// backupArgs are the flags of a server that backs up into the file store
// dir, encrypted to the age key kept beside it (backup.key), made the
// first time.
func backupArgs(b *testing.B, dir string) []string {
	idFile := filepath.Join(filepath.Dir(dir), "backup.key")
	kept, err := os.ReadFile(idFile)
	if errors.Is(err, fs.ErrNotExist) {
		var id *age.X25519Identity
		if id, err = age.GenerateX25519Identity(); err == nil {
			kept = []byte(id.String() + "\n")
			err = os.WriteFile(idFile, kept, 0o600)
		}
	}
	if err != nil {
		b.Fatal(err)
	}
	id, err := age.ParseX25519Identity(strings.TrimSpace(string(kept)))
	if err != nil {
		b.Fatalf("%s: %v", idFile, err)
	}
	return []string{"--backup-store", "file://" + dir, "--backup-age-recipients", id.Recipient().String(), "--backup-age-identity-file", idFile}
}

// cpuTime is the server's CPU time so far: utime + stime of
// /proc/PID/stat.
func (p *serveProc) cpuTime(b *testing.B) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid()))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command name, which is in parentheses: state
	// is the first, utime the 12th and stime the 13th.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 13 {
		b.Fatalf("/proc/%d/stat: %q", p.Pid(), stat)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// waitEtcd waits until want control planes are observed etcd members.
func (p *serveProc) waitEtcd(b *testing.B, ctx context.Context, want int) {
	b.Helper()
	p.waitItems(b, ctx, "/api/v1/machines", "control planes observed etcd members", want, func(raw json.RawMessage) (bool, error) {
		var m schema.Machine
		err := json.Unmarshal(raw, &m)
		return err == nil && m.Status.Etcd != nil && m.Status.Etcd.Member, err
	})
}

// waitBackups waits until want tenants' status says a backup succeeded.
// A tenant whose backup failed fails the benchmark.
func (p *serveProc) waitBackups(b *testing.B, ctx context.Context, want int) {
	b.Helper()
	p.waitItems(b, ctx, "/api/v1/tenants", "tenants backed up", want, func(raw json.RawMessage) (bool, error) {
		var t schema.Tenant
		if err := json.Unmarshal(raw, &t); err != nil {
			return false, err
		}
		bs := t.Status.Backup
		if bs != nil && bs.LastError != "" && bs.LastSuccess.IsZero() {
			b.Fatalf("the backup of %s failed: %s\n%s", t.Metadata.Name, bs.LastError, p.Tail(40))
		}
		return bs != nil && !bs.LastSuccess.IsZero(), nil
	})
}

// waitItems pages through the list at path every 5 s until want of its
// items satisfy ok.
func (p *serveProc) waitItems(b *testing.B, ctx context.Context, path, what string, want int, ok func(json.RawMessage) (bool, error)) {
	b.Helper()
	last := -1
	for {
		n, err := 0, error(nil)
		for offset := 0; err == nil; offset += 1000 {
			var page struct {
				Items []json.RawMessage `json:"items"`
				Total int               `json:"total"`
			}
			err = p.getJSON(ctx, fmt.Sprintf("%s?limit=1000&offset=%d", path, offset), &page)
			for _, raw := range page.Items {
				if yes, e := ok(raw); e != nil {
					b.Fatal(e)
				} else if yes {
					n++
				}
			}
			if err == nil && offset+1000 >= page.Total {
				break
			}
		}
		if err == nil && n >= want {
			return
		}
		if n != last {
			b.Logf("%d of %d %s", n, want, what)
			last = n
		}
		select {
		case <-ctx.Done():
			b.Fatalf("only %d of %d %s in time (last error %v)\n%s", n, want, what, err, p.Tail(40))
		case <-p.Done():
			b.Fatalf("rezuscloud serve exited\n%s", p.Tail(40))
		case <-time.After(5 * time.Second):
		}
	}
}

// dirSize counts the regular files under dir and their bytes.
func dirSize(dir string) (files int, size int64) {
	_ = filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			files++
			size += info.Size()
		}
		return nil
	})
	return files, size
}
