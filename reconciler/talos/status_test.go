package talos

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

// putMachines stores the tenant's machines as projection does.
func (tr *tenantRig) putMachines() {
	tr.t.Helper()
	err := tr.store.Update(func(tx store.Tx) error {
		for _, m := range tr.ms {
			role := schema.RoleWorker
			if m.ControlPlane {
				role = schema.RoleControlPlane
			}
			obj := &schema.Machine{APIVersion: schema.APIVersion, Kind: schema.KindMachine,
				Metadata: schema.ObjectMeta{Name: m.ID, Labels: map[string]string{schema.LabelTenant: tr.tenant}},
				Spec: schema.MachineSpec{ManagementAddress: m.Address, ProviderID: m.ID, Role: role, Tenant: tr.tenant,
					NodeGroup: m.NodeGroup, TFAddress: m.Name}}
			if _, err := tx.PutObject(schema.KindMachine, m.ID, obj); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *tenantRig) storedStatus(id string) schema.MachineStatus {
	tr.t.Helper()
	var m schema.Machine
	if err := tr.store.View(func(tx store.Tx) error { return tx.GetObject(schema.KindMachine, id, &m) }); err != nil {
		tr.t.Fatal(err)
	}
	return m.Status
}

func TestObserveMachinesWritesWhatTheMachinesSay(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 2)
	tr.putMachines()
	ctx := ctxT(t)
	// The rollout record holds the config hashes; the worker group's is
	// another config than the one its machines run.
	d := tr.desired(tr.cpCfg, renderConfig(t, "acme", tr.secrets, "worker", "machine:\n  kubelet:\n    extraArgs:\n      v: \"3\"\n"), "1.12.6")
	if _, err := r.plane.prepare(d); err != nil {
		t.Fatal(err)
	}
	if err := r.host.SetFault(tr.ms[2].ID, talosnodeRefuse); err != nil {
		t.Fatal(err)
	}
	// A tenant whose bundle is not known is left alone.
	bundles := func(tenant string) []byte {
		if tenant == "acme" {
			return tr.secrets
		}
		return nil
	}
	pl := r.newPlane(r.opts) // its prober has no observations yet
	obs, err := pl.ObserveMachines(ctx, bundles)
	if err != nil || len(obs) != 3 {
		t.Fatalf("%d observations, %v", len(obs), err)
	}
	cp := tr.storedStatus(tr.ms[0].ID)
	if cp.Stage != schema.StageReady || !cp.Ready || !cp.Connected || !cp.ConfigUpToDate || cp.TalosVersion != "v1.12.6" ||
		cp.KubernetesVersion != "v1.34.1" || cp.LastSeen.IsZero() || cp.LastError != "" {
		t.Errorf("control plane status %+v", cp)
	}
	// Every machine's services; a control plane's etcd membership.
	if !hasService(cp.Services, "etcd", "Running", schema.ServiceHealthy) || !hasService(cp.Services, "kube-apiserver", "Running", schema.ServiceHealthy) ||
		!hasService(cp.Services, "machined", "Running", schema.ServiceHealthy) || !hasService(cp.Services, "auditd", "Running", "") {
		t.Errorf("control plane services %+v", cp.Services)
	}
	var host string
	for _, o := range obs {
		if o.Key == tr.ms[0].ID {
			host = o.Obs.Hostname
		}
	}
	if cp.Etcd == nil || !cp.Etcd.Member || len(cp.Etcd.Members) != 1 || cp.Etcd.Members[0] != host || cp.Etcd.Error != "" {
		t.Errorf("control plane %s: etcd %+v, want it the one member", host, cp.Etcd)
	}
	if w := tr.storedStatus(tr.ms[1].ID); !w.Ready || !w.Connected || w.ConfigUpToDate ||
		!hasService(w.Services, "kubelet", "Running", schema.ServiceHealthy) || hasService(w.Services, "etcd", "Running", schema.ServiceHealthy) || w.Etcd != nil {
		t.Errorf("worker with an old config: %+v", w)
	}
	if w := tr.storedStatus(tr.ms[2].ID); w.Ready || w.Connected || w.LastError == "" || w.Stage != schema.StageInitializing || w.Services != nil || w.Etcd != nil {
		t.Errorf("worker that refuses connections: %+v", w)
	}
	// Nothing changed: nothing is written.
	var rv uint64
	r.store.View(func(tx store.Tx) error { rv = tx.ResourceVersion(); return nil })
	if _, err := pl.ObserveMachines(ctx, bundles); err != nil {
		t.Fatal(err)
	}
	r.store.View(func(tx store.Tx) error {
		if got := tx.ResourceVersion(); got != rv {
			t.Errorf("an observation that changed nothing wrote the store (rv %d → %d)", rv, got)
		}
		return nil
	})
}

// TestPassDecodesOnlyWhatChanged: once a pass found a machine's stored
// status to be what its observation makes of it, the next pass, with the
// same observation and the same stored Machine, looks no further at it
// (its Observed carries no Status); when another writer changes the
// stored Machine, the pass after reads it again and writes back what the
// machine says.
func TestPassDecodesOnlyWhatChanged(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 1)
	tr.putMachines()
	opts := r.opts
	opts.Prober = NewProber(r.pool, ProberOptions{TTL: time.Hour, Timeout: 2 * time.Second})
	pl := r.newPlane(opts)
	ctx := ctxT(t)
	bundles := func(string) []byte { return tr.secrets }
	pass := func() map[string]Observed {
		t.Helper()
		obs, err := pl.ObserveMachines(ctx, bundles)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]Observed{}
		for _, o := range obs {
			out[o.Key] = o
		}
		return out
	}
	pass() // writes what the machines say
	pass() // finds it stored, and notes so
	w := tr.ms[1].ID
	for id, o := range pass() {
		if o.Status.Stage != "" || !o.Obs.Connected {
			t.Errorf("machine %s: looked at again with nothing changed (status %+v), or not observed", id, o.Status)
		}
	}
	err := r.store.Update(func(tx store.Tx) error {
		var m schema.Machine
		if err := tx.GetObject(schema.KindMachine, w, &m); err != nil {
			return err
		}
		m.Status.Ready, m.Status.Stage = false, schema.StageRestarting
		_, err := tx.PutObject(schema.KindMachine, w, &m)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if o := pass()[w]; o.Status.Stage != schema.StageReady {
		t.Errorf("the worker changed in the store was not looked at again: status %+v", o.Status)
	}
	if st := tr.storedStatus(w); !st.Ready || st.Stage != schema.StageReady {
		t.Errorf("the worker's stored status after the pass: ready %v, stage %s; want what the machine says", st.Ready, st.Stage)
	}
}

// TestObserveMachinesStopsWhenCancelled: a pass whose context ends asks
// for no more tenants' bundles (a server that stops does not read and
// probe the rest of its fleet first).
func TestObserveMachinesStopsWhenCancelled(t *testing.T) {
	r := newRig(t)
	for _, name := range []string{"acme", "beta"} {
		r.formed(name, 1, 0).putMachines()
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	asked := 0
	_, err := r.plane.ObserveMachines(ctx, func(string) []byte {
		asked++
		cancel()
		return nil
	})
	if err == nil || asked != 1 {
		t.Fatalf("a cancelled pass asked for %d bundles (want 1) and returned %v", asked, err)
	}
}

// TestALongPassWritesAsItGoes: a pass held up by a machine that answers
// late (here a tenant's control plane whose status reads are held past
// both of its probe's attempts) writes the other tenants' statuses while
// it lasts, rather than all at its end.
func TestALongPassWritesAsItGoes(t *testing.T) {
	r := newRig(t)
	acme, slow := r.formed("acme", 1, 1), r.formed("slow", 1, 0)
	acme.putMachines()
	slow.putMachines()
	if err := r.host.SetFault(slow.ms[0].ID, talosnode.Fault{StatusDelay: time.Minute}); err != nil {
		t.Fatal(err)
	}
	bundles := map[string][]byte{"acme": acme.secrets, "slow": slow.secrets}
	pl := r.newPlane(r.opts) // a server's first pass: no machine read yet
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := pl.ObserveMachines(ctxT(t), func(tenant string) []byte { return bundles[tenant] })
		done <- err
	}()
	eventually(t, "acme's machines written", func() bool {
		for _, m := range acme.ms {
			if st := acme.storedStatus(m.ID); !st.Connected || !st.Ready {
				return false
			}
		}
		return true
	})
	select {
	case err := <-done:
		t.Fatalf("the pass ended (%v) after %v, before acme's machines were found written", err, time.Since(start))
	default:
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := slow.storedStatus(slow.ms[0].ID); st.Ready || !strings.Contains(st.LastError, "MachineStatus") {
		t.Errorf("the late control plane: ready %v, error %q; want not ready, for want of its status", st.Ready, st.LastError)
	}
}

// TestAPassCutShortWritesNothingOfItsCutProbes: a server that stops
// while a pass probes a machine (here the control plane, whose status read
// is held) or waits to probe one (the worker, with one probe at a time)
// leaves their stored status as it was, and logs neither as a machine
// that stopped answering: a probe cut short says nothing of the machine.
func TestAPassCutShortWritesNothingOfItsCutProbes(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 1)
	tr.putMachines()
	bundles := func(string) []byte { return tr.secrets }
	if _, err := r.newPlane(r.opts).ObserveMachines(ctxT(t), bundles); err != nil {
		t.Fatal(err)
	}
	for _, m := range tr.ms {
		if st := tr.storedStatus(m.ID); !st.Connected || !st.Ready {
			t.Fatalf("before, %s: %+v", m.ID, st)
		}
	}
	if err := r.host.SetFault(tr.ms[0].ID, talosnode.Fault{StatusDelay: time.Minute}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	time.AfterFunc(3*passWrite/2, cancel) // after a write of the pass
	var logged lockedLog
	opts := r.opts
	opts.Logger = slog.New(slog.NewTextHandler(&logged, nil))
	opts.Prober = NewProber(r.pool, ProberOptions{Concurrency: 1, Timeout: time.Minute})
	if _, err := r.newPlane(opts).ObserveMachines(ctx, bundles); err == nil {
		t.Fatal("a pass cut short: no error")
	}
	time.Sleep(passWrite) // any write that was to come
	for _, m := range tr.ms {
		if st := tr.storedStatus(m.ID); !st.Connected || !st.Ready || st.LastError != "" {
			t.Errorf("after a pass cut short, %s: connected %v, ready %v, error %q; want it as it was", m.ID, st.Connected, st.Ready, st.LastError)
		}
	}
	if l := logged.String(); strings.Contains(l, "stopped answering") {
		t.Errorf("a probe cut short was logged as a machine that stopped answering:\n%s", l)
	}
}

// lockedLog is a log that goroutines write to at once.
type lockedLog struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestObservePassHoldsNoStoredMachines: a pass through the fleet keeps
// of each stored Machine only where its Talos API is, not the decoded
// object: while the pass asks for the last tenant's bundle, the heap
// holds well under the decoded size of the fleet's Machines.
func TestObservePassHoldsNoStoredMachines(t *testing.T) {
	st, err := bolt.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const tenants, perTenant = 250, 8
	err = st.Update(func(tx store.Tx) error {
		for i := range tenants * perTenant {
			tenant, id := fmt.Sprintf("t%03d", i/perTenant), fmt.Sprintf("sim-%06d", i)
			m := &schema.Machine{APIVersion: schema.APIVersion, Kind: schema.KindMachine,
				Metadata: schema.ObjectMeta{Name: id, Labels: map[string]string{schema.LabelTenant: tenant,
					schema.LabelNodeGroup: "workers", schema.LabelRole: "worker", "rezuscloud.io/provider": "sim"},
					Annotations: map[string]string{"rezuscloud.io/slot": "workers/" + strconv.Itoa(i%perTenant)}},
				Spec: schema.MachineSpec{ManagementAddress: "127.1.0.1", Role: schema.RoleWorker, Tenant: tenant,
					NodeGroup: "workers", TFAddress: fmt.Sprintf("rezussim_machine.ng_workers[%d]", i%perTenant),
					Hostname: tenant + "-workers-" + id, ProviderID: id, ProviderClass: "sim", Shape: "medium"},
				Status: schema.MachineStatus{Stage: schema.StageReady, Ready: true, TalosVersion: "v1.12.6",
					KubernetesVersion: "v1.34.1", ConfigUpToDate: true, Connected: true, Addresses: []string{"127.1.0.1"},
					LastSeen: time.Now()}}
			if _, err := tx.PutObject(schema.KindMachine, id, m); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := New(Options{Store: st, Pool: NewPool(PoolOptions{})})
	if err != nil {
		t.Fatal(err)
	}
	heap := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	heap()
	before, asked, during := heap(), 0, int64(0)
	bundle := func(string) []byte { // no tenant's is known: nothing is probed
		if asked++; asked == tenants {
			during = heap()
		}
		return nil
	}
	if _, err := pl.ObserveMachines(ctxT(t), bundle); err != nil {
		t.Fatal(err)
	}
	if asked != tenants {
		t.Fatalf("the pass asked for %d bundles, want %d", asked, tenants)
	}
	if perMachine := (during - before) / (tenants * perTenant); perMachine > 400 {
		t.Errorf("during the pass the heap holds %d bytes more per stored machine, want at most 400 (where its API is)", perMachine)
	}
}

// hasService reports whether services has name in state with health.
func hasService(services []schema.MachineService, name, state, health string) bool {
	for _, s := range services {
		if s.Name == name {
			return s.State == state && s.Health == health
		}
	}
	return false
}

// TestObserveMachinesLastSeen: a machine that answers keeps the status it
// had, lastSeen included, as long as nothing it says changes; once it no
// longer answers, lastSeen is the last probe it answered, and its
// services and etcd membership are no longer claimed. An unhealthy
// service is written with its health message.
func TestObserveMachinesLastSeen(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 1)
	tr.putMachines()
	ctx := ctxT(t)
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	opts := r.opts
	opts.Now = func() time.Time { return now }
	pl := r.newPlane(opts)
	bundles := func(string) []byte { return tr.secrets }
	observe := func() {
		t.Helper()
		if _, err := pl.ObserveMachines(ctx, bundles); err != nil {
			t.Fatal(err)
		}
	}
	observe()
	first := now
	cp := tr.ms[0].ID
	if st := tr.storedStatus(cp); !st.Connected || !st.LastSeen.Equal(first) {
		t.Fatalf("status after the first probe: %+v", st)
	}
	now = now.Add(time.Minute) // past the prober's TTL: a new probe
	observe()
	answered := now
	if st := tr.storedStatus(cp); !st.LastSeen.Equal(first) {
		t.Errorf("a probe that found nothing new moved lastSeen from %v to %v", first, st.LastSeen)
	}
	if err := r.host.SetFault(cp, talosnodeRefuse); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	observe()
	st := tr.storedStatus(cp)
	if st.Connected || !st.LastSeen.Equal(answered) || st.Services != nil || st.Etcd != nil {
		t.Errorf("a machine that stopped answering: lastSeen %v (want the last probe it answered, %v), status %+v", st.LastSeen, answered, st)
	}
	if err := r.host.SetFault(cp, talosnode.Fault{Unhealthy: "kubelet"}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	observe()
	st = tr.storedStatus(cp)
	if !st.Connected || !st.LastSeen.Equal(now) || !hasService(st.Services, "kubelet", "Running", schema.ServiceUnhealthy) {
		t.Fatalf("a machine back with an unhealthy kubelet: %+v", st)
	}
	for _, s := range st.Services {
		if s.Name == "kubelet" && !strings.Contains(s.Message, "connection refused") {
			t.Errorf("unhealthy kubelet's message %q", s.Message)
		}
	}
}
