// Package watch benchmarks the server's watch fan-out: many SSE clients on
// one server while machines change at a steady rate. It drives the real
// backend.Server over real loopback TCP and must not be imported.
package watch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

var (
	flagClients  = flag.Int("clients", 1000, "concurrent SSE watch clients")
	flagRate     = flag.Int("rate", 100, "machine changes per second, one store commit each")
	flagDuration = flag.Duration("duration", 20*time.Second, "how long changes flow")
	flagSources  = flag.Int("sources", 4, "source addresses 127.0.0.1..N the clients spread over")
	flagReads    = flag.Int("reads", 0, "API reads (GET of one machine) per second while changes flow, the servers in turn")
)

// Targets of issue 5 §1.
const (
	p99Target = 100 * time.Millisecond
	rssTarget = 200 // MiB
)

// sentAnnotation carries the time (Unix nanoseconds) a change was handed
// to the store, so that a client can time its delivery.
const sentAnnotation = "bench.rezuscloud.io/sent"

// The clients run in a child process, this test binary started again with
// clientsEnv set, so that the server's memory is measured alone.
const clientsEnv = "REZUSCLOUD_WATCH_BENCH_CLIENTS"

func TestMain(m *testing.M) {
	if os.Getenv(clientsEnv) != "" {
		if err := runClients(); err != nil {
			fmt.Fprintln(os.Stderr, "watch bench clients:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// BenchmarkWatchFanout serves -clients SSE watches of /api/v1/machines/events
// from one in-process server while -rate machine changes per second go
// through the store for -duration, and measures how long each event takes
// from the store commit to each client, and the server process's memory.
// One op is the whole run: use -benchtime 1x.
func BenchmarkWatchFanout(b *testing.B) {
	var res result
	for range b.N {
		res = runFanout(b)
	}
	b.ReportMetric(float64(res.Latency.P50)/1e6, "p50-ms")
	b.ReportMetric(float64(res.Latency.P99)/1e6, "p99-ms")
	b.ReportMetric(float64(res.Latency.Max)/1e6, "max-ms")
	b.ReportMetric(float64(res.AfterCommit.P99)/1e6, "p99-after-commit-ms")
	b.ReportMetric(res.ServerHWM, "server-peak-RSS-MiB")
	b.ReportMetric(res.PeakHeap, "server-peak-heap-MiB")
	b.ReportMetric(float64(res.Delivered), "events-delivered")
	if *flagReads > 0 {
		b.ReportMetric(float64(res.Reads.P50)/1e6, "read-p50-ms")
		b.ReportMetric(float64(res.Reads.P99)/1e6, "read-p99-ms")
	}
}

type result struct {
	Reads       latencySummary
	Latency     latencySummary
	AfterCommit latencySummary
	Delivered   int64
	ServerHWM   float64
	PeakHeap    float64
}

func runFanout(b *testing.B) result {
	dir := filepath.Join(b.TempDir(), "data")
	srv, err := servertest.OpenBackend(backend.Config{DataDir: dir}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := srv.Close(); err != nil {
			b.Error(err)
		}
	}()
	return fanout(b, []*servertest.Backend{srv})
}

// fanout runs the clients' watches spread over servers, client i on
// servers[i%len(servers)], while the writer changes machines through the
// first server's store, and -reads GETs a second go to the servers in
// turn.
func fanout(b *testing.B, servers []*servertest.Backend) result {
	clients, rate, duration := *flagClients, *flagRate, *flagDuration
	st := servers[0].Store()
	var urls []string
	subscribers, cutOffs := 0, uint64(0)
	for _, s := range servers {
		urls = append(urls, s.URL())
	}
	tenant := &schema.Tenant{APIVersion: schema.APIVersion, Kind: schema.KindTenant,
		Metadata: schema.ObjectMeta{Name: "bench"}, Spec: schema.TenantSpec{KubernetesVersion: "1.34.1", TalosVersion: "1.12.6"}}
	if err := st.Update(func(tx store.Tx) error { _, err := tx.PutObject(schema.KindTenant, "bench", tenant); return err }); err != nil {
		b.Fatal(err)
	}
	baseline := procMiB(b, "VmRSS")

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), clientsEnv+"=1",
		"WATCH_BENCH_URLS="+strings.Join(urls, ","),
		"WATCH_BENCH_N="+strconv.Itoa(clients),
		"WATCH_BENCH_SOURCES="+strconv.Itoa(*flagSources))
	child.Stderr = os.Stderr
	toChild, err := child.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	fromChild, err := child.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := child.Start(); err != nil {
		b.Fatal(err)
	}
	defer child.Process.Kill()
	lines := bufio.NewScanner(fromChild)
	lines.Buffer(nil, 1<<20)
	if !lines.Scan() || lines.Text() != "ready" {
		b.Fatalf("clients did not start: %q %v", lines.Text(), lines.Err())
	}
	for _, s := range servers {
		subscribers += s.WatchSubscribers()
	}
	if n := subscribers; n != clients {
		b.Fatalf("%d watches open, want %d", n, clients)
	}
	connected := procMiB(b, "VmRSS")

	var peakHeap atomic.Uint64
	sampling := make(chan struct{})
	go func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			select {
			case <-sampling:
				return
			case <-t.C:
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > peakHeap.Load() {
					peakHeap.Store(ms.HeapInuse)
				}
			}
		}
	}()

	b.ResetTimer()
	began, cpuBefore := time.Now(), cpuTime(b)
	stopReads := make(chan struct{})
	readTimes := make(chan []time.Duration, 1)
	go func() { readTimes <- read(b, urls, *flagReads, stopReads) }()
	writes, last, commits, committed := write(b, st, rate, duration)
	took := time.Since(began)
	close(stopReads)
	reads := <-readTimes
	b.StopTimer()
	fmt.Fprintf(toChild, "end %d\n", last)
	if err := json.NewEncoder(toChild).Encode(committed); err != nil {
		b.Fatal(err)
	}
	if !lines.Scan() {
		b.Fatalf("no result from the clients: %v", lines.Err())
	}
	close(sampling)
	var cr clientsResult
	if err := json.Unmarshal(lines.Bytes(), &cr); err != nil {
		b.Fatalf("clients' result %q: %v", lines.Bytes(), err)
	}
	serverCPU := cpuTime(b) - cpuBefore
	child.Wait()
	clientsCPU := child.ProcessState.UserTime() + child.ProcessState.SystemTime()

	res := result{
		Latency:     cr.Latency,
		AfterCommit: cr.AfterCommit,
		Delivered:   cr.Received,
		ServerHWM:   procMiB(b, "VmHWM"),
		PeakHeap:    float64(peakHeap.Load()) / (1 << 20),
	}
	c50, c99, cmax := percentiles(commits)
	b.Logf("%d SSE clients (over %d source addresses), %d changes in %v (%.1f/s); store commits (fsync and publish included) p50 %v p99 %v max %v",
		clients, *flagSources, writes, took.Round(time.Millisecond), float64(writes)/took.Seconds(), c50, c99, cmax)
	for _, s := range servers {
		cutOffs += s.Hub().CutOffs()
	}
	b.Logf("%d events delivered of %d, %d clients got every event, %d cut off, over %d servers",
		cr.Received, int64(writes)*int64(clients), cr.Complete, cutOffs, len(servers))
	if len(reads) > 0 {
		res.Reads.P50, res.Reads.P99, res.Reads.Max = percentiles(reads)
		b.Logf("%d API reads (GET of one machine, the servers in turn) while changes flowed: p50 %v p99 %v max %v",
			len(reads), res.Reads.P50, res.Reads.P99, res.Reads.Max)
	}
	b.Logf("CPU: server process %v while changes flowed (%.1f µs per delivered event), clients' process %v in all; %d CPUs",
		serverCPU.Round(time.Millisecond), float64(serverCPU.Microseconds())/float64(max(cr.Received, 1)), clientsCPU.Round(time.Millisecond), runtime.NumCPU())
	b.Logf("delivery latency from Put (before the commit) to client: p50 %v p90 %v p99 %v max %v (target p99 < %v)",
		cr.Latency.P50, cr.Latency.P90, cr.Latency.P99, cr.Latency.Max, p99Target)
	b.Logf("delivery latency from the end of the commit to client: p50 %v p90 %v p99 %v max %v",
		cr.AfterCommit.P50, cr.AfterCommit.P90, cr.AfterCommit.P99, cr.AfterCommit.Max)
	b.Logf("server process: RSS %.1f MiB before the clients, %.1f MiB with them connected, peak (VmHWM) %.1f MiB (target < %d MiB); peak heap in use %.1f MiB; the clients' process peaked at %.1f MiB",
		baseline, connected, res.ServerHWM, rssTarget, res.PeakHeap, cr.HWM)
	if cr.Complete != clients {
		b.Errorf("%d of %d clients missed events", clients-cr.Complete, clients)
	}
	if cr.Latency.P99 >= p99Target {
		b.Errorf("p99 latency %v, want < %v", cr.Latency.P99, p99Target)
	}
	if res.ServerHWM >= rssTarget {
		b.Errorf("server peak RSS %.1f MiB, want < %d MiB", res.ServerHWM, rssTarget)
	}
	return res
}

