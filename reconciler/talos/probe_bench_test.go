package talos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	rtalos "github.com/rezuscloud/rezuscloud/render/talos"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
	"go.yaml.in/yaml/v4"
)

// benchHostEnv makes the test binary a host of simulated nodes for the
// probe benchmark, so that the benchmark's own process measures the
// plane's cost alone.
const benchHostEnv = "REZUSCLOUD_TALOS_BENCH_HOST"

func TestMain(m *testing.M) {
	if dir := os.Getenv(benchHostEnv); dir != "" {
		if err := runBenchHost(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// benchTenants and benchMachines size the probe benchmark: 100 tenants of
// 8 machines, 3 of them control planes.
const benchTenants, benchMachines, benchCPs = 100, 8, 3

// runBenchHost boots the fleet, prints its machines as JSON lines, and
// serves them until stdin closes.
func runBenchHost(dir string) error {
	secrets, err := os.ReadFile(dir + ".bundle")
	if err != nil {
		return err
	}
	kube, err := readBenchKube(dir)
	if err != nil {
		return err
	}
	h, err := talosnode.Open(talosnode.Options{Dir: dir})
	if err != nil {
		return err
	}
	defer h.Close()
	enc := json.NewEncoder(os.Stdout)
	for t := range benchTenantCount() {
		tenant := fmt.Sprintf("t%03d", t)
		// One CA for all, but each tenant its own cluster.
		own, err := clusterSecrets(secrets, t)
		if err != nil {
			return err
		}
		cp, err := benchConfig(tenant, own, "controlplane")
		if err != nil {
			return err
		}
		w, err := benchConfig(tenant, own, "worker")
		if err != nil {
			return err
		}
		for i := range benchMachines {
			idx := t*benchMachines + i // up to 250 tenants per 240 addresses: 8,000 machines fit
			m := Machine{ID: fmt.Sprintf("%s-%d", tenant, i), Name: fmt.Sprintf("m[%d]", i), NodeGroup: "w",
				Address: netip.AddrFrom4([4]byte{127, byte(h.Block()), byte(1 + idx/240), byte(10 + idx%240)}).String()}
			cfg := w
			if i < benchCPs {
				m.NodeGroup, m.ControlPlane, cfg = "cp", true, cp
			}
			if err := h.BootMachine(talosnode.Machine{ID: m.ID, Address: m.Address, UserData: cfg, Hostname: kube.hostname(tenant, i)}); err != nil {
				return err
			}
			if err := enc.Encode(m); err != nil {
				return err
			}
		}
	}
	if kube != nil {
		stop, err := kube.runKubelets(h, secrets)
		if err != nil {
			return err
		}
		defer stop()
	}
	fmt.Println(`"ready"`)
	_, err = io.Copy(io.Discard, os.Stdin)
	return err
}

func benchConfig(tenant string, secrets []byte, role string) ([]byte, error) {
	return rtalos.MachineConfig(rtalos.ConfigInput{
		ClusterName: tenant, ControlPlaneEndpoint: "https://127.9.9.9:6443", KubernetesVersion: "1.34.1",
		TalosVersion: "1.12.6", Role: role, Secrets: secrets, Now: testNow,
	})
}

// clusterSecrets returns the bundle secrets with the cluster ID and secret
// of tenant t: the certificates stay shared, the cluster is its own (the
// bundle owns these fields, so no patch may set them).
func clusterSecrets(secrets []byte, t int) ([]byte, error) {
	b, err := rtalos.ParseSecrets(secrets)
	if err != nil {
		return nil, err
	}
	b.Cluster.ID, b.Cluster.Secret = benchValue("id", t), benchValue("secret", t)
	return yaml.Marshal(b)
}

// benchValue is a 32-character value of tenant i, its number at the end,
// so that no two tenants share it.
func benchValue(what string, i int) string {
	return fmt.Sprintf("%s%0*d", what, 32-len(what), i)
}

// BenchmarkProbeFleet observes 100 tenants × 8 machines with the default
// TTL (15 s) for a minute, the nodes being served by another process, and
// reports the plane's probes per second, CPU use (percent of one core),
// RSS and open file descriptors.
//
//	go test -run '^$' -bench ProbeFleet -benchtime 1x ./reconciler/talos/
func BenchmarkProbeFleet(b *testing.B) {
	ms := startBenchHost(b, bundle(b, "fleet"), nil)
	st, err := bolt.Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	putFleet(b, st, ms)
	pool := NewPool(PoolOptions{IdleTimeout: benchIdle(), MaxIdle: 1024})
	defer pool.Close()
	pl, err := New(Options{Store: st, Pool: pool})
	if err != nil {
		b.Fatal(err)
	}
	secrets := bundle(b, "fleet")
	bundles := func(string) []byte { return secrets }
	ctx := context.Background()
	// The first round connects everything.
	if _, err := pl.ObserveMachines(ctx, bundles); err != nil {
		b.Fatal(err)
	}
	start, cpu0, probes0 := time.Now(), cpuTime(), pl.prober.Probes()
	maxFDs, maxRSS := 0, 0
	b.ResetTimer()
	for time.Since(start) < time.Minute {
		if _, err := pl.ObserveMachines(ctx, bundles); err != nil {
			b.Fatal(err)
		}
		maxFDs, maxRSS = max(maxFDs, openFDs()), max(maxRSS, rssKiB())
		time.Sleep(time.Second)
	}
	wall := time.Since(start)
	b.ReportMetric(float64(pl.prober.Probes()-probes0)/wall.Seconds(), "probes/s")
	b.ReportMetric(100*(cpuTime()-cpu0).Seconds()/wall.Seconds(), "cpu-%")
	b.ReportMetric(float64(maxRSS)/1024, "rss-MiB")
	b.ReportMetric(float64(maxFDs), "max-fds")
}

// benchIdle is the pool's idle timeout: REZUSCLOUD_BENCH_IDLE, default
// the pool's own.
func benchIdle() time.Duration {
	d, _ := time.ParseDuration(os.Getenv("REZUSCLOUD_BENCH_IDLE"))
	return d
}

// startBenchHost runs the node host in a child process, its machines made
// from secrets and reporting to kube's API when kube is not nil, and
// returns its machines.
func startBenchHost(b *testing.B, secrets []byte, kube *benchKube) []Machine {
	return startBenchHostIn(b, b.TempDir()+"/sim", secrets, kube)
}

// startBenchHostIn is startBenchHost with the host's directory (where its
// faults file is) given.
func startBenchHostIn(b *testing.B, dir string, secrets []byte, kube *benchKube) []Machine {
	if err := os.WriteFile(dir+".bundle", secrets, 0o600); err != nil {
		b.Fatal(err)
	}
	if kube != nil {
		k, _ := json.Marshal(kube)
		if err := os.WriteFile(dir+".kube", k, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), benchHostEnv+"="+dir)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	benchHostPID = cmd.Process.Pid
	b.Cleanup(func() { stdin.Close(); cmd.Wait() })
	var ms []Machine
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if sc.Text() == `"ready"` {
			return ms
		}
		var m Machine
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			b.Fatal(err)
		}
		ms = append(ms, m)
	}
	b.Fatalf("node host ended before it was ready: %v", sc.Err())
	return nil
}

// putFleet stores the machines as projection does.
func putFleet(b *testing.B, st store.Store, ms []Machine) {
	err := st.Update(func(tx store.Tx) error {
		for _, m := range ms {
			tenant, _, _ := strings.Cut(m.ID, "-")
			role := schema.RoleWorker
			if m.ControlPlane {
				role = schema.RoleControlPlane
			}
			obj := &schema.Machine{APIVersion: schema.APIVersion, Kind: schema.KindMachine,
				Metadata: schema.ObjectMeta{Name: m.ID, Labels: map[string]string{schema.LabelTenant: tenant}},
				Spec:     schema.MachineSpec{ManagementAddress: m.Address, Role: role, Tenant: tenant, NodeGroup: m.NodeGroup, TFAddress: m.Name}}
			if _, err := tx.PutObject(schema.KindMachine, m.ID, obj); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// benchHostPID is the process of the last node host started.
var benchHostPID int

func rssKiB() int { return rssKiBOf("self") }

// rssKiBOf is the RSS of process pid ("self" for this one).
func rssKiBOf(pid string) int { return statusKiB(pid, "VmRSS") }

// anonRSSKiB is this process's anonymous RSS: its RSS but for the pages
// of mapped files (its binary, the store's file).
func anonRSSKiB() int { return statusKiB("self", "RssAnon") }

// statusKiB is the field (in KiB) of process pid's /proc status.
func statusKiB(pid, field string) int {
	data, _ := os.ReadFile("/proc/" + pid + "/status")
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field+":" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func openFDs() int {
	es, _ := os.ReadDir("/proc/self/fd")
	return len(es)
}
