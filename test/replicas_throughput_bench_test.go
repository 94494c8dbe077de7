package test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/etcdtest"
	"github.com/rezuscloud/rezuscloud/internal/gittest"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/schema"
)

// BenchmarkReplicasThroughput measures what spreading the tenants' runs
// over the replicas buys: one replica against three, each side on an etcd
// of three members and a simulated world of its own, applying one commit
// that adds REZUSCLOUD_BENCH_TENANTS tenants (300 by default), each with
// one control plane on the simulated OpenStack, which waits 300 ms before
// it answers each call, so that the runs wait on the cloud rather than on
// the cores. Each replica runs as many tenants at once as it has cores
// (--workers' default). A side's time runs from the push to the commit's
// success: every tenant applied, its machine booted and its etcd
// bootstrapped. It reports each side's seconds and tenants per minute, the
// tofu processes each replica started, the machine's busy cores and
// CPU-seconds a tenant over the timed window, and speedup, one replica's
// time over three's; and it logs, for each replica, the mean time of each
// tofu command and of a tenant's reconcile, from its /metrics.
//
// Each tenant's first run makes its secrets, whose RSA-4096
// service-account key (Talos's default) takes about a second of CPU, half
// of what a tenant costs the machine. REZUSCLOUD_BENCH_SERVICE_ACCOUNT_KEY
// sets the tenants' spec.serviceAccountKey: "ecdsa" takes that CPU away,
// so that the runs wait on the cloud as the benchmark means them to.
//
// It runs only with REZUSCLOUD_BENCH_THROUGHPUT=1, and takes tens of
// minutes at 300 tenants:
//
//	REZUSCLOUD_BENCH_THROUGHPUT=1 go test ./test -run '^$' -bench ReplicasThroughput -benchtime 1x -timeout 120m -v
func BenchmarkReplicasThroughput(b *testing.B) {
	if os.Getenv("REZUSCLOUD_BENCH_THROUGHPUT") != "1" {
		b.Skip("set REZUSCLOUD_BENCH_THROUGHPUT=1 to run the throughput benchmark (tens of minutes)")
	}
	n := 300
	if v := os.Getenv("REZUSCLOUD_BENCH_TENANTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("REZUSCLOUD_BENCH_TENANTS=%q: want a whole number of tenants", v)
		}
	}
	took := map[int]time.Duration{}
	for _, replicas := range []int{1, 3} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			var busy float64
			for b.Loop() {
				took[replicas], busy = applyTenants(b, replicas, n)
			}
			b.ReportMetric(took[replicas].Seconds(), "s")
			b.ReportMetric(float64(n)/took[replicas].Minutes(), "tenants/min")
			if busy > 0 {
				b.ReportMetric(busy/took[replicas].Seconds(), "cores-busy")
				b.ReportMetric(busy/float64(n), "cpu-s/tenant")
				b.Logf("replicas=%d: the machine's %d cores were busy %.2f of the time; at %.2f CPU-s a tenant, they can apply at most %.1f tenants/min",
					replicas, runtime.NumCPU(), busy/took[replicas].Seconds()/float64(runtime.NumCPU()), busy/float64(n), float64(runtime.NumCPU())*60/(busy/float64(n)))
			}
		})
	}
	if took[1] > 0 && took[3] > 0 {
		speedup := took[1].Seconds() / took[3].Seconds()
		b.Logf("one replica applied %d tenants in %s, three in %s: %.2f× the throughput", n, took[1].Round(time.Second), took[3].Round(time.Second), speedup)
		b.ReportMetric(speedup, "speedup")
	}
}

// applyTenants starts replicas on a new etcd and simulated world, pushes
// one commit that adds n tenants on the simulated OpenStack, and returns
// how long it took to succeed and the CPU-seconds the whole machine spent
// meanwhile (0 where /proc/stat cannot be read).
func applyTenants(b *testing.B, replicas, n int) (time.Duration, float64) {
	b.StopTimer()
	etcd := etcdtest.Start(b, 3)
	world, cloud := filepath.Join(b.TempDir(), "world"), filepath.Join(b.TempDir(), "openstack")
	startBenchWorld(b, world, "--sim-openstack", cloud, "--sim-openstack-addresses", "127.30.0.0/16",
		"--sim-openstack-latency", "300ms")
	daemon := gittest.NewDaemon(b)
	daemon.CreateBare("repo.git")
	repo := daemon.URL("repo.git")
	work := gittest.NewWorkdir(b, repo)
	work.Write(e2eManifests+"/README.md", "# Clusters\n")
	work.Commit("No tenant yet")
	work.Push()
	lb := startBenchBalancer(b)
	var servers []*servertest.Server
	for i := range replicas {
		name := fmt.Sprintf("r%d", i)
		s := servertest.New(b, servertest.Options{Data: filepath.Join(b.TempDir(), name), Repo: repo, Path: e2eManifests, Args: []string{
			"--store", "etcd", "--etcd-endpoints", strings.Join(etcd.Endpoints(), ","),
			"--replica-name", name, "--state-url", lb.url(),
			"--sim-world", world, "--openstack-clouds", filepath.Join(cloud, "clouds.yaml"),
			"--poll-interval", "300ms", "--debounce", "0s", "--drift-interval", "0",
			"--talos-timeout", "30s", "--talos-wait", "5m"}})
		s.Start()
		servers = append(servers, s)
		lb.add(s.Addr())
	}
	for i := range n {
		writeOpenStackTenant(work, fmt.Sprintf("bench-%03d", i), os.Getenv("REZUSCLOUD_BENCH_SERVICE_ACCOUNT_KEY"))
	}
	sha := work.Commit(fmt.Sprintf("%d tenants on OpenStack", n))
	b.StartTimer()
	start, cpu0 := time.Now(), machineBusy()
	work.Push()
	c := waitCommitFor(b, servers[0], sha, 90*time.Minute)
	took, busy := time.Since(start), machineBusy()-cpu0
	if cpu0 == 0 {
		busy = 0
	}
	b.StopTimer()
	if c.Status.Phase != schema.CommitSucceeded {
		b.Fatalf("the commit of %d tenants ended %s: %s", n, c.Status.Phase, c.Status.Message)
	}
	b.Logf("replicas=%d: %s", replicas, workersBusy(c, replicas*runtime.NumCPU(), took))
	for i, s := range servers {
		var st api.Status
		s.Get("/api/v1/status", &st)
		runs := int64(0)
		if st.Reconciler != nil {
			runs = st.Reconciler.TofuRuns
		}
		b.Logf("replicas=%d: r%d started %d tofu processes; %s", replicas, i, runs, meanTimes(b, s))
	}
	b.StartTimer()
	return took, busy
}