// write puts one machine change every 1/rate seconds for duration,
// catching up when a commit runs late, and returns how many it made, the
// last resourceVersion, the commits' durations (fsync included) and when
// each resourceVersion's commit returned (Unix ns).
func write(b *testing.B, st store.Store, rate int, duration time.Duration) (int, uint64, []time.Duration, map[uint64]int64) {
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	var last uint64
	var commits []time.Duration
	committed := map[uint64]int64{}
	n := 0
	for ; ; n++ {
		at := start.Add(time.Duration(n) * interval)
		if at.Sub(start) >= duration {
			break
		}
		time.Sleep(time.Until(at))
		id := fmt.Sprintf("sim-%03d", n%100)
		m := &schema.Machine{APIVersion: schema.APIVersion, Kind: schema.KindMachine,
			Metadata: schema.ObjectMeta{Name: id, Labels: map[string]string{schema.LabelTenant: "bench", schema.LabelRole: schema.RoleWorker}},
			Spec: schema.MachineSpec{ManagementAddress: "10.0.0.1", ProviderID: id, ProviderClass: schema.ProviderSim,
				Hostname: id, Role: schema.RoleWorker, Tenant: "bench", NodeGroup: "workers", TFAddress: "rezussim_machine.workers[0]"},
			Status: schema.MachineStatus{Stage: schema.StageReady, Ready: true},
		}
		sent := time.Now()
		m.Metadata.Annotations = map[string]string{sentAnnotation: strconv.FormatInt(sent.UnixNano(), 10)}
		err := st.Update(func(tx store.Tx) error { _, err := tx.PutObject(schema.KindMachine, id, m); return err })
		if err == nil {
			last, err = strconv.ParseUint(m.Metadata.ResourceVersion, 10, 64)
		}
		if err != nil {
			b.Fatal(err)
		}
		end := time.Now()
		commits = append(commits, end.Sub(sent))
		committed[last] = end.UnixNano()
	}
	return n, last, commits, committed
}

