package reconciler

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// lockState takes a lock on a tenant's state through the backend, as a
// tofu run does, and leaves it held.
func (r *rig) lockState(tenant, id string) {
	r.t.Helper()
	body := `{"ID":"` + id + `","Operation":"OperationTypeApply","Who":"test"}`
	req, err := http.NewRequest("LOCK", r.srv.URL()+"/tfstate/"+tenant, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		r.t.Fatalf("LOCK %s: %s", tenant, resp.Status)
	}
}

func (r *rig) locks() map[string]string {
	r.t.Helper()
	out := map[string]string{}
	err := r.srv.Store().View(func(tx store.Tx) error {
		ls, err := tx.Locks()
		for _, l := range ls {
			out[l.State] = l.ID
		}
		return err
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return out
}

// TestRecoverReleasesOwnLocks: at startup the reconciler releases a lock
// whose holder is its own run of the tenant, with a log line and an audit
// record, and leaves a lock of anyone else alone; var files and plans that
// an interrupted run left are removed.
func TestRecoverReleasesOwnLocks(t *testing.T) {
	r := newRig(t)
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	// The rig's backend has no tokens: every request is "anonymous". Here
	// that is the holder of production's runs, and not of staging's.
	r.rec.opts.LockHolder = func(tenant string) string {
		if tenant == "production" {
			return backend.Anonymous.Name
		}
		return "reconciler-" + tenant
	}
	var audit, logs bytes.Buffer
	r.rec.opts.Audit = slog.New(slog.NewJSONHandler(&audit, nil))
	r.rec.log = slog.New(slog.NewTextHandler(&logs, nil))
	r.lockState("production", "dead-run")
	r.lockState("staging", "someone-else")
	work := filepath.Join(r.rec.opts.DataDir, "work", "production")
	for _, name := range []string{tofu.VarFile, tofu.PlanFile} {
		if err := os.WriteFile(filepath.Join(work, name), []byte("left over"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	r.rec.Recover()
	if got := r.locks(); got["production"] != "" || got["staging"] != "someone-else" {
		t.Fatalf("locks after Recover: %v, want only staging's", got)
	}
	if !strings.Contains(audit.String(), `"msg":"state lock released"`) || !strings.Contains(audit.String(), `"lock":"dead-run"`) {
		t.Errorf("audit log: %s", audit.String())
	}
	if !strings.Contains(logs.String(), "released a state lock left by an earlier run") {
		t.Errorf("log: %s", logs.String())
	}
	for _, name := range []string{tofu.VarFile, tofu.PlanFile} {
		if _, err := os.Stat(filepath.Join(work, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after Recover: %v", name, err)
		}
	}
}

// TestRunReleasesItsStaleLock: a lock that a run of the tenant left (its
// tofu died without unlocking) does not fail the tenant's next run, which
// runs even though the manifests did not change.
func TestRunReleasesItsStaleLock(t *testing.T) {
	r := newRig(t)
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	r.rec.opts.LockHolder = func(string) string { return backend.Anonymous.Name }
	r.lockState("production", "dead-run")
	runs := r.rec.Runner().Runs()
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	if r.rec.Runner().Runs() == runs {
		t.Error("the tenant whose run left a lock did not run again")
	}
	if got := r.locks(); len(got) != 0 {
		t.Errorf("locks after the run: %v", got)
	}
}

// writeErrored writes production's current state, changed by edit, as the
// errored.tfstate of an interrupted apply, and returns its serial.
func (r *rig) writeErrored(edit func(st map[string]any)) string {
	r.t.Helper()
	var st map[string]any
	if err := json.Unmarshal([]byte(r.rawState("production")), &st); err != nil {
		r.t.Fatal(err)
	}
	edit(st)
	b, _ := json.Marshal(st)
	path := filepath.Join(r.rec.opts.DataDir, "work", "production", tofu.ErroredState)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		r.t.Fatal(err)
	}
	return path
}

func (r *rig) productionSerial() float64 {
	var st struct{ Serial float64 }
	_ = json.Unmarshal([]byte(r.rawState("production")), &st)
	return st.Serial
}

// TestRunPushesErroredState: the next run pushes the errored.tfstate an
// interrupted apply saved, and removes it; one of another lineage or of a
// lower serial is refused, fails the tenant with a message that says why,
// and stays.
func TestRunPushesErroredState(t *testing.T) {
	r := newRig(t)
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	serial := r.productionSerial()

	path := r.writeErrored(func(st map[string]any) { st["serial"] = serial + 5 })
	c := r.reconcile("rev1", "first", examples(t))
	mustSucceed(t, c)
	// The run after the push applies a plan without changes, which writes
	// the state once more, as a bare tofu apply does.
	pushed := r.productionSerial()
	if pushed != serial+5 && pushed != serial+6 {
		t.Errorf("serial after the push: %v, want %v (or one more)", pushed, serial+5)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("errored.tfstate after the push: %v", err)
	}
	if tr := resultOf(t, c, "production"); !strings.Contains(tr.OutputTail, "rezuscloud: pushed errored.tfstate") {
		t.Errorf("output tail says nothing of the push:\n%s", tr.OutputTail)
	}

	for what, edit := range map[string]func(map[string]any){
		"lineage": func(st map[string]any) { st["lineage"] = "another-lineage"; st["serial"] = serial + 9 },
		"lower":   func(st map[string]any) { st["serial"] = serial },
	} {
		r.writeErrored(edit)
		c := r.reconcile("rev1", "first", examples(t))
		tr := resultOf(t, c, "production")
		if tr.Phase != schema.CommitFailed || !strings.Contains(tr.Error, what) || !strings.Contains(tr.Error, "the file stays") {
			t.Errorf("errored.tfstate with a wrong %s: %s %q", what, tr.Phase, tr.Error)
		}
		if _, err := os.Stat(path); err != nil {
			t.Errorf("a refused errored.tfstate is gone: %v", err)
		}
		if got := r.productionSerial(); got != pushed {
			t.Errorf("a refused push changed the serial from %v to %v", pushed, got)
		}
		if len(r.locks()) != 0 {
			t.Errorf("a refused push left the state locked: %v", r.locks())
		}
	}
}

func resultOf(t *testing.T, c *schema.Commit, tenant string) schema.TenantResult {
	t.Helper()
	for _, tr := range c.Status.Tenants {
		if tr.Tenant == tenant {
			return tr
		}
	}
	t.Fatalf("commit has no result for %s", tenant)
	return schema.TenantResult{}
}
