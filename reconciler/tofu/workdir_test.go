package tofu

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// Runs in one work directory learn tofu's version once: a drift check or
// an apply costs its tofu commands, not another `tofu version` each time.
func TestRunsInADirAskTofuVersionOnce(t *testing.T) {
	r, dir := approveRig(t)
	log := filepath.Join(t.TempDir(), "argv.log")
	wrapper := filepath.Join(t.TempDir(), "tofu")
	script := "#!/bin/sh\necho \"$1\" >> '" + log + "'\nexec '" + testenv.Tofu(t) + "' \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	r.opts.Binary = wrapper
	writeTF(t, dir, `resource "terraform_data" "keep" { input = "a" }`)
	ctx := context.Background()
	if res, err := r.Apply(ctx, dir, []byte("v1"), nil, Creds{}); err != nil {
		t.Fatalf("apply: %v\n%s", err, res.Output)
	}
	for i := range 2 {
		if d, err := r.RefreshPlan(ctx, dir, []byte("v1"), nil, Creds{}); err != nil || len(d.Resources) != 0 {
			t.Fatalf("refresh plan %d: %v %+v\n%s", i, err, d.Resources, d.Output)
		}
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	cmds := strings.Fields(string(b))
	if n := strings.Count(" "+strings.Join(cmds, " ")+" ", " version "); n != 1 {
		t.Errorf("tofu version ran %d times in three runs of one work directory, want 1: %v", n, cmds)
	}
	if !strings.Contains(strings.Join(cmds, " "), "plan") {
		t.Errorf("the wrapper saw no plan: %v", cmds)
	}
}