// read GETs one machine perSecond times a second from urls in turn until
// stop, and returns how long each GET took to its last byte.
func read(b *testing.B, urls []string, perSecond int, stop <-chan struct{}) []time.Duration {
	if perSecond <= 0 {
		return nil
	}
	tick := time.NewTicker(time.Second / time.Duration(perSecond))
	defer tick.Stop()
	var took []time.Duration
	for i := 0; ; i++ {
		select {
		case <-stop:
			return took
		case <-tick.C:
		}
		start := time.Now()
		resp, err := http.Get(fmt.Sprintf("%s/api/v1/machines/sim-%03d", urls[i%len(urls)], i%100))
		if err != nil {
			b.Error(err)
			return took
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		// Before the writer's first change of a machine, it is not found.
		if err != nil || resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
			b.Errorf("GET machine: %v %s", err, resp.Status)
			return took
		}
		took = append(took, time.Since(start))
	}
}

// percentiles returns the 50th and 99th percentile and the maximum.
func percentiles(ds []time.Duration) (p50, p99, top time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)*99/100], s[len(s)-1]
}

// cpuTime returns the user and system CPU time this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procMiB reads a VmXXX field of /proc/self/status in MiB.
func procMiB(b *testing.B, field string) float64 {
	kib, err := procKiB(field)
	if err != nil {
		b.Fatal(err)
	}
	return float64(kib) / 1024
}

