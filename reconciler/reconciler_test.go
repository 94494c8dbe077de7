package reconciler

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/rezuscloud/rezuscloud/backend"
	exampledirs "github.com/rezuscloud/rezuscloud/examples"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/internal/sim"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/internal/tfcli"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
	"github.com/rezuscloud/rezuscloud/store"
)

// rig is a reconciler wired to a real state backend on loopback, the real
// tofu binary and the real sim provider.
type rig struct {
	t      *testing.T
	srv    *backend.Server
	rec    *Reconciler
	simDir string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	return newRigWith(t, func(*Options) {})
}

// newRigWith is newRig with options of the test's own.
func newRigWith(t *testing.T, set func(*Options)) *rig {
	t.Helper()
	dir := t.TempDir()
	srv := servertest.StartBackend(t, backend.Config{DataDir: filepath.Join(dir, "data")}, nil)

	cli := filepath.Join(dir, "tofu.rc")
	if err := tfcli.WriteCLIConfig(cli, tfcli.CLIConfig{MirrorDir: testenv.ProviderMirror(t)}); err != nil {
		t.Fatal(err)
	}
	simDir := filepath.Join(dir, "sim")
	runner, err := tofu.NewRunner(tofu.Options{Binary: testenv.Tofu(t), CLIConfigFile: cli, Env: map[string]string{"REZUSSIM_DIR": simDir}})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{DataDir: filepath.Join(dir, "data"), StateURL: srv.URL()}
	set(&opts)
	rec, err := New(srv.Store(), runner, render.Builtin(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.Close)
	return &rig{t: t, srv: srv, rec: rec, simDir: simDir}
}

// simBlockPrefix returns "127.B.", the start of every address of the
// rig's simulated machines.
func (r *rig) simBlockPrefix() string {
	r.t.Helper()
	st, err := sim.Open(r.simDir)
	if err != nil {
		r.t.Fatal(err)
	}
	return fmt.Sprintf("127.%d.", st.Block())
}

// examples returns the example repository as an in-memory tree that a
// test may change.
func examples(t *testing.T) fstest.MapFS {
	t.Helper()
	m := fstest.MapFS{}
	root := filepath.Join(testenv.Root(), "examples")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(root, p)
		if err == nil && d.IsDir() && exampledirs.IsCloud(filepath.ToSlash(rel)) {
			return filepath.SkipDir
		}
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		m[filepath.ToSlash(rel)] = &fstest.MapFile{Data: b, Mode: 0o644}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (r *rig) reconcile(rev, msg string, fsys fs.FS) *schema.Commit {
	r.t.Helper()
	c, err := r.rec.Reconcile(context.Background(), sources.Snapshot{Revision: rev, Ref: "refs/heads/main", Message: msg, FS: fsys, Root: "."})
	if err != nil {
		r.t.Fatalf("reconcile %s: %v", rev, err)
	}
	return c
}

func (r *rig) machines() map[string]schema.Machine {
	r.t.Helper()
	out := map[string]schema.Machine{}
	err := r.srv.Store().View(func(tx store.Tx) error {
		list, err := tx.List(schema.KindMachine)
		for _, res := range list {
			var m schema.Machine
			if err := json.Unmarshal(res.Object, &m); err != nil {
				return err
			}
			out[m.Metadata.Name] = m
		}
		return err
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return out
}

func countBy(ms map[string]schema.Machine, tenant, ng string) int {
	n := 0
	for _, m := range ms {
		if m.Spec.Tenant == tenant && (ng == "" || m.Spec.NodeGroup == ng) {
			n++
		}
	}
	return n
}

func mustSucceed(t *testing.T, c *schema.Commit) {
	t.Helper()
	if c.Status.Phase != schema.CommitSucceeded {
		b, _ := json.MarshalIndent(c.Status, "", "  ")
		t.Fatalf("commit %s phase %s:\n%s", c.Spec.SHA, c.Status.Phase, b)
	}
}

func TestReconcileLifecycle(t *testing.T) {
	r := newRig(t)
	repo := examples(t)

	c := r.reconcile("rev1", "first", repo)
	mustSucceed(t, c)
	ms := r.machines()
	if got := countBy(ms, "production", "controlplane"); got != 3 {
		t.Errorf("production controlplane machines = %d, want 3", got)
	}
	if got := countBy(ms, "production", "workers"); got != 2 {
		t.Errorf("production workers = %d, want 2", got)
	}
	if got := countBy(ms, "staging", ""); got != 2 {
		t.Errorf("staging machines = %d, want 2", got)
	}
	for id, m := range ms {
		if m.Metadata.Labels[schema.LabelTenant] != m.Spec.Tenant || m.Metadata.Labels[schema.LabelNodeGroup] != m.Spec.NodeGroup ||
			m.Metadata.Labels[schema.LabelProvider] != "sim" || m.Metadata.Labels[schema.LabelRole] != m.Spec.Role {
			t.Errorf("machine %s labels %v do not match its spec %+v", id, m.Metadata.Labels, m.Spec)
		}
		if a, err := netip.ParseAddr(m.Spec.ManagementAddress); m.Metadata.UID == "" || err != nil || !sim.Loopback(a) {
			t.Errorf("machine %s: uid %q address %q", id, m.Metadata.UID, m.Spec.ManagementAddress)
		}
	}
	for _, tr := range c.Status.Tenants {
		if tr.Plan.Add == 0 {
			t.Errorf("tenant %s plan %s, want additions", tr.Tenant, tr.Plan)
		}
	}

	// The same tree again, under another revision: no tofu at all.
	runs := r.rec.Runner().Runs()
	mustSucceed(t, r.reconcile("rev2", "readme only", repo))
	if got := r.rec.Runner().Runs(); got != runs {
		t.Errorf("an unchanged tree ran tofu %d times", got-runs)
	}

	// Scale production workers 2 -> 4: only two machines are added, and
	// every existing one keeps its id and uid.
	scaled := examples(t)
	ngFile := "production/nodegroups.yaml"
	scaled[ngFile].Data = []byte(strings.Replace(string(scaled[ngFile].Data), "count: 2", "count: 4", 1))
	c = r.reconcile("rev3", "scale up", scaled)
	mustSucceed(t, c)
	after := r.machines()
	if got := countBy(after, "production", "workers"); got != 4 {
		t.Errorf("after scale up: %d workers, want 4", got)
	}
	for id, m := range ms {
		if a, ok := after[id]; !ok || a.Metadata.UID != m.Metadata.UID {
			t.Errorf("machine %s lost or changed uid by scaling", id)
		}
	}
	for _, tr := range c.Status.Tenants {
		want := schema.PlanSummary{}
		if tr.Tenant == "production" {
			want.Add, want.Machines.Add = 2, 2
		}
		if tr.Plan != want {
			t.Errorf("scale up: tenant %s plan %s, want %s", tr.Tenant, tr.Plan, want)
		}
	}

	// An invalid commit changes nothing and names the file and line.
	broken := examples(t)
	broken[ngFile].Data = []byte(strings.Replace(string(broken[ngFile].Data), "count: 2", "count: -1", 1))
	runs = r.rec.Runner().Runs()
	c = r.reconcile("rev4", "broken", broken)
	if c.Status.Phase != schema.CommitInvalid || len(c.Status.Problems) == 0 || c.Status.Problems[0].File != ngFile || c.Status.Problems[0].Line == 0 {
		t.Fatalf("broken commit: phase %s problems %v", c.Status.Phase, c.Status.Problems)
	}
	if r.rec.Runner().Runs() != runs || len(r.machines()) != len(after) {
		t.Error("an invalid commit ran tofu or changed machines")
	}
}

func TestDeletionGuards(t *testing.T) {
	r := newRig(t)
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))

	// Removing both tenants is more than --max-deletions=1 allows.
	empty := fstest.MapFS{"README.md": {Data: []byte("nothing here")}}
	c := r.reconcile("rev2", "remove all", empty)
	if c.Status.Phase != schema.CommitFailed || !strings.Contains(c.Status.Message, TrailerAllowDeletions+": 2") {
		t.Fatalf("mass deletion: phase %s message %q", c.Status.Phase, c.Status.Message)
	}
	if n := len(r.machines()); n != 7 {
		t.Fatalf("mass deletion destroyed machines: %d left, want 7", n)
	}

	// Deletion protection keeps staging even with the trailer.
	protected := examples(t)
	tf := "staging/tenant.yaml"
	protected[tf].Data = []byte(strings.Replace(string(protected[tf].Data), "metadata:\n  name: staging\n", "metadata:\n  name: staging\n  annotations:\n    rezuscloud.io/deletion-protection: \"true\"\n", 1))
	mustSucceed(t, r.reconcile("rev3", "protect staging", protected))
	onlyProd := examples(t)
	for k := range onlyProd {
		if strings.HasPrefix(k, "staging/") {
			delete(onlyProd, k)
		}
	}
	c = r.reconcile("rev4", "drop staging", onlyProd)
	if c.Status.Phase != schema.CommitPartiallyFailed && c.Status.Phase != schema.CommitFailed {
		t.Fatalf("protected deletion: phase %s", c.Status.Phase)
	}
	if countBy(r.machines(), "staging", "") != 2 {
		t.Fatal("a protected tenant lost machines")
	}

	// Lift the protection, then remove staging: one tenant is within the limit.
	mustSucceed(t, r.reconcile("rev5", "unprotect staging", examples(t)))
	c = r.reconcile("rev6", "drop staging", onlyProd)
	mustSucceed(t, c)
	ms := r.machines()
	if countBy(ms, "staging", "") != 0 || countBy(ms, "production", "") != 5 {
		t.Fatalf("after removing staging: %d staging, %d production machines", countBy(ms, "staging", ""), countBy(ms, "production", ""))
	}
	err := r.srv.Store().View(func(tx store.Tx) error {
		if _, err := tx.Get(schema.KindTenant, "staging"); err == nil {
			t.Error("tenant staging still recorded after its destroy")
		}
		if store.CurrentState(tx, "staging") != nil {
			t.Error("staging still has a current state")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRerunKeepsRecord: reconciling a revision again (as after a restart)
// runs no tofu and leaves the revision's record of what it applied alone.
func TestRerunKeepsRecord(t *testing.T) {
	r := newRig(t)
	first := r.reconcile("rev1", "first", examples(t))
	mustSucceed(t, first)
	runs := r.rec.Runner().Runs()
	again := r.reconcile("rev1", "first", examples(t))
	if r.rec.Runner().Runs() != runs {
		t.Fatal("a rerun of an applied revision ran tofu")
	}
	var stored schema.Commit
	err := r.srv.Store().View(func(tx store.Tx) error {
		res, err := tx.Get(schema.KindCommit, "rev1")
		if err != nil {
			return err
		}
		return json.Unmarshal(res.Object, &stored)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*schema.Commit{again, &stored} {
		if len(c.Status.Tenants) != 2 || c.Status.Tenants[0].Plan.Add == 0 || c.Status.Tenants[1].Plan.Add == 0 {
			t.Errorf("rerun replaced the record of what rev1 applied: %+v", c.Status.Tenants)
		}
	}
}

// TestOutputTailHoldsNoSecrets: the tofu output a Commit shows (and the API
// serves to view tokens) never holds the tenant's secrets bundle.
func TestOutputTailHoldsNoSecrets(t *testing.T) {
	r := newRig(t)
	c := r.reconcile("rev1", "first", examples(t))
	mustSucceed(t, c)
	for _, tr := range c.Status.Tenants {
		bundle, _, err := secretsFromStateFile([]byte(r.rawState(tr.Tenant)))
		if err != nil || bundle == nil {
			t.Fatalf("%s: no bundle in state", tr.Tenant)
		}
		if tr.OutputTail == "" {
			t.Fatalf("%s: no output tail: the test would prove nothing", tr.Tenant)
		}
		for _, line := range strings.Split(string(bundle), "\n") {
			if v := strings.TrimSpace(line); len(v) > 20 && strings.Contains(tr.OutputTail, v) {
				t.Errorf("%s: output tail holds a line of the secrets bundle", tr.Tenant)
				break
			}
		}
		if strings.Contains(tr.OutputTail, "PRIVATE KEY") || strings.Contains(tr.OutputTail, `"format_version"`) {
			t.Errorf("%s: output tail holds a private key or the JSON of tofu show", tr.Tenant)
		}
	}
}
