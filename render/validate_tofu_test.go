package render

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/internal/tfcli"
)

// tofuValidate runs `tofu init -backend=false` and `tofu validate -json` on
// a workspace holding main, with providers from the mirror only, and
// returns validate's diagnostics.
func tofuValidate(t *testing.T, main []byte) (valid bool, diags []tofuDiag) {
	t.Helper()
	tofu := testenv.Tofu(t)
	dir := t.TempDir()
	cli := filepath.Join(dir, "tofu.rc")
	if err := tfcli.WriteCLIConfig(cli, tfcli.CLIConfig{MirrorDir: testenv.ProviderMirror(t)}); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, MainFile), main, 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TF_CLI_CONFIG_FILE=" + cli, "CHECKPOINT_DISABLE=1"}
	init := exec.Command(tofu, "init", "-backend=false", "-input=false", "-no-color")
	init.Dir, init.Env = work, env
	if out, err := init.CombinedOutput(); err != nil {
		t.Fatalf("tofu init: %v\n%s", err, out)
	}
	val := exec.Command(tofu, "validate", "-json", "-no-color")
	val.Dir, val.Env = work, env
	out, _ := val.Output()
	var res struct {
		Valid       bool       `json:"valid"`
		Diagnostics []tofuDiag `json:"diagnostics"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("tofu validate -json: %v\n%s", err, out)
	}
	return res.Valid, res.Diagnostics
}

type tofuDiag struct {
	Severity string `json:"severity"`
	Summary  string `json:"summary"`
	Detail   string `json:"detail"`
	Range    struct {
		Start struct {
			Line int `json:"line"`
		} `json:"start"`
	} `json:"range"`
}

// TestGoldenOpenStackValidates checks every OpenStack golden workspace
// against the real provider's schema, offline.
func TestGoldenOpenStackValidates(t *testing.T) {
	goldens, _ := filepath.Glob(filepath.Join("testdata", "golden", "*.tf.json"))
	n := 0
	for _, g := range goldens {
		b, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"terraform-provider-openstack/openstack"`) {
			continue
		}
		n++
		t.Run(filepath.Base(g), func(t *testing.T) {
			if valid, diags := tofuValidate(t, b); !valid {
				t.Errorf("tofu validate: %+v", diags)
			}
		})
	}
	if n == 0 {
		t.Fatal("no OpenStack golden workspace")
	}
}

// TestTofuValidateCatchesBrokenOpenStack shows that the validation above can
// fail: an unknown argument and a wrong type in the rendered instance are
// reported with their line.
func TestTofuValidateCatchesBrokenOpenStack(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "golden", "openstack-prod.tf.json"))
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(string(b), `"flavor_name": "m1.large",`, `"flavor_name": "m1.large",
        "flavour": "m1.large",
        "security_groups": "default",`, 1)
	valid, diags := tofuValidate(t, []byte(broken))
	if valid || len(diags) < 2 {
		t.Fatalf("broken workspace: valid %v, diagnostics %+v", valid, diags)
	}
	for _, d := range diags {
		if d.Range.Start.Line == 0 {
			t.Errorf("diagnostic without a line: %+v", d)
		}
	}
}

// TestGoldenMetalValidates checks the bare-metal golden workspace, whose
// records are tofu's built-in terraform_data, with tofu itself.
func TestGoldenMetalValidates(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "golden", "metal-lab.tf.json"))
	if err != nil {
		t.Fatal(err)
	}
	if valid, diags := tofuValidate(t, b); !valid {
		t.Errorf("tofu validate: %+v", diags)
	}
}
