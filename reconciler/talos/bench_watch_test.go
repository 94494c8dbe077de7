package talos

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

// BenchmarkObserveWatchVsPoll observes the bench fleet (100 tenants × 8
// machines, REZUSCLOUD_BENCH_TENANTS tenants when set), served by another
// process, with the observer's defaults: by watch, and by polling (one
// probe per machine per 15 s TTL). After the first pass and a settling
// time it reports the plane's idle CPU (percent of one core) and RSS over
// REZUSCLOUD_BENCH_IDLE_FOR (default 30 s), its goroutines, its heap and
// stacks per machine (the heap's spans in use, and the live objects in
// them), the probes that events prompted from the start until then
// (prompted-before-idle: the events of changes, and the machines read
// while their stream opened), one sample of every machine's gauges (the
// machines that answered, its wall time and the plane's CPU), and then, for 40 machines (8 when polling) turned
// unready by the faults file one after the other, the
// p50 and p99 latency from the faults file's write to the store's commit
// of the machine's status (which includes the node host's 20 ms
// debounce of the file's notifications).
//
//	go test -run '^$' -bench ObserveWatchVsPoll -benchtime 1x ./reconciler/talos/
//
// REZUSCLOUD_BENCH_HEAP_PROFILE=FILE writes the heap's profile to FILE
// once the fleet is idle.
//
// As the server does at the end of its start-up, the benchmark returns the
// heap's free memory to the system after the first pass. It also reports
// the RSS before the observer starts, with the store and the fleet's
// records open (base-rss-MiB), and how far the anonymous RSS grew past
// its own at base (anon-rss-over-base-MiB): the RSS growth but for the
// pages of mapped files, such as the store's file, whose pages the
// plane's status writes bring in. REZUSCLOUD_BENCH_MEMORY_LIMIT=SIZE (such as
// 270MiB) gives the process the memory limit that the server's
// --memory-limit would.
//
// The variants: "watch" follows every machine by watch (MaxWatched -1),
// "watch-bounded" the first DefaultMaxWatched (the server's default) and
// probes the others, "poll" probes every machine.
// REZUSCLOUD_BENCH_MAX_WATCHED=N bounds "watch-bounded" at N instead.
func BenchmarkObserveWatchVsPoll(b *testing.B) {
	for _, v := range []struct {
		name       string
		maxWatched int
	}{{"watch", -1}, {"watch-bounded", DefaultMaxWatched}, {"poll", 0}} {
		b.Run(v.name, func(b *testing.B) { benchObserve(b, v.name != "poll", v.maxWatched) })
	}
}

func benchObserve(b *testing.B, watch bool, maxWatched int) {
	if n, err := strconv.Atoi(os.Getenv("REZUSCLOUD_BENCH_MAX_WATCHED")); err == nil && maxWatched > 0 {
		maxWatched = n
	}
	secrets := bundle(b, "fleet")
	simDir := filepath.Join(b.TempDir(), "sim")
	ms := startBenchHostIn(b, simDir, secrets, nil)
	st, err := bolt.Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	putFleet(b, st, ms)
	setBenchMemoryLimit(b)
	runtime.GC()
	debug.FreeOSMemory()
	baseRSS, baseAnon := rssKiB(), anonRSSKiB()
	pool := NewPool(PoolOptions{})
	defer pool.Close()
	pl, err := New(Options{Store: st, Pool: pool})
	if err != nil {
		b.Fatal(err)
	}
	written := newCommitClock(st)
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		pl.RunObserver(ctx, ObserverOptions{Watch: watch, MaxWatched: maxWatched, Bundle: func(string) []byte { return secrets }, AfterFirstPass: func() { close(first) }})
	}()
	defer func() { cancel(); <-done }()
	<-first
	if watch {
		want := len(ms)
		if maxWatched > 0 {
			want = min(want, maxWatched)
		}
		eventually(b, "the machines watched", func() bool { return pl.Watching() == want })
	}
	time.Sleep(5 * time.Second) // settle: the first pass's writes and garbage
	debug.FreeOSMemory()
	idleFor := 30 * time.Second
	if d, err := time.ParseDuration(os.Getenv("REZUSCLOUD_BENCH_IDLE_FOR")); err == nil {
		idleFor = d
	}
	stopProfile := startIdleProfile(b, os.Getenv("REZUSCLOUD_BENCH_IDLE_CPU_PROFILE"))
	start, cpu0, probes0 := time.Now(), cpuTime(), pl.prober.Probes()
	prompted := pl.watches.prompts.Load()
	maxRSS, maxAnon, hostRSS := 0, 0, 0
	for time.Since(start) < idleFor {
		maxRSS, hostRSS = max(maxRSS, rssKiB()), max(hostRSS, rssKiBOf(strconv.Itoa(benchHostPID)))
		maxAnon = max(maxAnon, anonRSSKiB())
		time.Sleep(time.Second)
	}
	wall := time.Since(start)
	stopProfile()
	b.ReportMetric(100*(cpuTime()-cpu0).Seconds()/wall.Seconds(), "idle-cpu-%")
	b.ReportMetric(float64(maxRSS)/1024, "rss-MiB")
	b.ReportMetric(float64(baseRSS)/1024, "base-rss-MiB")
	b.ReportMetric(float64(maxAnon-baseAnon)/1024, "anon-rss-over-base-MiB")
	b.ReportMetric(float64(hostRSS)/1024, "host-rss-MiB")
	b.ReportMetric(float64(pl.prober.Probes()-probes0)/wall.Seconds(), "probes/s")
	b.ReportMetric(float64(prompted), "prompted-before-idle")
	b.ReportMetric(float64(runtime.NumGoroutine()), "goroutines")
	b.ReportMetric(float64(openFDs()), "fds")

	var mem runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&mem)
	b.ReportMetric(float64(mem.HeapInuse+mem.StackInuse)/float64(len(ms))/1024, "heap+stack-KiB/machine")
	b.ReportMetric(float64(mem.StackInuse)/float64(len(ms))/1024, "stack-KiB/machine")
	b.ReportMetric(float64(mem.HeapAlloc)/float64(len(ms))/1024, "live-heap-KiB/machine")
	if path := os.Getenv("REZUSCLOUD_BENCH_HEAP_PROFILE"); path != "" {
		writeHeapProfile(b, path)
		writeGoroutines(b, path+".goroutines")
	}
	benchSample(b, ctx, pl)

	changes := 40
	if !watch || maxWatched > 0 && maxWatched < len(ms) {
		changes = 8 // each may wait for a probe, up to the TTL
	}
	lat := benchLatency(b, simDir, ms, written, changes)
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "p99-ms")
}

