package talos

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/schema"
)

func TestOrderPutsControlPlanesFirstAndNumbersByValue(t *testing.T) {
	ms := []Machine{
		{ID: "w1", NodeGroup: "workers", Name: "m[1]"},
		{ID: "c10", NodeGroup: "cp", Name: "m[10]", ControlPlane: true},
		{ID: "a2", NodeGroup: "a-workers", Name: "m[2]"},
		{ID: "c2", NodeGroup: "cp", Name: "m[2]", ControlPlane: true},
		{ID: "w0", NodeGroup: "workers", Name: "m[0]"},
	}
	Order(ms)
	if got, want := ids(ms), []string{"c2", "c10", "a2", "w0", "w1"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

func TestPoolRefusesAnotherTenantsCredentials(t *testing.T) {
	r := newRig(t)
	a, b := bundle(t, "a"), bundle(t, "b")
	ms := r.cluster("acme", 1, 0, renderConfig(t, "acme", a, "controlplane"), nil)
	ctx := ctxT(t)
	eventually(t, "the node answers acme's client", func() bool {
		return r.plane.prober.Fresh(ctx, "acme", a, ms[0]).Connected
	})
	// Another tenant's talosconfig, made by the same code: refused.
	c, release, err := r.pool.Client("other", b, ms[0].Address)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := c.Version(ctx); err == nil {
		t.Fatal("the node answered a client with another tenant's certificate")
	}
	o := r.plane.prober.Fresh(ctx, "other", b, ms[0])
	if o.Connected || o.Error == "" {
		t.Fatalf("observation with another tenant's credentials: %+v", o)
	}
	if o := r.plane.prober.Fresh(ctx, "acme", a, ms[0]); !o.Connected || o.TalosVersion != "v1.12.6" {
		t.Fatalf("observation with the tenant's own credentials: %+v", o)
	}
}

func TestPoolClosesIdleClients(t *testing.T) {
	r := newRig(t)
	secrets := bundle(t, "a")
	ms := r.cluster("acme", 1, 2, renderConfig(t, "acme", secrets, "controlplane"), renderConfig(t, "acme", secrets, "worker"))
	// The pool's clock stands still until the test moves it, so that a
	// slow machine does not see clients idle for too long too early.
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	pool := NewPool(PoolOptions{IdleTimeout: 100 * time.Millisecond, MaxIdle: 2, Now: clock})
	defer pool.Close()
	p := NewProber(pool, ProberOptions{TTL: time.Hour})
	p.Observe(ctxT(t), "acme", secrets, ms)
	if n := pool.Open(); n != 2 {
		t.Fatalf("%d clients open after probes of 3 machines, want MaxIdle 2", n)
	}
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	eventually(t, "idle clients closed", func() bool { return pool.Open() == 0 })
}

func TestProberProbesEachMachineOncePerTTL(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 2)
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	p := NewProber(r.pool, ProberOptions{TTL: 15 * time.Second, Now: clock})
	ctx := ctxT(t)
	// Many callers at once: one probe per machine.
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() { defer wg.Done(); p.Observe(ctx, "acme", tr.secrets, tr.ms) }()
	}
	wg.Wait()
	if n := p.Probes(); n != 3 {
		t.Fatalf("%d probes for 20 callers of 3 machines within the TTL, want 3", n)
	}
	obs := p.Observe(ctx, "acme", tr.secrets, tr.ms)
	for i, o := range obs {
		want := sha256Hex(tr.wCfg)
		if tr.ms[i].ControlPlane {
			want = sha256Hex(tr.cpCfg)
		}
		if !o.Connected || !o.Ready || o.Stage != schema.StageReady || o.TalosVersion != "v1.12.6" ||
			o.KubernetesVersion != "v1.34.1" || o.ConfigSHA256 != want {
			t.Errorf("observation of %s: %+v", tr.ms[i].ID, o)
		}
	}
	if !obs[0].EtcdHealthy || !obs[0].APIServerRunning {
		t.Errorf("control plane: etcd healthy %v, kube-apiserver running %v", obs[0].EtcdHealthy, obs[0].APIServerRunning)
	}
	mu.Lock()
	now = now.Add(16 * time.Second)
	mu.Unlock()
	p.Observe(ctx, "acme", tr.secrets, tr.ms)
	if n := p.Probes(); n != 6 {
		t.Fatalf("%d probes after the TTL passed, want 6", n)
	}
}

