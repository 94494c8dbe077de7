package reconcile

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

// idleRSSTarget is issue 16's bound on the server's resident memory with
// 1,000 tenants × 8 machines, idle, serving their simulated Talos nodes,
// in MB (10^6 bytes).
const idleRSSTarget = 300

// idleFor is how long BenchmarkServeIdleRSS watches the idle server:
// `-args -idle D`, at least a few probe intervals.
var idleFor = time.Minute

// settleFor is how long BenchmarkServeIdleRSS waits, once every machine
// has been observed, before it samples (`-args -settle D`): on a fleet
// whose machines were observed by an earlier server, they count as
// observed while the new server's first probes still run. Meanwhile it
// logs any machine that is no longer connected, and why.
var settleFor time.Duration

// serveArgs are more flags of the server that BenchmarkServeIdleRSS
// starts (`-args -serve-args '--talos-watch=false --probe-ttl 24h'`): for
// a baseline whose plane keeps no connection open, say.
var serveArgs string

// simApart makes BenchmarkServeIdleRSS serve the fleet's simulated nodes
// from a process of their own (`-args -sim-apart`).
var simApart bool

func init() {
	flag.DurationVar(&idleFor, "idle", idleFor, "how long BenchmarkServeIdleRSS samples the idle server")
	flag.DurationVar(&settleFor, "settle", 0, "how long BenchmarkServeIdleRSS waits before it samples, once every machine is observed")
	flag.StringVar(&serveArgs, "serve-args", "", "BenchmarkServeIdleRSS: more flags of the server, separated by spaces")
	flag.BoolVar(&simApart, "sim-apart", false, "BenchmarkServeIdleRSS: serve the simulated nodes from 'rezuscloud sim serve' in a process of their own (the server on --sim-world), so that the server's RSS is its own")
}

// BenchmarkServeIdleRSS measures the resident memory of the real
// `rezuscloud serve` process, idle, on the fleet kept in -keep DIR by an
// earlier run of BenchmarkFleet: the server starts on that data dir and
// sim dir (`--data DIR/data --sim-dir DIR/sim`) with the fleet written to
// a --dir, serves every machine of the sim dir as a simulated Talos node
// from its own process, and reconciles the fleet's commit: no tofu, as the
// fleet is applied, and the Talos plane bootstraps each tenant once. The
// benchmark waits until the observer has probed every machine and found
// it connected (a kept fleet's machines have no status before its first
// server), then samples VmRSS once a second for -idle (default 1m,
// 4 probe intervals of 15 s). idle-RSS-MB is the highest sample; the log
// also has the peak (VmHWM) of the whole run, which includes the
// bootstrap of every tenant. With -sim-apart the nodes run in a process of
// their own (`rezuscloud sim serve`, the server on --sim-world), as
// machines do, and the server's RSS is its own.
func BenchmarkServeIdleRSS(b *testing.B) {
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
	if err := fleet.WriteDir(repo); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	db, err := filepath.Abs(filepath.Join(keepDir, "data", bolt.DBFile))
	if err != nil {
		b.Fatal(err)
	}
	simDir := filepath.Join(keepDir, "sim")
	if simApart {
		startSimWorld(b, ctx, simDir)
	}
	for range b.N {
		args := []string{"--sim-dir", simDir, "--debounce", "0"}
		if simApart {
			args = []string{"--sim-world", simDir, "--debounce", "0"}
		}
		if profileDir != "" {
			args = append(args, "--pprof-listen", "127.0.0.1:0")
		}
		args = append(args, strings.Fields(serveArgs)...)
		srv := newServe(b, servertest.Options{Data: filepath.Join(keepDir, "data"), Dir: repo, SimCloud: !simApart, Args: args})
		dropCache(b, db)
		start := time.Now()
		srv.Start()
		ready := srv.waitReady(b, ctx, start)
		first := srv.waitApplied(b, ctx, "")
		applied := time.Since(start)
		if first.machines != fleet.Machines() {
			b.Fatalf("the server has %d machines, want %d", first.machines, fleet.Machines())
		}
		observed := srv.waitObserved(b, ctx, fleet.Machines(), start)
		srv.settle(b, ctx, fleet.Machines(), settleFor)
		cpu0, idleStart := srv.cpuTime(b), time.Now()
		idle := srv.sampleRSS(b, idleFor, db)
		idleCPU := (srv.cpuTime(b) - cpu0).Seconds() / time.Since(idleStart).Seconds()
		if profileDir != "" {
			srv.saveIdleProfile(b, ctx, profileDir)
		}
		tofuRuns, heap, sys := srv.scrape(b, ctx)
		peak := srv.mb("VmHWM")
		srv.Stop()
		srv.logStopped(b)
		b.ReportMetric(idle.maxMB, "idle-RSS-MB")
		b.ReportMetric(100*idleCPU, "idle-cpu-%")
		b.ReportMetric(peak, "peak-RSS-MB")
		b.ReportMetric(float64(first.tofuRuns), "tofu-runs")
		b.ReportMetric(ready.Seconds(), "ready-s")
		where := "in the server's process"
		if simApart {
			where = "in a process of their own"
		}
		b.Logf("rezuscloud serve on %d tenants × %d machines (%d simulated Talos nodes %s): ready (/readyz 200) after %v, first commit applied in %v (%d tofu processes: %s), every machine observed connected after %v",
			fleet.Tenants, fleet.perTenant(), fleet.Machines(), where, ready.Round(time.Millisecond), applied.Round(time.Millisecond), first.tofuRuns, tofuRuns, observed.Round(time.Millisecond))
		b.Logf("idle for %v after %v more: VmRSS %.1f–%.1f MB (mean %.1f; at the end %.1f MB anonymous, %.1f MB of the store file mapped), peak of the run (VmHWM) %.1f MB; Go heap in use %.1f MiB of %.1f MiB from the OS; CPU %.2f %% of a core; target < %d MB idle",
			idleFor, settleFor, idle.minMB, idle.maxMB, idle.meanMB, idle.anonMB, idle.dbMB, peak, heap, sys, 100*idleCPU, idleRSSTarget)
		if first.tofuRuns != 0 {
			b.Errorf("the restarted server ran tofu %d times on an applied fleet, want 0", first.tofuRuns)
		}
		if idle.maxMB >= idleRSSTarget {
			b.Errorf("idle RSS %.1f MB, want < %d MB", idle.maxMB, idleRSSTarget)
		}
	}
}

