package talos

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	rtalos "github.com/rezuscloud/rezuscloud/render/talos"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

// testTimings keep the simulated stages short but long enough to be
// seen by a plane polling every 20 ms.
var testTimings = talosnode.Timings{
	Boot: 150 * time.Millisecond, Install: 150 * time.Millisecond, Reboot: 200 * time.Millisecond,
	Upgrade: 150 * time.Millisecond, Reset: 150 * time.Millisecond, Fallback: 400 * time.Millisecond,
	LogInterval: 50 * time.Millisecond,
}

var testNow = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

var (
	bundlesMu sync.Mutex
	bundles   = map[string][]byte{}
)

// bundle returns a secrets bundle by name, generated once per test binary
// (each takes about a second).
func bundle(t testing.TB, name string) []byte {
	t.Helper()
	bundlesMu.Lock()
	defer bundlesMu.Unlock()
	if b, ok := bundles[name]; ok {
		return b
	}
	b, err := rtalos.GenerateSecrets("1.12.6", testNow, "")
	if err != nil {
		t.Fatal(err)
	}
	bundles[name] = b
	return b
}

// renderConfig renders a node group's config as the reconciler does.
func renderConfig(t testing.TB, tenant string, secrets []byte, role string, patches ...string) []byte {
	t.Helper()
	in := rtalos.ConfigInput{
		ClusterName: tenant, ControlPlaneEndpoint: "https://127.9.9.9:6443",
		KubernetesVersion: "1.34.1", TalosVersion: "1.12.6", Role: role, Secrets: secrets, Now: testNow,
	}
	for i, p := range patches {
		in.Patches = append(in.Patches, rtalos.Patch{Name: fmt.Sprintf("p%d", i), Patch: p})
	}
	b, err := rtalos.MachineConfig(in)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rig is a host of simulated nodes, a store, and a plane over both.
type rig struct {
	t     testing.TB
	host  *talosnode.Host
	store store.Store
	pool  *Pool
	plane *Plane
	opts  Options
	next  int
	// version is the Talos version the machines of cluster boot;
	// talosnode.DefaultVersion when empty.
	version string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	return newRigOn(t, talosnode.Options{Dir: t.TempDir()})
}

// newRigOn is newRig with a host of options of its own; the test timings
// and poll interval are filled in.
func newRigOn(t *testing.T, hostOpts talosnode.Options) *rig {
	t.Helper()
	hostOpts.Timings, hostOpts.PollInterval = testTimings, 100*time.Millisecond
	h, err := talosnode.Open(hostOpts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	st, err := bolt.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r := &rig{t: t, host: h, store: st, next: 10}
	r.pool = NewPool(PoolOptions{})
	t.Cleanup(r.pool.Close)
	r.opts = Options{Store: st, Pool: r.pool, Timeout: 5 * time.Second, Wait: 5 * time.Second, Poll: 20 * time.Millisecond, CallTimeout: 2 * time.Second}
	r.plane = r.newPlane(r.opts)
	return r
}

func (r *rig) newPlane(opts Options) *Plane {
	r.t.Helper()
	pl, err := New(opts)
	if err != nil {
		r.t.Fatal(err)
	}
	return pl
}

// addr returns 127.B.0.i of the host's block.
func (r *rig) addr(i int) string {
	return netip.AddrFrom4([4]byte{127, byte(r.host.Block()), 0, byte(i)}).String()
}

// cluster boots a tenant's machines: cps control planes (node group
// "cp") and workers workers (node group "w") with the configs given.
func (r *rig) cluster(tenant string, cps, workers int, cpCfg, wCfg []byte) []Machine {
	r.t.Helper()
	var ms []Machine
	for i := range cps + workers {
		m := Machine{ID: fmt.Sprintf("%s-%d", tenant, i), Address: r.addr(r.next), NodeGroup: "cp", ControlPlane: true}
		m.Name = fmt.Sprintf("rezussim_machine.ng_cp[%d]", i)
		cfg := cpCfg
		if i >= cps {
			m.NodeGroup, m.ControlPlane, cfg = "w", false, wCfg
			m.Name = fmt.Sprintf("rezussim_machine.ng_w[%d]", i-cps)
		}
		r.next++
		if err := r.host.BootMachine(talosnode.Machine{ID: m.ID, Address: m.Address, Version: r.version, UserData: cfg}); err != nil {
			r.t.Fatal(err)
		}
		ms = append(ms, m)
	}
	return ms
}

// journal returns the write calls machine id received, without refusals.
func (r *rig) journal(id string, calls ...string) []talosnode.JournalEntry {
	r.t.Helper()
	j, err := r.host.Journal(id)
	if err != nil {
		r.t.Fatal(err)
	}
	var out []talosnode.JournalEntry
	for _, e := range j {
		for _, c := range calls {
			if e.Call == c && e.Error == "" && !e.DryRun {
				out = append(out, e)
			}
		}
	}
	return out
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var (
	talosnodeRefuse  = talosnode.Fault{Refuse: true}
	talosnodeNoFault = talosnode.Fault{}
)

// listenSilently accepts connections on address:50000 and never answers.
func listenSilently(address string) (net.Listener, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(address, "50000"))
	if err != nil {
		return nil, err
	}
	go func() {
		var held []net.Conn
		for {
			c, err := l.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	return l, nil
}
