package test

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/etcdtest"
	"github.com/rezuscloud/rezuscloud/internal/gittest"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/schema"
)

// BenchmarkFailover measures how long a tenant waits when the replica
// that runs it dies: three replicas of `rezuscloud serve` on a
// three-member etcd and one simulated world, as TestReplicasTakeOver runs
// them, with tenant staging. One op pushes a commit that changes
// staging's worker count, waits until staging's owner applies it,
// SIGKILLs that replica, and times
//
//   - taken-ms: until a surviving replica holds staging's shard in etcd
//     (polled every 20 ms);
//   - tofu-ms: until that replica has started a tofu process (its
//     status's tofuRuns, polled every 20 ms): the tenant's next run;
//   - run-ms: until the startedAt of staging's result in the commit, as
//     the new owner recorded it (its clock is the benchmark's);
//   - done-ms: until the commit has succeeded.
//
// Each figure is reported as its minimum, median and maximum over the
// ops; -test.v logs every op. The benchmark fails when the median tofu-ms
// is not under the lease and failoverTarget. Then the killed replica
// starts again on its data dir, as its supervisor would restart it, the
// three agree on the leader, and staging moves back to it before the next
// op.
//
// It runs only with REZUSCLOUD_BENCH_FAILOVER=1, and takes minutes:
//
//	REZUSCLOUD_BENCH_FAILOVER=1 go test ./test -run '^$' -bench 'Failover/ttl=3s' -benchtime 20x -timeout 60m -v
func BenchmarkFailover(b *testing.B) {
	if os.Getenv("REZUSCLOUD_BENCH_FAILOVER") != "1" {
		b.Skip("set REZUSCLOUD_BENCH_FAILOVER=1 to run the failover benchmark (minutes)")
	}
	for _, ttl := range []time.Duration{3 * time.Second, 15 * time.Second} {
		b.Run("ttl="+ttl.String(), func(b *testing.B) { benchFailover(b, ttl) })
	}
}

// failoverTimes are one op's times from the SIGKILL of the owner.
type failoverTimes struct {
	taken, tofu, run, done time.Duration
}

func benchFailover(b *testing.B, ttl time.Duration) {
	rs := startBenchReplicas(b, ttl)
	names := []string{"r0", "r1", "r2"}
	leader := rs.agree(names)
	waitCommit(rs.servers[others(names, leader)[0]], rs.first, schema.CommitSucceeded)
	var ops []failoverTimes
	workers := 1
	for b.Loop() {
		workers = 3 - workers // 1, 2, 1, ...
		owner := shardHolder(rs.etcd, "staging")
		ops = append(ops, rs.killDuringApply(owner, workers))
		rs.servers[owner].Start()
		rs.agree(names)
		b.StopTimer()
		for shardHolder(rs.etcd, "staging") != owner {
			time.Sleep(20 * time.Millisecond)
		}
		b.StartTimer()
	}
	pick := func(f func(failoverTimes) time.Duration) []time.Duration {
		var ds []time.Duration
		for _, op := range ops {
			ds = append(ds, f(op))
		}
		slices.Sort(ds)
		return ds
	}
	for _, m := range []struct {
		unit string
		f    func(failoverTimes) time.Duration
	}{
		{"taken", func(o failoverTimes) time.Duration { return o.taken }},
		{"tofu", func(o failoverTimes) time.Duration { return o.tofu }},
		{"run", func(o failoverTimes) time.Duration { return o.run }},
		{"done", func(o failoverTimes) time.Duration { return o.done }},
	} {
		ds := pick(m.f)
		b.ReportMetric(ms(ds[0]), m.unit+"-min-ms")
		b.ReportMetric(ms(ds[len(ds)/2]), m.unit+"-median-ms")
		b.ReportMetric(ms(ds[len(ds)-1]), m.unit+"-max-ms")
	}
	if median := pick(func(o failoverTimes) time.Duration { return o.tofu })[len(ops)/2]; median >= ttl+failoverTarget {
		b.Errorf("the next run started %v after the owner was killed (median of %d), want under the lease and %v", median, len(ops), failoverTarget)
	}
}

