package test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/schema"
)

// previewCommit waits until the preview Commit of sha has a final phase.
func (s *e2eServer) previewCommit(sha string) schema.Commit {
	s.t.Helper()
	var c schema.Commit
	s.WaitFor("preview of "+sha[:12]+" to finish", func() bool {
		var ok bool
		c, ok = s.Commit("preview-" + sha)
		return ok && c.Status.Phase.Done()
	})
	return c
}

// stateVersions returns how many versions of a tenant's state the server
// keeps: a preview must add none.
func (s *e2eServer) stateVersions(tenant string) int {
	s.t.Helper()
	var l struct {
		Total int `json:"total"`
	}
	s.mustGet("/api/v1/tfstate/"+tenant+"/versions", &l)
	return l.Total
}

// previewRefDirs returns the preview refs' workspaces in the data dir.
func previewRefDirs(t *testing.T, data string) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(data, "previews", "ref-*"))
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// pushBranch commits the work tree on a new branch off the current HEAD,
// pushes it and goes back to main. It returns the branch's sha.
func (e *e2e) pushBranch(branch, msg string) string {
	e.t.Helper()
	e.work.Run("checkout", "--quiet", "-b", branch)
	sha := e.work.Commit(msg)
	e.work.Run("push", "--quiet", "origin", "HEAD:refs/heads/"+branch)
	e.work.Run("checkout", "--quiet", "main")
	return sha
}

// previewDiff is the part of `rezusctl diff -o json` the test reads.
type previewDiff struct {
	Differences bool `json:"differences"`
	Tenants     []struct {
		Tenant    string              `json:"tenant"`
		Changes   []json.RawMessage   `json:"changes"`
		Plan      *schema.PlanSummary `json:"plan"`
		Resources []struct {
			Address string   `json:"address"`
			Actions []string `json:"actions"`
		} `json:"resources"`
		Error string `json:"error"`
	} `json:"tenants"`
}