// setBenchMemoryLimit gives the process REZUSCLOUD_BENCH_MEMORY_LIMIT as
// its memory limit, when set.
func setBenchMemoryLimit(b *testing.B) {
	spec := os.Getenv("REZUSCLOUD_BENCH_MEMORY_LIMIT")
	if spec == "" {
		return
	}
	n, err := humanize.ParseBytes(spec)
	if err != nil {
		b.Fatalf("REZUSCLOUD_BENCH_MEMORY_LIMIT: %v", err)
	}
	was := debug.SetMemoryLimit(int64(n))
	b.Cleanup(func() { debug.SetMemoryLimit(was) })
}

// benchLatency turns 40 workers unready, one at a time, through the
// faults file, and returns the sorted times until the store committed
// each one's status.
func benchLatency(b *testing.B, simDir string, ms []Machine, written *commitClock, changes int) []time.Duration {
	var workers []Machine
	for _, m := range ms {
		if !m.ControlPlane {
			workers = append(workers, m)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var lat []time.Duration
	for range changes {
		m := workers[rng.IntN(len(workers))]
		for _, f := range []talosnode.Fault{{Unhealthy: "kubelet"}, {}} {
			at := time.Now()
			wait := written.next(m.ID)
			faults := talosnode.Faults{}
			if f.Unhealthy != "" {
				faults[m.ID] = f
			}
			if err := talosnode.WriteFaults(simDir, faults); err != nil {
				b.Fatal(err)
			}
			select {
			case w := <-wait:
				if f.Unhealthy != "" {
					lat = append(lat, w.Sub(at))
				}
			case <-time.After(time.Minute):
				b.Fatalf("machine %s: no status written within a minute", m.ID)
			}
		}
	}
	slices.Sort(lat)
	return lat
}

// commitClock tells when the store next commits a machine's status.
type commitClock struct {
	mu      sync.Mutex
	waiting map[string]chan time.Time
}

func newCommitClock(st store.Store) *commitClock {
	c := &commitClock{waiting: map[string]chan time.Time{}}
	st.OnCommit(func(changes []store.Change) {
		now := time.Now()
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, ch := range changes {
			if ch.Resource.Kind != schema.KindMachine {
				continue
			}
			if w := c.waiting[ch.Resource.Name]; w != nil {
				w <- now
				delete(c.waiting, ch.Resource.Name)
			}
		}
	})
	return c
}

func (c *commitClock) next(id string) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.waiting[id] = ch
	return ch
}

// benchTenantCount sizes the bench fleet: REZUSCLOUD_BENCH_TENANTS
// tenants of 8 machines, default benchTenants.
func benchTenantCount() int {
	if n, err := strconv.Atoi(os.Getenv("REZUSCLOUD_BENCH_TENANTS")); err == nil && n > 0 && n <= 250*8 {
		return n
	}
	return benchTenants
}

// startIdleProfile starts a CPU profile into path, when it is set, and
// returns what stops it: the profile of the idle window alone, without
// the fleet's boot (go tool pprof -top).
func startIdleProfile(b *testing.B, path string) (stop func()) {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// writeHeapProfile writes the heap's profile to path, for a look at what
// the watched fleet holds (go tool pprof -sample_index inuse_space).
func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

// writeGoroutines writes the goroutines' stacks, grouped, to path.
func writeGoroutines(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("goroutine").WriteTo(f, 1); err != nil {
		b.Fatal(err)
	}
}

// benchSample samples the fleet's gauges once, as the sampler does every
// minute, and reports how many machines answered and what that took.
func benchSample(b *testing.B, ctx context.Context, pl *Plane) {
	cpu0, start := cpuTime(), time.Now()
	n := 0
	for _, byID := range pl.Sample(ctx) {
		n += len(byID)
	}
	b.ReportMetric(float64(n), "sampled-machines")
	b.ReportMetric(float64(time.Since(start).Milliseconds()), "sample-ms")
	b.ReportMetric(float64((cpuTime() - cpu0).Milliseconds()), "sample-cpu-ms")
}