func TestProberShowsAMachineThatDoesNotAnswerWithoutSlowingTheOthers(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 2)
	if err := r.host.SetFault(tr.ms[1].ID, talosnodeRefuse); err != nil {
		t.Fatal(err)
	}
	// A machine that accepts connections but never answers: a listener
	// on its address that does nothing.
	silent := Machine{ID: "silent", Address: r.addr(250), NodeGroup: "w"}
	l, err := listenSilently(silent.Address)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p := NewProber(r.pool, ProberOptions{Timeout: 300 * time.Millisecond, Concurrency: 2})
	start := time.Now()
	obs := p.Observe(context.Background(), "acme", tr.secrets, append(slices.Clone(tr.ms), silent))
	took := time.Since(start)
	if obs[0].Connected != true || obs[2].Connected != true {
		t.Fatalf("answering machines not connected: %+v %+v", obs[0], obs[2])
	}
	if obs[1].Connected || !strings.Contains(obs[1].Error, "Version") {
		t.Fatalf("refusing machine: %+v", obs[1])
	}
	if obs[3].Connected || obs[3].Error == "" {
		t.Fatalf("silent machine: %+v", obs[3])
	}
	if took > 2*time.Second {
		t.Fatalf("observing took %v with a silent machine and a timeout of 300ms", took)
	}
}

// TestReadConfigParsesOnlyAChangedConfig: the running config is hashed
// as the node serves it, and parsed for its Kubernetes version only when
// its hash differs from the observation before: with the same hash the
// version before is kept (a marker here shows that nothing was parsed),
// with another the config's own is read.
func TestReadConfigParsesOnlyAChangedConfig(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 0)
	c, release, err := r.pool.Client("acme", tr.secrets, tr.ms[0].Address)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	ctx := ctxT(t)
	var o Observation
	if err := o.readConfig(ctx, c, Observation{}); err != nil {
		t.Fatal(err)
	}
	if o.ConfigSHA256 != sha256Hex(tr.cpCfg) || o.KubernetesVersion != "v1.34.1" {
		t.Fatalf("first read: hash %s (want %s), Kubernetes %q", o.ConfigSHA256, sha256Hex(tr.cpCfg), o.KubernetesVersion)
	}
	known := Observation{ConfigSHA256: o.ConfigSHA256, KubernetesVersion: "marker"}
	if err := o.readConfig(ctx, c, known); err != nil {
		t.Fatal(err)
	}
	if o.ConfigSHA256 != known.ConfigSHA256 || o.KubernetesVersion != "marker" {
		t.Errorf("same config: hash %s, Kubernetes %q; want the version known before", o.ConfigSHA256, o.KubernetesVersion)
	}
	known.ConfigSHA256 = sha256Hex([]byte("another config"))
	if err := o.readConfig(ctx, c, known); err != nil {
		t.Fatal(err)
	}
	if o.KubernetesVersion != "v1.34.1" {
		t.Errorf("changed config: Kubernetes %q, want the config's own v1.34.1", o.KubernetesVersion)
	}
	// A read that fails (here, its call is cancelled) tells nothing of the
	// config: the hash and version known before stand.
	failing, cancel := context.WithCancel(ctx)
	cancel()
	if err := o.readConfig(failing, c, known); err == nil {
		t.Fatal("a cancelled read of the config: no error")
	}
	if o.ConfigSHA256 != known.ConfigSHA256 || o.KubernetesVersion != known.KubernetesVersion {
		t.Errorf("failed read: hash %s, Kubernetes %q; want those known before", o.ConfigSHA256, o.KubernetesVersion)
	}
}