// TestPreviews is issue 7 end to end, with --preview-refs 'refs/heads/*'
// and statuses to a fake GitHub. A branch that scales a tenant becomes a
// preview Commit with the plan "+1" and a status "would add 1, change 0,
// destroy 0" on the branch's sha, and changes no machine and no state.
// `rezusctl diff --plan` of the same change exits 1 with the same plan, and
// once the change reaches main the applied plan equals the preview's.
// Deleting the branch removes its workspaces. A preview pushed together with
// a change of main holds up neither.
func TestPreviews(t *testing.T) {
	const token = "ghp_e2ePreviewToken0123456789abcdef"
	forge := newFakeForge(t, "acme", "infra", token)
	e := newE2EAt(t, "acme/infra.git", e2eOptions{
		args: []string{"--preview-refs", "refs/heads/*", "--report", "github", "--github-api-url", forge.srv.URL, "--instance", forgeInstance},
		env:  []string{"REZUSCLOUD_GITHUB_TOKEN=" + token},
	})
	s := e.srv
	if _, ok := s.Commit("preview-" + e.first); ok {
		t.Fatal("main's head got a preview: the main ref must never be previewed")
	}

	machines := e2eMachineIDs(s.machines(""))
	versions := map[string]int{"production": s.stateVersions("production"), "staging": s.stateVersions("staging")}
	e.setCount("production", "workers", 3)
	branch := e.pushBranch("scale-up", "Scale production workers to 3")

	var preview schema.Commit
	t.Run("preview commit", func(t *testing.T) {
		preview = s.previewCommit(branch)
		if preview.Status.Phase != schema.CommitSucceeded {
			t.Fatalf("preview phase %s, want Succeeded: %s; %v", preview.Status.Phase, preview.Status.Message, preview.Status.Tenants)
		}
		if !preview.Spec.Preview || preview.Spec.SHA != branch || preview.Spec.Ref != "refs/heads/scale-up" || preview.Metadata.Labels["rezuscloud.io/preview"] != "true" {
			t.Errorf("preview commit spec %+v labels %v, want preview of %s on refs/heads/scale-up labelled rezuscloud.io/preview=true", preview.Spec, preview.Metadata.Labels, branch[:12])
		}
		if r := e2eResult(t, preview, "production"); r.Plan != (schema.PlanSummary{Add: 1, Machines: schema.PlanCounts{Add: 1}}) || r.Phase != schema.CommitSucceeded {
			t.Errorf("production in the preview: %s %s, want Succeeded +1 ~0 -0", r.Phase, r.Plan)
		}
		if r := e2eResult(t, preview, "staging"); r.Plan != (schema.PlanSummary{}) {
			t.Errorf("staging in the preview: %s, want no change", r.Plan)
		}
		var list struct {
			Items []schema.Commit `json:"items"`
		}
		s.mustGet("/api/v1/commits?labelSelector=rezuscloud.io/preview%3Dtrue", &list)
		if len(list.Items) != 1 || list.Items[0].Metadata.Name != "preview-"+branch {
			t.Errorf("commits labelled rezuscloud.io/preview=true: %d, want only preview-%s", len(list.Items), branch[:12])
		}
	})
	t.Run("preview status on the forge", func(t *testing.T) {
		target := s.URL() + "/commits/preview-" + branch
		if got := forge.checkFinal(branch, "rezuscloud/"+forgeInstance+"/production", target); got.Description != "would add 1, change 0, destroy 0" {
			t.Errorf("production preview status %q, want \"would add 1, change 0, destroy 0\"", got.Description)
		}
		if got := forge.checkFinal(branch, "rezuscloud/"+forgeInstance, target); got.Description != "would add 1, change 0, destroy 0 in 2 tenants" {
			t.Errorf("preview status %q, want \"would add 1, change 0, destroy 0 in 2 tenants\"", got.Description)
		}
	})
	t.Run("a preview changes nothing", func(t *testing.T) {
		after := e2eMachineIDs(s.machines(""))
		e2eSameIDs(t, "after the preview", machines, after)
		if len(after) != len(machines) {
			t.Errorf("%d machines after the preview, were %d", len(after), len(machines))
		}
		for tenant, n := range versions {
			if got := s.stateVersions(tenant); got != n {
				t.Errorf("state of %s has %d versions after the preview, had %d", tenant, got, n)
			}
		}
		if st := s.status(); st.Reconciler.LastAppliedCommit != e.first {
			t.Errorf("last applied commit %s after the preview, want %s", st.Reconciler.LastAppliedCommit, e.first)
		}
		if dirs := previewRefDirs(t, e.data); len(dirs) != 1 {
			t.Errorf("preview workspaces %v, want one for refs/heads/scale-up", dirs)
		}
	})

	t.Run("rezusctl diff --plan", func(t *testing.T) {
		// The work tree on main gets the same change, not committed yet.
		e.setCount("production", "workers", 3)
		code, out, stderr := runRezusctl(t, e.work.Dir(), s.URL(), "diff", "--plan", "-o", "json", e2eManifests)
		if code != 1 {
			t.Fatalf("rezusctl diff --plan: exit %d, want 1 (differences)\n%s\n%s", code, out, stderr)
		}
		var d previewDiff
		if err := json.Unmarshal(out, &d); err != nil {
			t.Fatalf("rezusctl diff -o json: %v\n%s", err, out)
		}
		if !d.Differences {
			t.Error("rezusctl diff says there are no differences")
		}
		found := false
		for _, td := range d.Tenants {
			switch td.Tenant {
			case "production":
				found = true
				if td.Plan == nil || *td.Plan != e2eResult(t, preview, "production").Plan || td.Error != "" {
					t.Errorf("rezusctl diff --plan: production plan %v (error %q), want the preview's %s", td.Plan, td.Error, e2eResult(t, preview, "production").Plan)
				}
				if len(td.Changes) == 0 {
					t.Error("rezusctl diff: production has no changed objects")
				}
				if len(td.Resources) != 1 || len(td.Resources[0].Actions) != 1 || td.Resources[0].Actions[0] != "create" {
					t.Errorf("rezusctl diff --plan: production resources %+v, want one machine to create", td.Resources)
				}
			case "staging":
				if len(td.Changes) != 0 || (td.Plan != nil && *td.Plan != (schema.PlanSummary{})) {
					t.Errorf("rezusctl diff: staging changes %d, plan %v, want none", len(td.Changes), td.Plan)
				}
			}
		}
		if !found {
			t.Errorf("rezusctl diff has no production: %s", out)
		}
		if dirs, _ := filepath.Glob(filepath.Join(e.data, "previews", "upload-*")); len(dirs) != 0 {
			t.Errorf("the uploaded preview left its workspaces: %v", dirs)
		}
	})

	t.Run("applied plan equals the preview", func(t *testing.T) {
		// A message of its own: with the branch's tree, parent and message,
		// a commit made in the same second would be the branch's commit.
		sha := e.push("Scale production workers to 3 on main")
		if sha == branch {
			t.Fatalf("main's commit is the branch's %s", sha[:12])
		}
		c := s.waitApplied(sha)
		if got, want := e2eResult(t, c, "production").Plan, e2eResult(t, preview, "production").Plan; got != want {
			t.Errorf("applied production plan %s, preview said %s", got, want)
		}
		if _, ok := s.Commit("preview-" + sha); ok {
			t.Error("a commit of main got a preview")
		}
	})

	t.Run("deleting the branch removes its workspaces", func(t *testing.T) {
		e.work.Run("push", "--quiet", "origin", ":refs/heads/scale-up")
		s.WaitFor("the workspaces of refs/heads/scale-up to go", func() bool { return len(previewRefDirs(t, e.data)) == 0 })
		if c, ok := s.Commit("preview-" + branch); !ok || c.Status.Phase != schema.CommitSucceeded {
			t.Errorf("the preview Commit of a deleted branch is gone or changed: %v %s", ok, c.Status.Phase)
		}
	})

	t.Run("a preview does not hold up main", func(t *testing.T) {
		staging := len(s.tenantMachines("staging"))
		e.setCount("production", "workers", 2)
		main := e.work.Commit("Scale production workers back to 2")
		e.setCount("staging", "workers", 2)
		e.work.Run("checkout", "--quiet", "-b", "grow-staging")
		grow := e.work.Commit("Grow staging")
		e.work.Run("checkout", "--quiet", "main")
		e.work.Run("push", "--quiet", "--atomic", "origin", main+":refs/heads/main", grow+":refs/heads/grow-staging")

		c := s.waitApplied(main)
		if r := e2eResult(t, c, "production"); r.Plan != (schema.PlanSummary{Destroy: 1, Machines: schema.PlanCounts{Destroy: 1}}) {
			t.Errorf("main's production plan %s, want +0 ~0 -1", r.Plan)
		}
		p := s.previewCommit(grow)
		if p.Status.Phase != schema.CommitSucceeded {
			t.Fatalf("preview of grow-staging: %s %s", p.Status.Phase, p.Status.Message)
		}
		if r := e2eResult(t, p, "staging"); r.Plan != (schema.PlanSummary{Add: 1, Machines: schema.PlanCounts{Add: 1}}) {
			t.Errorf("preview of grow-staging: staging plan %s, want +1 ~0 -0", r.Plan)
		}
		if got := len(s.tenantMachines("staging")); got != staging {
			t.Errorf("staging has %d machines after its preview, had %d", got, staging)
		}
		forge.checkFinal(main, "rezuscloud/"+forgeInstance, s.URL()+"/commits/"+main)
		applied := e2eResult(t, c, "production")
		overlap := p.Status.Timings.ReceivedAt.Before(applied.FinishedAt) && applied.StartedAt.Before(p.Status.Timings.FinishedAt)
		t.Logf("main's production ran %s to %s, the preview %s to %s (overlapping: %v)",
			applied.StartedAt.Format("15:04:05.000"), applied.FinishedAt.Format("15:04:05.000"),
			p.Status.Timings.ReceivedAt.Format("15:04:05.000"), p.Status.Timings.FinishedAt.Format("15:04:05.000"), overlap)
		forge.checkFinal(grow, "rezuscloud/"+forgeInstance+"/staging", s.URL()+"/commits/preview-"+grow)
	})
}

// runRezusctl runs rezusctl (servertest.CLI) with args in dir against the
// server at url, with a config of its own, and returns its exit code,
// stdout and stderr.
func runRezusctl(t *testing.T, dir, url string, args ...string) (int, []byte, []byte) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(servertest.CLI(t), args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_CONFIG_HOME=" + home, "REZUSCLOUD_SERVER=" + url, "NO_COLOR=1"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.Bytes(), stderr.Bytes()
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.Bytes(), stderr.Bytes()
	}
	t.Fatalf("rezusctl %v: %v", args, err)
	return 0, nil, nil
}