// workersBusy says how long a tenant's run took on average, from the
// commit's record, and what share of the time the replicas' workers
// (workers in all) spent running them over took: what is left is time
// when a worker had no run to start.
func workersBusy(c schema.Commit, workers int, took time.Duration) string {
	var sum time.Duration
	for _, r := range c.Status.Tenants {
		sum += r.FinishedAt.Sub(r.StartedAt)
	}
	if len(c.Status.Tenants) == 0 {
		return "no tenant result recorded"
	}
	return fmt.Sprintf("a tenant's run took %.2f s on average; the %d workers ran tenants %.0f %% of the time",
		(sum / time.Duration(len(c.Status.Tenants))).Seconds(), workers, 100*sum.Seconds()/(float64(workers)*took.Seconds()))
}

// meanTimes reads the server's /metrics and says how long, on average,
// each tofu command and each tenant's reconcile took on it: where the
// time of a run goes.
func meanTimes(b *testing.B, s *servertest.Server) string {
	code, page := s.Request(http.MethodGet, "/metrics", nil, nil)
	if code != http.StatusOK {
		b.Fatalf("GET /metrics: %d", code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		b.Fatalf("GET /metrics: %v", err)
	}
	var out []string
	for _, name := range []string{"rezuscloud_tofu_duration_seconds", "rezuscloud_reconcile_duration_seconds"} {
		for _, m := range families[name].GetMetric() {
			h := m.GetHistogram()
			if h.GetSampleCount() == 0 {
				continue
			}
			var labels []string
			for _, l := range m.GetLabel() {
				if l.GetName() != "replica" {
					labels = append(labels, l.GetValue())
				}
			}
			out = append(out, fmt.Sprintf("%s %s %.2f s × %d", strings.TrimSuffix(strings.TrimPrefix(name, "rezuscloud_"), "_duration_seconds"),
				strings.Join(labels, ","), h.GetSampleSum()/float64(h.GetSampleCount()), h.GetSampleCount()))
		}
	}
	return strings.Join(out, "; ")
}

// machineBusy returns the CPU-seconds every core of the machine has spent
// on anything but idling since boot, from /proc/stat (Linux's USER_HZ of
// 100 ticks a second), or 0 where it cannot be read.
func machineBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	if len(fields) < 8 || fields[0] != "cpu" {
		return 0
	}
	var ticks float64
	for i, f := range fields[1:8] { // user nice system idle iowait irq softirq
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return 0
		}
		if i != 3 && i != 4 {
			ticks += v
		}
	}
	return ticks / 100
}

// writeOpenStackTenant writes tenant name with one control plane on the
// simulated OpenStack, and a service-account key of kind key ("" for
// Talos's default).
func writeOpenStackTenant(work *gittest.Workdir, name, key string) {
	if key != "" {
		key = "  serviceAccountKey: " + key + "\n"
	}
	work.Write(e2eManifests+"/"+name+"/tenant.yaml", `apiVersion: rezuscloud.io/v1
kind: Tenant
metadata:
  name: `+name+`
spec:
  kubernetesVersion: "1.34.1"
  talosVersion: "1.12.6"
  controlPlaneEndpoint: https://`+name+`.example.internal:6443
`+key)
	work.Write(e2eManifests+"/"+name+"/nodegroups.yaml", `apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: controlplane
  labels:
    rezuscloud.io/tenant: `+name+`
    rezuscloud.io/role: controlplane
spec:
  count: 1
  providerClass: openstack
  providerConfig:
    cloud: rezus-openstack
    flavor: m1.medium
    image: talos-1.12.6
    networks:
      - tenant-net
    securityGroups:
      - talos
`)
}

// waitCommitFor waits up to limit until commit sha, read through s, has
// finished, and returns it.
func waitCommitFor(b *testing.B, s *servertest.Server, sha string, limit time.Duration) schema.Commit {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if c, ok := s.Commit(sha); ok {
			switch c.Status.Phase {
			case schema.CommitSucceeded, schema.CommitFailed, schema.CommitPartiallyFailed, schema.CommitInvalid:
				return c
			}
		}
	}
	b.Fatalf("commit %s did not finish within %s", sha[:12], limit)
	return schema.Commit{}
}