// TestPromptProbesAfterTheProbeInFlight: a prompt (an event said the
// machine changed) that comes while a probe of the machine is in flight
// probes once more after it, since that probe may have read the machine
// before the change; an observation asked for then takes the probe in
// flight.
func TestPromptProbesAfterTheProbeInFlight(t *testing.T) {
	r := newRig(t)
	secrets := bundle(t, "acme")
	silent := Machine{ID: "silent", Address: r.addr(251), NodeGroup: "w"}
	l, err := listenSilently(silent.Address)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, c := range []struct {
		name  string
		then  func(p *Prober)
		wantN int64
	}{
		{"prompt", func(p *Prober) { p.Prompt(context.Background(), "acme", secrets, silent, 0) }, 2},
		{"fresh", func(p *Prober) { p.Fresh(context.Background(), "acme", secrets, silent) }, 1},
	} {
		p := NewProber(r.pool, ProberOptions{TTL: time.Hour, Timeout: 300 * time.Millisecond})
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.Fresh(context.Background(), "acme", secrets, silent)
		}()
		eventually(t, "the first probe in flight", func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			e := p.entries[silent.ID]
			return e != nil && e.inFlight != nil
		})
		c.then(p)
		<-done
		if n := p.Probes(); n != c.wantN {
			t.Errorf("%s during a probe in flight: %d probes, want %d", c.name, n, c.wantN)
		}
	}
}

// TestProbeOvertakenByAWatchDoesNotStand: a probe that read the machine
// before a watch kept a newer observation of it does not replace that
// observation when it ends; one that read it after does. (A plane that
// took a tenant over probed its unseen machines while their watches
// opened, and a probe that ended last put the machine back as it was
// before a change the watch had told.)
func TestProbeOvertakenByAWatchDoesNotStand(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 0)
	m := tr.ms[0]
	for _, c := range []struct {
		name        string
		watchBefore bool // the watch's read began before the probe's
		wantReady   bool
	}{{"watch read after the probe's read", false, false}, {"watch read before the probe's read", true, true}} {
		var (
			mu      sync.Mutex
			armed   bool
			reading = make(chan time.Time)
			resume  = make(chan struct{})
		)
		now := func() time.Time {
			mu.Lock()
			hold := armed
			armed = false
			mu.Unlock()
			at := time.Now()
			if hold { // the probe's read of the machine begins at at
				reading <- at
				<-resume
			}
			return at
		}
		p := NewProber(r.pool, ProberOptions{TTL: time.Hour, Timeout: 5 * time.Second, Now: now})
		mu.Lock()
		armed = true
		mu.Unlock()
		done := make(chan Observation)
		go func() { done <- p.Fresh(context.Background(), "acme", tr.secrets, m) }()
		at := <-reading
		watched := at.Add(time.Millisecond)
		if c.watchBefore {
			watched = at.Add(-time.Millisecond)
		}
		p.keep(Observation{Machine: m.ID, At: watched, Connected: true, Ready: false, Error: "as a watch saw it"})
		close(resume)
		got := <-done
		last, _ := p.Last(m.ID)
		if last.Ready != c.wantReady || got.Ready != c.wantReady {
			t.Errorf("%s: the standing observation says ready %v, Fresh returned ready %v; want %v", c.name, last.Ready, got.Ready, c.wantReady)
		}
	}
}

