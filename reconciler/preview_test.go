package reconciler

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/modeldiff"
	"github.com/rezuscloud/rezuscloud/internal/preview"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
	"github.com/rezuscloud/rezuscloud/store"
)

func files(t *testing.T, m fstest.MapFS) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, f := range m {
		out[name] = string(f.Data)
	}
	return out
}

func tenantOf(res *preview.Result, name string) *preview.Tenant {
	for i := range res.Tenants {
		if res.Tenants[i].Tenant == name {
			return &res.Tenants[i]
		}
	}
	return nil
}

// TestPreviewPlansWhatApplyDoes: a preview plans without applying, and the
// apply of the same tree then does exactly what the preview said.
func TestPreviewPlansWhatApplyDoes(t *testing.T) {
	r := newRig(t)
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	before := r.machines()
	stateBefore := r.rawState("production")

	scaled := examples(t)
	f := "production/nodegroups.yaml"
	scaled[f].Data = []byte(strings.Replace(string(scaled[f].Data), "count: 2", "count: 3", 1))
	res, err := r.rec.Preview(context.Background(), preview.Request{Files: files(t, scaled), Plan: true, Rendered: true})
	if err != nil {
		t.Fatal(err)
	}
	prod, staging := tenantOf(res, "production"), tenantOf(res, "staging")
	if !res.Valid || prod == nil || staging == nil {
		t.Fatalf("preview: %+v", res)
	}
	if prod.Error != "" || prod.Plan == nil || *prod.Plan != (schema.PlanSummary{Add: 1, Machines: schema.PlanCounts{Add: 1}}) {
		t.Fatalf("production plan %+v error %q, want +1", prod.Plan, prod.Error)
	}
	var machineAdds int
	for _, c := range prod.Changes {
		if c.Kind == schema.KindMachine && c.Action == modeldiff.ActionCreate && c.Name == "workers/2" {
			machineAdds++
		}
	}
	if machineAdds != 1 || len(staging.Changes) != 0 || staging.Plan != nil {
		t.Errorf("changes: production %+v, staging %+v", prod.Changes, staging.Changes)
	}
	if prod.Rendered == nil || !strings.Contains(prod.Rendered.Proposed, `"count": 3`) || !strings.Contains(prod.Rendered.Applied, `"count": 2`) {
		t.Errorf("rendered workspaces missing or wrong")
	}
	if strings.Contains(prod.Rendered.Proposed, "BEGIN") || strings.Contains(prod.Rendered.Applied, "BEGIN") {
		t.Error("rendered workspaces show key material")
	}
	if len(r.machines()) != len(before) || r.rawState("production") != stateBefore {
		t.Fatal("a preview changed machines or state")
	}

	c := r.reconcile("rev2", "scale", scaled)
	mustSucceed(t, c)
	for _, tr := range c.Status.Tenants {
		if tr.Tenant == "production" && tr.Plan != *prod.Plan {
			t.Errorf("apply did %s, the preview said %s", tr.Plan, *prod.Plan)
		}
	}

	// Invalid uploads are reported like commits; nothing is planned.
	bad := examples(t)
	bad[f].Data = []byte(strings.Replace(string(bad[f].Data), "count: 3", "count: many", 1))
	res, err = r.rec.Preview(context.Background(), preview.Request{Files: files(t, bad), Plan: true})
	if err != nil || res.Valid || len(res.Problems) == 0 || res.Problems[0].File != f {
		t.Fatalf("invalid upload: %+v %v", res, err)
	}
	if _, err := r.rec.Preview(context.Background(), preview.Request{Files: map[string]string{"../x.yaml": "a"}}); err == nil {
		t.Fatal("a path leaving the tree was accepted")
	}

	// Removing a tenant previews its destruction.
	onlyProd := examples(t)
	for k := range onlyProd {
		if strings.HasPrefix(k, "staging/") {
			delete(onlyProd, k)
		}
	}
	res, err = r.rec.Preview(context.Background(), preview.Request{Files: files(t, onlyProd), Plan: true})
	if err != nil {
		t.Fatal(err)
	}
	if st := tenantOf(res, "staging"); st == nil || st.Plan == nil || st.Plan.Destroy == 0 || st.Changes[0].Action != modeldiff.ActionDelete {
		t.Fatalf("removed tenant preview: %+v", st)
	}
}

// TestPreviewRefRecordsCommit: a preview ref's head becomes a Commit with
// spec.preview and the plan, and applies nothing.
func TestPreviewRefRecordsCommit(t *testing.T) {
	r := newRig(t)
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	before := r.machines()
	scaled := examples(t)
	f := "staging/nodegroups.yaml"
	scaled[f].Data = []byte(strings.ReplaceAll(string(scaled[f].Data), "count: 1", "count: 3"))
	r.rec.SubmitPreview(sources.Snapshot{Revision: "abc123", Ref: "refs/heads/feature", FS: scaled, Root: "."})
	var c schema.Commit
	deadline := time.Now().Add(2 * time.Minute)
	for {
		found := false
		_ = r.srv.Store().View(func(tx store.Tx) error {
			res, err := tx.Get(schema.KindCommit, "preview-abc123")
			if err == nil && json.Unmarshal(res.Object, &c) == nil && c.Status.Phase.Done() {
				found = true
			}
			return nil
		})
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no finished preview commit")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !c.Spec.Preview || c.Spec.Ref != "refs/heads/feature" || c.Status.Phase != schema.CommitSucceeded || c.Metadata.Labels[schema.LabelPreview] != "true" {
		t.Fatalf("preview commit: %+v", c)
	}
	var st *schema.TenantResult
	for i := range c.Status.Tenants {
		if c.Status.Tenants[i].Tenant == "staging" {
			st = &c.Status.Tenants[i]
		}
	}
	if st == nil || st.Plan.Add != 4 {
		t.Fatalf("staging preview plan %+v, want +4 (both groups to 3)", st)
	}
	if len(r.machines()) != len(before) {
		t.Fatal("a preview ref changed machines")
	}
}