// failoverTarget is how much longer than the lease the median takeover
// may take, from the SIGKILL of the owner to the tenant's next run.
const failoverTarget = 5 * time.Second

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// benchReplicas is startReplicas for a benchmark, with a lease of ttl.
type benchReplicas struct {
	b       *testing.B
	etcd    *clientv3.Client
	work    *gittest.Workdir
	first   string
	servers map[string]*servertest.Server
}

// startBenchReplicas starts etcd (three members in the process), the
// simulated world, a repository with tenant staging, a balancer and
// three replicas r0, r1 and r2 with a lease of ttl.
func startBenchReplicas(b *testing.B, ttl time.Duration) *benchReplicas {
	etcd := etcdtest.Start(b, 3)
	world := filepath.Join(b.TempDir(), "world")
	startBenchWorld(b, world)
	daemon := gittest.NewDaemon(b)
	daemon.CreateBare("repo.git")
	repo := daemon.URL("repo.git")
	rs := &benchReplicas{b: b, etcd: etcd.Client(b), work: gittest.NewWorkdir(b, repo), servers: map[string]*servertest.Server{}}
	rs.writeStaging()
	rs.first = rs.work.Commit("Tenant staging")
	rs.work.Push()
	lb := startBenchBalancer(b)
	for _, name := range []string{"r0", "r1", "r2"} {
		s := servertest.New(b, servertest.Options{Data: filepath.Join(b.TempDir(), name), Repo: repo, Path: e2eManifests, Args: []string{
			"--store", "etcd", "--etcd-endpoints", strings.Join(etcd.Endpoints(), ","),
			"--replica-name", name, "--lease-ttl", ttl.String(), "--state-url", lb.url(),
			"--sim-world", world, "--poll-interval", "300ms", "--debounce", "0s",
			"--probe-ttl", "300ms", "--talos-timeout", "5s", "--talos-wait", "30s", "--drift-interval", "0"}})
		s.Start()
		rs.servers[name] = s
		lb.add(s.Addr())
	}
	return rs
}

// writeStaging writes the example tenant staging under clusters/.
func (rs *benchReplicas) writeStaging() {
	src := filepath.Join(testenv.Root(), "examples", "staging")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err == nil {
			rs.work.Write(e2eManifests+"/staging/"+d.Name(), string(data))
		}
		return err
	})
	if err != nil {
		rs.b.Fatal(err)
	}
}

// workersRE finds the count of node group workers.
var workersRE = regexp.MustCompile(`(?s)(name: workers\n.*?count: )(\d+)`)

// pushWorkers commits and pushes staging with n workers.
func (rs *benchReplicas) pushWorkers(n int) string {
	path := filepath.Join(rs.work.Dir(), e2eManifests, "staging", "nodegroups.yaml")
	data, err := os.ReadFile(path)
	if err != nil || !workersRE.Match(data) {
		rs.b.Fatalf("no node group workers in %s: %v", path, err)
	}
	rs.work.Write(e2eManifests+"/staging/nodegroups.yaml", workersRE.ReplaceAllString(string(data), fmt.Sprintf("${1}%d", n)))
	sha := rs.work.Commit(fmt.Sprintf("staging: %d workers", n))
	rs.work.Push()
	return sha
}

// status reads the status of replica name.
func (rs *benchReplicas) status(name string) api.Status {
	var st api.Status
	rs.servers[name].Get("/api/v1/status", &st)
	return st
}

// agree waits until every replica of names says that those are the
// members and names one leader among them, and returns the leader.
func (rs *benchReplicas) agree(names []string) string {
	var leader string
	rs.servers[names[0]].WaitFor("the replicas "+strings.Join(names, ", ")+" to agree on a leader", func() bool {
		leader = ""
		for _, name := range names {
			st := rs.status(name).Replicas
			if st == nil || st.Self != name || st.Leader == "" || (leader != "" && st.Leader != leader) || len(st.Members) != len(names) {
				return false
			}
			leader = st.Leader
		}
		return true
	})
	return leader
}