// TestProberAsksALateMachineOnceMore: a machine whose answer comes after
// the timeout (its MachineStatus read is held, as a loaded node's is) is
// asked once more before it shows as not ready, and shows as connected
// and ready when the second answer comes in time, which halves the probe
// slots; one that stays late shows as not ready after two timeouts, and
// one that refuses as not connected after one attempt, neither changing
// the slots.
func TestProberAsksALateMachineOnceMore(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 2)
	const timeout = 2 * time.Second
	var logged lockedLog
	p := NewProber(r.pool, ProberOptions{Timeout: timeout, Log: slog.New(slog.NewTextHandler(&logged, nil))})
	ctx := ctxT(t)
	late, gone := tr.ms[1], tr.ms[2]
	if err := r.host.SetFault(late.ID, talosnode.Fault{StatusDelay: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// The first attempt's read began well before its timeout, and is
	// held; the fault goes before the second attempt can begin.
	time.AfterFunc(3*timeout/4, func() {
		if err := r.host.SetFault(late.ID, talosnode.Fault{}); err != nil {
			t.Error(err)
		}
	})
	start := time.Now()
	o := p.Fresh(ctx, "acme", tr.secrets, late)
	if took := time.Since(start); !o.Connected || !o.Ready || took < timeout {
		t.Fatalf("a machine late once: connected %v, ready %v, error %q, after %v; want connected and ready after its first attempt's %v", o.Connected, o.Ready, o.Error, took, timeout)
	}
	if n := p.slots.slots(); n != 16 {
		t.Fatalf("after a machine answered in time when asked again: %d probe slots, want 32 halved", n)
	}
	if l := logged.String(); strings.Count(l, "fewer probes run at once") != 1 || !strings.Contains(l, "probe_slots=16 tenant=acme machine="+late.ID) {
		t.Fatalf("the halving logged as %q, want once with the slots and the machine", l)
	}

	if err := r.host.SetFault(late.ID, talosnode.Fault{StatusDelay: time.Minute}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	o = p.Fresh(ctx, "acme", tr.secrets, late)
	if took := time.Since(start); o.Ready || !strings.Contains(o.Error, "MachineStatus") || took < 2*timeout {
		t.Fatalf("a machine late twice: ready %v, error %q, after %v; want not ready, for want of its status, after %v", o.Ready, o.Error, took, 2*timeout)
	}

	if err := r.host.SetFault(gone.ID, talosnodeRefuse); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	o = p.Fresh(ctx, "acme", tr.secrets, gone)
	if took := time.Since(start); o.Connected || took >= timeout {
		t.Fatalf("a machine that refuses: connected %v, error %q, after %v; want not connected at once", o.Connected, o.Error, took)
	}
	if n := p.slots.slots(); n != 16 {
		t.Fatalf("after a machine late twice and one that refuses: %d probe slots, want 16 still", n)
	}
	if n := strings.Count(logged.String(), "probe_slots="); n != 1 {
		t.Fatalf("%d lines of probe slots logged, want only the halving's:\n%s", n, logged.String())
	}
}

// TestAFailedObservationStandsOnlyForTheTTL: an observation of a machine
// that did not answer stands for the TTL, even while the machine is on an
// events stream (whose observations stand 5 minutes) or watched: neither
// tells that it answers again.
func TestAFailedObservationStandsOnlyForTheTTL(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 1)
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	p := NewProber(r.pool, ProberOptions{TTL: 15 * time.Second, Now: clock})
	ctx := ctxT(t)
	w := tr.ms[1]
	for _, follow := range []struct {
		name string
		on   func(id string) func()
	}{{"on an events stream", p.onEvents}, {"watched", p.watchOpen}} {
		off := follow.on(w.ID)
		if o := p.Fresh(ctx, "acme", tr.secrets, w); !o.Connected {
			t.Fatalf("%s: %+v", follow.name, o)
		}
		advance(time.Minute)
		if o := p.Observe(ctx, "acme", tr.secrets, []Machine{w}); !o[0].Connected {
			t.Fatalf("%s, a minute on: the standing observation is %+v, want the connected one", follow.name, o[0])
		}
		if err := r.host.SetFault(w.ID, talosnodeRefuse); err != nil {
			t.Fatal(err)
		}
		if o := p.Fresh(ctx, "acme", tr.secrets, w); o.Connected {
			t.Fatalf("%s, refusing: %+v", follow.name, o)
		}
		if err := r.host.SetFault(w.ID, talosnode.Fault{}); err != nil {
			t.Fatal(err)
		}
		probes := p.Probes()
		if o := p.Observe(ctx, "acme", tr.secrets, []Machine{w}); o[0].Connected || p.Probes() != probes {
			t.Fatalf("%s, within the TTL: connected %v after %d probes more; want the failed observation standing", follow.name, o[0].Connected, p.Probes()-probes)
		}
		advance(16 * time.Second)
		if o := p.Observe(ctx, "acme", tr.secrets, []Machine{w}); !o[0].Connected || p.Probes() != probes+1 {
			t.Fatalf("%s, past the TTL: connected %v (%s) after %d probes more; want it probed again, and connected", follow.name, o[0].Connected, o[0].Error, p.Probes()-probes)
		}
		off()
	}
}