func procKiB(field string) (int64, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/self/status", field)
}

// clientsResult is what the clients' process reports.
type clientsResult struct {
	Received int64          `json:"received"`
	Complete int            `json:"complete"`
	Latency  latencySummary `json:"latency"`
	// AfterCommit times the same deliveries from the end of their commit.
	AfterCommit latencySummary `json:"afterCommit"`
	HWM         float64        `json:"hwmMiB"`
}

type latencySummary struct {
	P50, P90, P99, Max time.Duration
}

// histogram counts latencies in 100µs buckets up to 10s.
type histogram struct {
	buckets [100000]atomic.Int64
	max     atomic.Int64
}

func (h *histogram) add(d time.Duration) {
	i := min(max(int(d/(100*time.Microsecond)), 0), len(h.buckets)-1)
	h.buckets[i].Add(1)
	for {
		m := h.max.Load()
		if int64(d) <= m || h.max.CompareAndSwap(m, int64(d)) {
			return
		}
	}
}

func (h *histogram) summary() latencySummary {
	var total int64
	for i := range h.buckets {
		total += h.buckets[i].Load()
	}
	at := func(q float64) time.Duration {
		want := int64(q * float64(total))
		var seen int64
		for i := range h.buckets {
			if seen += h.buckets[i].Load(); seen > want {
				return time.Duration(i+1) * 100 * time.Microsecond
			}
		}
		return time.Duration(h.max.Load())
	}
	return latencySummary{P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: time.Duration(h.max.Load())}
}

