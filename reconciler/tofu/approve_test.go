package tofu

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/schema"
)

// approveRig is a runner on a work directory of builtin terraform_data
// resources with local state, so that the real tofu plans and applies
// without a provider or a backend.
func approveRig(t *testing.T) (*Runner, string) {
	t.Helper()
	cli := filepath.Join(t.TempDir(), "cli.tfrc")
	if err := os.WriteFile(cli, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(Options{Binary: testenv.Tofu(t), CLIConfigFile: cli, InterruptDelay: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return r, t.TempDir()
}

func writeTF(t *testing.T, dir, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func stateHas(t *testing.T, dir, name string) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "terraform.tfstate"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Resources []struct{ Name string } `json:"resources"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(st.Resources, func(r struct{ Name string }) bool { return r.Name == name })
}

// One tofu process plans, shows the check what it destroys, and applies
// only on the server's yes; a refused plan changes nothing.
func TestApplyApprovesThePlanItChecked(t *testing.T) {
	r, dir := approveRig(t)
	ctx := context.Background()
	// A value that reads like tofu's question must not be taken for it.
	writeTF(t, dir, `
resource "terraform_data" "keep" { input = "a" }
resource "terraform_data" "gone" { input = "\nDo you want to perform these actions?\n  OpenTofu will perform the actions described above.\n\n  Enter a value: " }
`)
	res, err := r.Apply(ctx, dir, []byte("v1"), nil, Creds{})
	if err != nil || res.Plan.Add != 2 || !stateHas(t, dir, "gone") {
		t.Fatalf("first apply: %v, plan %+v\n%s", err, res.Plan, res.Output)
	}
	// Builtin resources need no provider, so init leaves no .terraform
	// behind; with one, the runner skips init as it does in a workspace.
	if err := os.Mkdir(filepath.Join(dir, ".terraform"), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		t.Fatal(err)
	}
	runs := r.Runs()
	writeTF(t, dir, `resource "terraform_data" "keep" { input = "a" }`)
	refused := errors.New("no destroys today")
	var seen []PlannedChange
	res, err = r.ApplyChecked(ctx, dir, []byte("v1"), nil, Creds{}, func(gone []PlannedChange) error {
		seen = gone
		return refused
	})
	if !errors.Is(err, refused) || res.Plan.Destroy != 1 {
		t.Fatalf("refused apply: %v, plan %+v", err, res.Plan)
	}
	if len(seen) != 1 || seen[0].Address != "terraform_data.gone" || !slices.Equal(seen[0].Actions, []string{"delete"}) {
		t.Fatalf("the check saw %+v, want terraform_data.gone deleted", seen)
	}
	if !stateHas(t, dir, "gone") || !strings.Contains(res.Output, "Apply cancelled") {
		t.Fatalf("a refused plan was applied:\n%s", res.Output)
	}
	if got := r.Runs() - runs; got != 1 {
		t.Errorf("the refused apply started %d tofu processes, want 1", got)
	}
	// Plan and apply in one process; then the state is read (tofu show,
	// as this state is not the server's backend).
	runs = r.Runs()
	res, err = r.ApplyChecked(ctx, dir, []byte("v1"), nil, Creds{}, func([]PlannedChange) error { return nil })
	if err != nil || res.Plan.Destroy != 1 || stateHas(t, dir, "gone") {
		t.Fatalf("approved apply: %v, plan %+v\n%s", err, res.Plan, res.Output)
	}
	if got := r.Runs() - runs; got != 2 {
		t.Errorf("the approved apply started %d tofu processes, want 2 (apply, show)", got)
	}
	runs = r.Runs()
	if res, err = r.Apply(ctx, dir, []byte("v1"), nil, Creds{}); err != nil || res.Plan != (schema.PlanSummary{}) {
		t.Fatalf("apply without changes: %v, plan %+v", err, res.Plan)
	}
	if got := r.Runs() - runs; got != 2 {
		t.Errorf("an apply without changes started %d tofu processes, want 2 (apply, show)", got)
	}
}

// The sensitive variables reach tofu in the var file, which is gone once
// tofu waits for approval; a question the server cannot answer ends the
// run with what tofu asked, rather than hanging.
func TestApplyVarsAndUnansweredQuestions(t *testing.T) {
	r, dir := approveRig(t)
	ctx := context.Background()
	writeTF(t, dir, `
variable "secret" {
  type      = string
  sensitive = true
}
resource "terraform_data" "x" { input = var.secret }
`)
	var present bool
	_, err := r.ApplyChecked(ctx, dir, []byte("v1"), []byte(`{"secret":"hunter2-hunter2"}`), Creds{}, func([]PlannedChange) error {
		_, err := os.Stat(filepath.Join(dir, VarFile))
		present = err == nil
		return nil
	})
	if err != nil || present {
		t.Fatalf("apply with vars: %v; var file present at approval: %v", err, present)
	}
	if _, err := os.Stat(filepath.Join(dir, VarFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("var file after the run: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = r.Apply(ctx, dir, []byte("v1"), nil, Creds{})
	if err == nil || !strings.Contains(err.Error(), "asked for input") || !strings.Contains(err.Error(), "var.secret") {
		t.Fatalf("apply without the variable: %v, want tofu's question named", err)
	}
}