// startSimWorld runs `rezuscloud sim serve` on dir until the benchmark
// ends, and returns once its machines have booted.
func startSimWorld(b *testing.B, ctx context.Context, dir string) {
	b.Helper()
	cmd := exec.CommandContext(ctx, servertest.Binary(b), "sim", "serve", "--sim-dir", dir, "--log-format", "json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "simulated world serving") {
			go io.Copy(io.Discard, stderr)
			return
		}
	}
	b.Fatalf("rezuscloud sim serve on %s ended before its machines booted", dir)
}

// waitObserved waits until every one of want machines has been probed and
// answered, and returns how long after start that was. The observer writes
// a machine's status only when its facts change, so a machine's lastSeen
// stays from its first probe; the machines of a fleet the rig applied
// have no status before the first server observes them.
func (p *serveProc) waitObserved(b *testing.B, ctx context.Context, want int, start time.Time) time.Duration {
	b.Helper()
	last := -1
	for {
		connected, why, err := p.connected(ctx)
		if err == nil && connected >= want {
			return time.Since(start)
		}
		if connected != last {
			b.Logf("%v: %d of %d machines observed connected; not: %q", time.Since(start).Round(time.Second), connected, want, why)
			last = connected
		}
		select {
		case <-ctx.Done():
			b.Fatalf("only %d of %d machines were observed connected in time (last error %v)\n%s", connected, want, err, p.Tail(40))
		case <-p.Done():
			b.Fatalf("rezuscloud serve exited\n%s", p.Tail(40))
		case <-time.After(5 * time.Second):
		}
	}
}

// logStopped logs the server's lines about machines that stopped
// answering, which a restart of a large fleet should have none of: the
// fleet's machines all run.
func (p *serveProc) logStopped(b *testing.B) {
	b.Helper()
	var lines []string
	for _, line := range strings.Split(p.LogWithoutRequests(), "\n") {
		if strings.Contains(line, "machine stopped answering") {
			lines = append(lines, line)
		}
	}
	if len(lines) > 0 {
		b.Logf("%d machines stopped answering while the server ran; the first:\n%s", len(lines), strings.Join(lines[:min(len(lines), 10)], "\n"))
	}
}

// fetchProfile gets a profile from the server's pprof endpoint at url.
func fetchProfile(b *testing.B, ctx context.Context, url string) []byte {
	b.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		b.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("%s: %s %v", url, resp.Status, err)
	}
	return data
}