// runClients is the clients' process: it opens the watches, says "ready"
// once every one has its current state, times every event, and after
// "end RV" on stdin waits for every client to reach RV and reports.
func runClients() error {
	urls := strings.Split(os.Getenv("WATCH_BENCH_URLS"), ",")
	n, err := strconv.Atoi(os.Getenv("WATCH_BENCH_N"))
	if err != nil {
		return err
	}
	sources, err := strconv.Atoi(os.Getenv("WATCH_BENCH_SOURCES"))
	if err != nil || sources < 1 {
		return fmt.Errorf("WATCH_BENCH_SOURCES: %v", err)
	}
	var hist histogram
	var received atomic.Int64
	lastSeen := make([]atomic.Uint64, n)
	deliveries := make([][]delivery, n)
	var ready, failed sync.WaitGroup
	// Closing stop ends every watch, before their deliveries are read.
	stop := make(chan struct{})
	ready.Add(n)
	errs := make(chan error, n)
	for i := range n {
		src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+i%sources))}
		failed.Add(1)
		go func() {
			defer failed.Done()
			err := watchOne(urls[i%len(urls)]+"/api/v1/machines/events?sse=true", src, &hist, &received, &lastSeen[i], &deliveries[i], ready.Done, stop)
			if err != nil {
				errs <- err
			}
		}()
		if i%100 == 99 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	waited := make(chan struct{})
	go func() { ready.Wait(); close(waited) }()
	select {
	case <-waited:
	case err := <-errs:
		return err
	case <-time.After(60 * time.Second):
		return errors.New("clients not ready after 60s")
	}
	fmt.Println("ready")

	in := bufio.NewReader(os.Stdin)
	var end uint64
	if _, err := fmt.Fscanf(in, "end %d\n", &end); err != nil {
		return fmt.Errorf("read end: %w", err)
	}
	var committed map[uint64]int64
	if err := json.NewDecoder(in).Decode(&committed); err != nil {
		return fmt.Errorf("read commit times: %w", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	complete := 0
	for time.Now().Before(deadline) {
		complete = 0
		for i := range lastSeen {
			if lastSeen[i].Load() >= end {
				complete++
			}
		}
		if complete == n {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	hwm, err := procKiB("VmHWM")
	if err != nil {
		return err
	}
	close(stop)
	failed.Wait()
	var after histogram
	for _, ds := range deliveries {
		for _, d := range ds {
			if c, ok := committed[d.rv]; ok {
				after.add(time.Duration(max(0, d.at-c)))
			}
		}
	}
	out, err := json.Marshal(clientsResult{Received: received.Load(), Complete: complete, Latency: hist.summary(), AfterCommit: after.summary(), HWM: float64(hwm) / 1024})
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	return nil
}

// delivery is one event a client received: its resourceVersion and when
// (Unix ns).
type delivery struct {
	rv uint64
	at int64
}

var sentKey = []byte(`"` + sentAnnotation + `":"`)

// watchOne reads one SSE watch over a raw connection from src: it calls
// ready after the current state, then times each event by its sent
// annotation and records the last id it saw, until stop is closed.
func watchOne(url string, src *net.TCPAddr, hist *histogram, received *atomic.Int64, lastSeen *atomic.Uint64, deliveries *[]delivery, ready func(), stop <-chan struct{}) error {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		ready()
		return err
	}
	d := net.Dialer{LocalAddr: src, Timeout: 10 * time.Second}
	conn, err := d.Dial("tcp", req.URL.Host)
	if err != nil {
		ready()
		return fmt.Errorf("dial from %s: %w", src.IP, err)
	}
	defer conn.Close()
	go func() { <-stop; conn.Close() }()
	if err := req.Write(conn); err != nil {
		ready()
		return err
	}
	br := bufio.NewReaderSize(conn, 16<<10)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		ready()
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		ready()
		return fmt.Errorf("watch: %s", resp.Status)
	}
	r := bufio.NewReaderSize(resp.Body, 16<<10)
	started := false
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			if !started {
				ready()
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		now := time.Now()
		switch {
		case bytes.HasPrefix(line, []byte("id: ")):
			id, err := strconv.ParseUint(string(bytes.TrimSpace(line[4:])), 10, 64)
			if err != nil {
				return fmt.Errorf("id line %q: %w", line, err)
			}
			lastSeen.Store(id)
		case bytes.HasPrefix(line, []byte("data: ")):
			i := bytes.Index(line, sentKey)
			if i < 0 {
				continue // the tenant or a machine from before the run
			}
			v := line[i+len(sentKey):]
			v = v[:bytes.IndexByte(v, '"')]
			ns, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return fmt.Errorf("sent annotation %q: %w", v, err)
			}
			hist.add(now.Sub(time.Unix(0, ns)))
			received.Add(1)
			// The id line comes before the data line of its frame.
			*deliveries = append(*deliveries, delivery{rv: lastSeen.Load(), at: now.UnixNano()})
		case len(bytes.TrimSpace(line)) == 0 && !started:
			// The first frame without data after retry: the id line that
			// ends the current state.
			if lastSeen.Load() > 0 {
				started = true
				ready()
			}
		}
	}
}
