package tofu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/terraform-exec/tfexec"
	tfjson "github.com/hashicorp/terraform-json"
)

// Drift is what a refresh-only plan found: the resources whose real state
// differs from the state tofu keeps.
type Drift struct {
	Resources []DriftedResource
	Output    string // the tail of tofu's output, with secrets redacted
}

// DriftedResource is one resource that changed outside tofu. It holds
// names only, never values: the values of a resource may be secret.
type DriftedResource struct {
	Address string
	// Action is "update" (attributes changed) or "delete" (the resource is
	// gone).
	Action string
	// Attributes names the top-level attributes that changed, sorted; the
	// ones the provider marks sensitive are among them like any other.
	Attributes []string
}

// RefreshPlan runs `tofu plan -refresh-only` in the work directory, with
// the state lock as an apply takes it and vars handled as Apply handles
// them, and reports the drift it found. It changes no state. The plan's
// JSON lines say whether anything drifted; only then is it planned again
// into a plan file, which `tofu show` reads for the changed attributes and
// which is removed, so that a check without drift costs one plan and
// writes no plan file.
func (r *Runner) RefreshPlan(ctx context.Context, dir string, initInputs, vars []byte, creds Creds) (*Drift, error) {
	s, err := r.open(ctx, dir, creds)
	if err != nil {
		return nil, err
	}
	defer s.close()
	res := &Drift{}
	defer func() { res.Output = s.out.String() }()
	if err := s.init(ctx, initInputs); err != nil {
		return res, err
	}
	varPath, removeVars, err := s.withVars(vars)
	if err != nil {
		return res, err
	}
	defer removeVars()
	opts := []tfexec.PlanOption{tfexec.RefreshOnly(true)}
	if varPath != "" {
		opts = append(opts, tfexec.VarFile(varPath))
	}
	var stream planJSON
	err = s.cmd("plan", func() (err error) {
		_, err = s.tf.PlanJSON(ctx, &stream, opts...)
		return err
	})
	if err != nil {
		return res, fmt.Errorf("tofu plan -refresh-only: %w", s.redact(err))
	}
	if !stream.drift() {
		return res, nil
	}
	planPath := filepath.Join(s.dir, PlanFile)
	defer os.Remove(planPath)
	err = s.cmd("plan", func() (err error) {
		_, err = s.tf.Plan(ctx, append(opts, tfexec.Out(planPath))...)
		return err
	})
	removeVars()
	if err != nil {
		return res, fmt.Errorf("tofu plan -refresh-only: %w", s.redact(err))
	}
	var plan *tfjson.Plan
	err = s.cmd("show", func() (err error) {
		plan, err = s.tf.ShowPlanFile(ctx, planPath)
		return err
	})
	if err != nil {
		return res, fmt.Errorf("tofu show plan: %w", s.redact(err))
	}
	res.Resources = DriftOf(plan)
	return res, nil
}