// connected counts the machines whose stored status is connected, and
// says why the first few of the others are not.
func (p *serveProc) connected(ctx context.Context) (n int, why []string, err error) {
	for offset := 0; ; offset += 1000 {
		var page struct {
			Items []schema.Machine `json:"items"`
			Total int              `json:"total"`
		}
		if err := p.getJSON(ctx, fmt.Sprintf("/api/v1/machines?limit=1000&offset=%d", offset), &page); err != nil {
			return n, why, err
		}
		for _, m := range page.Items {
			switch {
			case m.Status.Connected:
				n++
			case len(why) < 3:
				why = append(why, m.Metadata.Name+": "+m.Status.LastError)
			}
		}
		if offset+1000 >= page.Total {
			return n, why, nil
		}
	}
}

// settle waits d, and logs every 5 s when machines observed before are
// not connected, and why: a restart should not turn any.
func (p *serveProc) settle(b *testing.B, ctx context.Context, want int, d time.Duration) {
	b.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Second) {
		if n, why, err := p.connected(ctx); err == nil && n < want {
			b.Logf("settling: %d of %d machines connected; not: %q", n, want, why)
		}
	}
}

// rssSamples are VmRSS samples of a process, in MB, with the anonymous
// part and the store file's mapped pages at the last one.
type rssSamples struct {
	minMB, maxMB, meanMB, anonMB, dbMB float64
}

// sampleRSS reads the server's VmRSS once a second for d; db is the
// store file.
func (p *serveProc) sampleRSS(b *testing.B, d time.Duration, db string) rssSamples {
	b.Helper()
	var s rssSamples
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Second) {
		mb := p.mb("VmRSS")
		if n == 0 || mb < s.minMB {
			s.minMB = mb
		}
		s.maxMB = max(s.maxMB, mb)
		s.meanMB += mb
		s.anonMB = p.mb("RssAnon")
		n++
	}
	s.meanMB /= float64(max(n, 1))
	s.dbMB = mappedMB(b, p.Pid(), db)
	return s
}

// mappedMB sums the Rss of pid's mappings of file, from /proc/PID/smaps.
func mappedMB(b *testing.B, pid int, file string) float64 {
	smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		b.Fatal(err)
	}
	var kib float64
	in := false
	for _, line := range strings.Split(string(smaps), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && !strings.HasSuffix(f[0], ":") { // a mapping's first line
			in = len(f) >= 6 && f[5] == file
			continue
		}
		if in && len(f) == 3 && f[0] == "Rss:" {
			n, _ := strconv.ParseFloat(f[1], 64)
			kib += n
		}
	}
	return kib * 1024 / 1e6
}

// dropCache drops the store file's pages from the page cache (`dd
// iflag=nocache count=0`), so that the server maps only the pages it
// reads. A file just copied or written sits in the page cache in large
// folios, and reading one of its pages maps the whole folio: reading the
// 2,000 Machine records of the 250 × 8 fleet (747 pages) mapped 42 MB of
// a copied file, and 3 MB of one read from disk.
func dropCache(b *testing.B, file string) {
	out, err := exec.Command("dd", "if="+file, "iflag=nocache", "count=0", "status=none").CombinedOutput()
	if err != nil {
		b.Fatalf("drop the page cache of %s: %v\n%s", file, err, out)
	}
}

// saveIdleProfile writes to dir the server's heap profile (after a
// garbage collection, from its --pprof-listen) and its runtime.MemStats
// right after, its goroutines' stacks, a profile of its CPU over 30 s and
// its /proc/PID/smaps, as serve-idle.heap.pprof, serve-idle.heap.txt,
// serve-idle.goroutines.txt, serve-idle.cpu.pprof and serve-idle.smaps;
// read the profiles with `go tool pprof -sample_index=inuse_space -top BIN
// FILE` and `go tool pprof -top BIN FILE`.
func (p *serveProc) saveIdleProfile(b *testing.B, ctx context.Context, dir string) {
	b.Helper()
	base := p.PprofURL()
	if base == "" {
		b.Fatal("the server did not log its pprof address")
	}
	heap := fetchProfile(b, ctx, base+"/debug/pprof/heap?gc=1")
	memStats := fetchProfile(b, ctx, base+"/debug/pprof/heap?debug=1")
	goroutines := fetchProfile(b, ctx, base+"/debug/pprof/goroutine?debug=1")
	cpu := fetchProfile(b, ctx, base+"/debug/pprof/profile?seconds=30")
	smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", p.Pid()))
	if err != nil {
		b.Fatal(err)
	}
	files := map[string][]byte{
		"serve-idle.heap.pprof": heap, "serve-idle.heap.txt": memStats,
		"serve-idle.goroutines.txt": goroutines, "serve-idle.cpu.pprof": cpu,
		"serve-idle.smaps": smaps,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
}
