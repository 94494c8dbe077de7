package reconciler

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	tfjson "github.com/hashicorp/terraform-json"
	dto "github.com/prometheus/client_model/go"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/metrics"
	"github.com/rezuscloud/rezuscloud/internal/sim"
	"github.com/rezuscloud/rezuscloud/reconciler/talos"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
	"github.com/rezuscloud/rezuscloud/store"
)

const testDriftInterval = 200 * time.Millisecond

// driftRig is a rig whose reconciler checks drift every 200ms and records
// metrics and drift reports, applied with the staging example only.
type driftRig struct {
	*rig
	metrics *metrics.Metrics
	reports chan DriftReport
}

func newDriftRig(t *testing.T, policy string) (*driftRig, fstest.MapFS) {
	t.Helper()
	return newDriftRigEvery(t, policy, testDriftInterval)
}

// newDriftRigEvery is newDriftRig with checks every interval (0: none but
// those asked for).
func newDriftRigEvery(t *testing.T, policy string, interval time.Duration) (*driftRig, fstest.MapFS) {
	t.Helper()
	d := &driftRig{metrics: metrics.New(), reports: make(chan DriftReport, 100)}
	d.rig = newRigWith(t, func(o *Options) {
		o.DriftInterval, o.Metrics = interval, d.metrics
		o.OnDrift = func(rep DriftReport) { d.reports <- rep }
	})
	repo := examples(t)
	for name := range repo {
		if !strings.HasPrefix(name, "staging/") {
			delete(repo, name)
		}
	}
	if policy != "" {
		f := repo["staging/tenant.yaml"]
		f.Data = []byte(strings.Replace(string(f.Data), "  labels:\n", "  annotations:\n    rezuscloud.io/drift-policy: "+policy+"\n  labels:\n", 1))
	}
	return d, repo
}

// tenant returns the stored tenant.
func (d *driftRig) tenant(name string) *schema.Tenant {
	d.t.Helper()
	var tn *schema.Tenant
	if err := d.srv.Store().View(func(tx store.Tx) (err error) {
		tn, err = getJSON[schema.Tenant](tx, schema.KindTenant, name)
		return err
	}); err != nil {
		d.t.Fatal(err)
	}
	return tn
}