// killDuringApply pushes a commit of staging with workers workers, waits
// until owner, which holds staging's shard, applies it, SIGKILLs owner,
// and times the takeover.
func (rs *benchReplicas) killDuringApply(owner string, workers int) failoverTimes {
	b := rs.b
	b.StopTimer()
	rest := others([]string{"r0", "r1", "r2"}, owner)
	runs := map[string]int64{}
	for _, name := range rest {
		if st := rs.status(name); st.Reconciler != nil {
			runs[name] = st.Reconciler.TofuRuns
		}
	}
	f := rs.servers[rest[0]]
	sha := rs.pushWorkers(workers)
	f.WaitFor("commit "+sha[:12]+" to be applying", func() bool {
		c, ok := f.Commit(sha)
		return ok && c.Status.Phase == schema.CommitApplying
	})
	b.StartTimer()
	killed := time.Now()
	rs.servers[owner].Kill()
	var t failoverTimes
	next := ""
	for deadline := killed.Add(servertest.WaitTimeout); t.tofu == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("%v after %s was killed, no surviving replica holds staging and runs tofu (holder %q)", servertest.WaitTimeout, owner, next)
		}
		if next == "" {
			if h := shardHolder(rs.etcd, "staging"); h != owner && h != "" {
				next, t.taken = h, time.Since(killed)
			}
			continue
		}
		if st := rs.status(next); st.Reconciler != nil && st.Reconciler.TofuRuns > runs[next] {
			t.tofu = time.Since(killed)
		}
	}
	c := waitCommit(rs.servers[next], sha, schema.CommitSucceeded)
	t.done = time.Since(killed)
	for _, res := range c.Status.Tenants {
		if res.Tenant == "staging" {
			t.run = res.StartedAt.Sub(killed)
		}
	}
	b.Logf("%s killed, %s holds staging after %v, tofu after %v, staging's run started after %v, commit done after %v",
		owner, next, t.taken.Round(time.Millisecond), t.tofu.Round(time.Millisecond), t.run.Round(time.Millisecond), t.done.Round(time.Millisecond))
	return t
}

// waitCommit waits until commit sha, read through s, has phase want, and
// returns it.
func waitCommit(s *servertest.Server, sha string, want schema.CommitPhase) schema.Commit {
	var c schema.Commit
	s.WaitFor("commit "+sha[:12]+" to be "+string(want), func() bool {
		var ok bool
		c, ok = s.Commit(sha)
		return ok && c.Status.Phase == want
	})
	return c
}

// startBenchWorld runs `rezuscloud sim serve --sim-dir dir` with the
// Talos plane tests' timings and args until the benchmark ends, as
// startSimWorld does for a test.
func startBenchWorld(b *testing.B, dir string, args ...string) {
	w := &simWorld{done: make(chan struct{})}
	w.cmd = exec.Command(servertest.Binary(b), append([]string{"sim", "serve", "--sim-dir", dir, "--sim-timings", planeTimings}, args...)...)
	w.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + b.TempDir()}
	stderr, err := w.cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		b.Fatalf("rezuscloud sim serve: %v", err)
	}
	serving := make(chan struct{})
	go w.read(stderr, serving)
	b.Cleanup(func() {
		if w.running() {
			w.cmd.Process.Signal(syscall.SIGTERM)
			<-w.done
		}
	})
	select {
	case <-serving:
	case <-w.done:
		b.Fatalf("rezuscloud sim serve exited before serving:\n%s", w.log())
	case <-time.After(servertest.StartTimeout):
		b.Fatalf("rezuscloud sim serve did not serve within %v:\n%s", servertest.StartTimeout, w.log())
	}
}

// startBenchBalancer is newBalancer for a benchmark.
func startBenchBalancer(b *testing.B) *balancer {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	lb := &balancer{l: l, ready: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(func() { cancel(); l.Close() })
	go lb.serve()
	go lb.check(ctx)
	return lb
}