// waitDrifted waits until the tenant's Drifted condition has status want.
func (d *driftRig) waitDrifted(name string, want schema.ConditionStatus) *schema.Condition {
	d.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if c := d.tenant(name).Status.Conditions.Get(schema.ConditionDrifted); c != nil && c.Status == want {
			return c
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.t.Fatalf("tenant %s: Drifted never became %s; conditions %+v", name, want, d.tenant(name).Status.Conditions)
	return nil
}

// simMachine returns the sim record of the tenant's machine of node group ng.
func (d *driftRig) simMachine(ng string) (*sim.Store, sim.Record) {
	d.t.Helper()
	st, err := sim.Open(d.simDir)
	if err != nil {
		d.t.Fatal(err)
	}
	recs, err := st.List()
	if err != nil {
		d.t.Fatal(err)
	}
	for _, rec := range recs {
		if rec.Tenant == "staging" && rec.NodeGroup == ng {
			return st, rec
		}
	}
	d.t.Fatalf("no sim machine of staging/%s", ng)
	return nil, sim.Record{}
}

func (d *driftRig) count(ng string) int {
	st, err := sim.Open(d.simDir)
	if err != nil {
		d.t.Fatal(err)
	}
	recs, _ := st.List()
	n := 0
	for _, rec := range recs {
		if rec.Tenant == "staging" && rec.NodeGroup == ng {
			n++
		}
	}
	return n
}

// TestDriftDetect: a sim machine deleted behind tofu's back is reported as
// Drifted within an interval or so, by condition, metric and report, with
// no value of its attributes in the message; under "detect" the machine
// stays gone.
func TestDriftDetect(t *testing.T) {
	d, repo := newDriftRig(t, "")
	mustSucceed(t, d.reconcile("rev1", "first", repo))
	clean := d.waitDrifted("staging", schema.ConditionFalse)
	if clean.Reason != schema.ReasonNoDrift {
		t.Fatalf("clean tenant: %+v", clean)
	}
	st, rec := d.simMachine("workers")
	userData, err := st.UserData(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	token := regexp.MustCompile(`(?m)^\s+token: (\S+)`).FindSubmatch(userData)
	if token == nil {
		t.Fatal("no token in the machine's user data")
	}
	if err := st.Delete(rec.ID); err != nil {
		t.Fatal(err)
	}
	runs := d.rec.Runner().Runs()
	c := d.waitDrifted("staging", schema.ConditionTrue)
	if c.Reason != schema.ReasonInfrastructureDrifted || !strings.Contains(c.Message, "rezussim_machine.ng_workers[0] was deleted") {
		t.Fatalf("drifted condition: %+v", c)
	}
	if strings.Contains(c.Message, string(token[1])) || strings.Contains(c.Message, rec.UserDataSHA256) {
		t.Fatalf("the drift message carries a value of the machine: %s", c.Message)
	}
	if got := d.gauge("staging"); got != 1 {
		t.Errorf("rezuscloud_tenant_drifted{tenant=staging} = %v, want 1", got)
	}
	rep := waitReport(t, d.reports, true)
	if rep.Tenant != "staging" || rep.Revision != "rev1" || rep.Message != c.Message {
		t.Errorf("report %+v", rep)
	}
	// A few more intervals: the machine stays gone, only checks run.
	time.Sleep(5 * testDriftInterval)
	if n := d.count("workers"); n != 0 {
		t.Fatalf("under detect, %d worker machines exist again", n)
	}
	if c := d.waitDrifted("staging", schema.ConditionTrue); c.LastTransitionTime.IsZero() {
		t.Fatal("no transition time")
	}
	if d.rec.Runner().Runs() == runs {
		t.Fatal("no drift check ran tofu")
	}
}

// TestDriftCorrect: under "correct" the deleted machine comes back by a run
// of the applied revision, and Drifted clears.
func TestDriftCorrect(t *testing.T) {
	d, repo := newDriftRig(t, schema.DriftPolicyCorrect)
	mustSucceed(t, d.reconcile("rev1", "first", repo))
	d.waitDrifted("staging", schema.ConditionFalse)
	st, rec := d.simMachine("workers")
	if err := st.Delete(rec.ID); err != nil {
		t.Fatal(err)
	}
	c := d.waitDrifted("staging", schema.ConditionTrue)
	if !strings.Contains(c.Message, "correcting: revision rev1 is applied again") {
		t.Fatalf("drifted condition: %+v", c)
	}
	d.waitDrifted("staging", schema.ConditionFalse)
	if n := d.count("workers"); n != 1 {
		t.Fatalf("after correction: %d worker machines, want 1", n)
	}
	if _, back := d.simMachine("workers"); back.ID == rec.ID {
		t.Fatal("the deleted machine's record came back by itself")
	}
	if got := d.gauge("staging"); got != 0 {
		t.Errorf("rezuscloud_tenant_drifted{tenant=staging} = %v after correction, want 0", got)
	}
	if rep := waitReport(t, d.reports, false); rep.Drifted {
		t.Errorf("last report %+v", rep)
	}
}

// TestDriftCorrectKeepsControlPlanes: a correction that would replace a
// control-plane machine stalls without the Rezuscloud-Allow-Replace
// trailer on the applied commit, and replaces it with the trailer.
func TestDriftCorrectKeepsControlPlanes(t *testing.T) {
	for _, allow := range []bool{false, true} {
		d, repo := newDriftRig(t, schema.DriftPolicyCorrect)
		// A declared image is the configuration's: a machine whose image
		// changed is replaced (an undeclared one is ignored).
		ngs := repo["staging/nodegroups.yaml"]
		ngs.Data = []byte(strings.Replace(string(ngs.Data), "    shape: small\n", "    shape: small\n    image: talos-1.12.6\n", 1))
		msg := "first\n"
		if allow {
			msg += "\nRezuscloud-Allow-Replace: staging\n"
		}
		snap := sources.Snapshot{Revision: "rev1", Ref: "refs/heads/main", FS: repo, Root: "."}
		snap.SetMessage(msg)
		c, err := d.rec.Reconcile(context.Background(), snap)
		if err != nil {
			t.Fatal(err)
		}
		mustSucceed(t, c)
		d.waitDrifted("staging", schema.ConditionFalse)
		st, rec := d.simMachine("controlplane")
		rec.Image = "someone-else's-image"
		b, err := rec.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(st.Path(rec.ID), b, 0o600); err != nil {
			t.Fatal(err)
		}
		dc := d.waitDrifted("staging", schema.ConditionTrue)
		if !strings.Contains(dc.Message, "rezussim_machine.ng_controlplane[0] changed: image") || strings.Contains(dc.Message, "someone-else") {
			t.Fatalf("drifted condition: %+v", dc)
		}
		if !allow {
			deadline := time.Now().Add(90 * time.Second)
			for !d.tenant("staging").Status.Conditions.IsTrue(schema.ConditionStalled) {
				if time.Now().After(deadline) {
					t.Fatalf("the correction did not stall: %+v", d.tenant("staging").Status.Conditions)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if s := d.tenant("staging").Status.Conditions.Get(schema.ConditionStalled); s.Reason != schema.ReasonReplaceBlocked {
				t.Fatalf("stalled: %+v", s)
			}
			if _, now := d.simMachine("controlplane"); now.ID != rec.ID {
				t.Fatal("the control plane was replaced without the trailer")
			}
			continue
		}
		d.waitDrifted("staging", schema.ConditionFalse)
		if _, now := d.simMachine("controlplane"); now.ID == rec.ID || d.count("controlplane") != 1 {
			t.Fatalf("with the trailer the control plane was not replaced (%s)", now.ID)
		}
	}
}

func waitReport(t *testing.T, ch chan DriftReport, drifted bool) DriftReport {
	t.Helper()
	deadline := time.After(90 * time.Second)
	for {
		select {
		case rep := <-ch:
			if rep.Drifted == drifted {
				return rep
			}
		case <-deadline:
			t.Fatalf("no drift report with drifted=%v", drifted)
		}
	}
}

// TestDriftMessageRedacts: the message names the drifted attributes, the
// sensitive one too, and never a value.
func TestDriftMessageRedacts(t *testing.T) {
	const secret = "hunter2-the-known-secret"
	var plan tfjson.Plan
	if err := json.Unmarshal([]byte(`{"format_version":"1.2","resource_drift":[
		{"address":"rezussim_machine.ng_cp[0]","type":"rezussim_machine","name":"ng_cp","change":{"actions":["update"],
		 "before":{"id":"sim-1","user_data":"`+secret+`","shape":"small"},
		 "after":{"id":"sim-1","user_data":"other-`+secret+`","shape":"large"},
		 "before_sensitive":{"user_data":true},"after_sensitive":{"user_data":true}}},
		{"address":"rezussim_machine.ng_w[0]","type":"rezussim_machine","name":"ng_w","change":{"actions":["delete"],
		 "before":{"id":"sim-2","user_data":"`+secret+`"},"after":null}}]}`), &plan); err != nil {
		t.Fatal(err)
	}
	msg := driftMessage(tofu.DriftOf(&plan), []string{"m-1"})
	want := "rezussim_machine.ng_cp[0] changed: shape, user_data; rezussim_machine.ng_w[0] was deleted; Talos config differs from the rendered one on m-1"
	if msg != want {
		t.Fatalf("message\n %s\nwant\n %s", msg, want)
	}
	if strings.Contains(msg, secret) || strings.Contains(msg, "small") {
		t.Fatal("a value reached the message")
	}
}

// TestTalosDrifted: a machine of the plane that answers and runs another
// config is drifted; one not yet probed, or off the plane, is not.
func TestTalosDrifted(t *testing.T) {
	m := func(name string, connected, upToDate bool) *schema.Machine {
		mc := &schema.Machine{Metadata: schema.ObjectMeta{Name: name}}
		mc.Status.Connected, mc.Status.ConfigUpToDate = connected, upToDate
		return mc
	}
	machines := []*schema.Machine{m("b", true, false), m("a", true, true), m("c", false, false), m("d", true, false)}
	plane := talos.MachinesOf([]*schema.Machine{
		{Metadata: schema.ObjectMeta{Name: "a"}, Spec: schema.MachineSpec{ManagementAddress: "127.0.0.2"}},
		{Metadata: schema.ObjectMeta{Name: "b"}, Spec: schema.MachineSpec{ManagementAddress: "127.0.0.3"}},
		{Metadata: schema.ObjectMeta{Name: "c"}, Spec: schema.MachineSpec{ManagementAddress: "127.0.0.4"}},
	})
	if got := talosDrifted(plane, machines); len(got) != 1 || got[0] != "b" {
		t.Fatalf("drifted machines %v, want [b]", got)
	}
}

// gauge reads rezuscloud_tenant_drifted of tenant.
func (d *driftRig) gauge(tenant string) float64 {
	d.t.Helper()
	var m dto.Metric
	if err := d.metrics.TenantDrifted.WithLabelValues(tenant).Write(&m); err != nil {
		d.t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// TestDriftCheckOnRequest: with no interval, DriftCheck checks at once; a
// reconcile request for a drifted tenant with nothing pending starts a
// check too (named or not), which finds the correction done and clears
// Drifted.
func TestDriftCheckOnRequest(t *testing.T) {
	d, repo := newDriftRigEvery(t, schema.DriftPolicyCorrect, 0)
	mustSucceed(t, d.reconcile("rev1", "first", repo))
	if c := d.tenant("staging").Status.Conditions.Get(schema.ConditionDrifted); c != nil {
		t.Fatalf("a check ran without an interval: %+v", c)
	}
	if err := d.rec.DriftCheck(context.Background(), "staging"); err != nil {
		t.Fatal(err)
	}
	if c := d.tenant("staging").Status.Conditions.Get(schema.ConditionDrifted); c == nil || c.Status != schema.ConditionFalse {
		t.Fatalf("after DriftCheck: %+v", c)
	}
	if got := d.rec.Requests(nil).RequestReconcile("staging").Tenants[0]; got.Action != api.ReconcileUpToDate {
		t.Fatalf("request for a tenant in sync: %+v", got)
	}
	st, rec := d.simMachine("workers")
	if err := st.Delete(rec.ID); err != nil {
		t.Fatal(err)
	}
	if err := d.rec.DriftCheck(context.Background(), "staging"); err != nil {
		t.Fatal(err)
	}
	if c := d.tenant("staging").Status.Conditions.Get(schema.ConditionDrifted); c == nil || c.Status != schema.ConditionTrue {
		t.Fatalf("after the machine was deleted: %+v", c)
	}
	// The correction brings the machine back; Drifted stays until a check.
	deadline := time.Now().Add(90 * time.Second)
	for d.count("workers") != 1 || d.rec.queue.busy("staging") {
		if time.Now().After(deadline) {
			t.Fatal("the correction did not bring the machine back")
		}
		time.Sleep(20 * time.Millisecond)
	}
	res := d.rec.Requests(nil).RequestReconcile("")
	if len(res.Tenants) != 1 || res.Tenants[0].Tenant != "staging" || res.Tenants[0].Action != api.ReconcileRunning {
		t.Fatalf("request for every tenant: %+v", res)
	}
	d.waitDrifted("staging", schema.ConditionFalse)
}

// TestHoldCancelsTheCheck: a run that takes a tenant's lock cancels the
// tenant's check under way, and waits for it to let go; another tenant's
// check is left alone.
func TestHoldCancelsTheCheck(t *testing.T) {
	d := &driftState{locks: map[string]*sync.Mutex{}, cancels: map[string]context.CancelFunc{}}
	ctx, cancel := context.WithCancel(context.Background())
	other, cancelOther := context.WithCancel(context.Background())
	defer cancelOther()
	d.cancels["a"], d.cancels["b"] = cancel, cancelOther
	l := d.lock("a")
	l.Lock() // the check of a holds it
	go func() { <-ctx.Done(); l.Unlock() }()
	release := d.hold("a")
	release()
	if ctx.Err() == nil || other.Err() != nil {
		t.Fatalf("after hold(a): a's check %v, b's check %v", ctx.Err(), other.Err())
	}
}

// TestDriftLeavesSuspendedTenantsAlone: a suspended tenant gets no drift
// check, not even on request: no tofu runs under its state lock.
func TestDriftLeavesSuspendedTenantsAlone(t *testing.T) {
	d, repo := newDriftRigEvery(t, "", 0)
	mustSucceed(t, d.reconcile("rev1", "first", repo))
	if err := d.rec.DriftCheck(context.Background(), "staging"); err != nil {
		t.Fatal(err)
	}
	d.waitDrifted("staging", schema.ConditionFalse)
	f := repo["staging/tenant.yaml"]
	f.Data = []byte(strings.Replace(string(f.Data), "  labels:\n", "  annotations:\n    rezuscloud.io/suspend: \"true\"\n  labels:\n", 1))
	d.reconcile("rev2", "suspend", repo)
	st, rec := d.simMachine("workers")
	if err := st.Delete(rec.ID); err != nil {
		t.Fatal(err)
	}
	runs := d.rec.Runner().Runs()
	if err := d.rec.DriftCheck(context.Background(), "staging"); err != nil {
		t.Fatal(err)
	}
	if got := d.rec.Runner().Runs(); got != runs {
		t.Errorf("a drift check of a suspended tenant started %d tofu processes", got-runs)
	}
	if c := d.tenant("staging").Status.Conditions.Get(schema.ConditionDrifted); c == nil || c.Status != schema.ConditionFalse {
		t.Errorf("Drifted of the suspended tenant: %+v, want it left False", c)
	}
}

// TestDriftChecksQuietTenantsAfterRestart: after a restart, a tenant that
// the first revision leaves as it was (no run, see unchanged.go) is still
// checked, and its drift found.
func TestDriftChecksQuietTenantsAfterRestart(t *testing.T) {
	d, repo := newDriftRigEvery(t, "", 0)
	mustSucceed(t, d.reconcile("rev1", "first", repo))
	d.rec.Close()
	again, err := New(d.srv.Store(), d.rec.runner, render.Builtin(), d.rec.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(again.Close)
	again.Recover()
	d.rec = again
	runs := again.Runner().Runs()
	mustSucceed(t, d.reconcile("rev2", "after a restart", repo))
	if got := again.Runner().Runs(); got != runs {
		t.Fatalf("the quiet revision ran tofu %d times", got-runs)
	}
	st, rec := d.simMachine("workers")
	if err := st.Delete(rec.ID); err != nil {
		t.Fatal(err)
	}
	if err := again.DriftCheck(context.Background(), "staging"); err != nil {
		t.Fatal(err)
	}
	if c := d.tenant("staging").Status.Conditions.Get(schema.ConditionDrifted); c == nil || c.Status != schema.ConditionTrue {
		t.Fatalf("Drifted after a restart: %+v, want True", c)
	}
}
