package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// The examples are valid; the metal example's machines are the metal
// demo's simulated ones, at loopback addresses, which need the flag.
func TestValidateExamples(t *testing.T) {
	for dir, want := range map[string]string{
		"examples":           "valid: 14 files, 5 tenants",
		"examples/openstack": "valid: 3 files, 1 tenants",
		"examples/oci":       "valid: 3 files, 1 tenants",
		"examples/metal":     "valid: 2 files, 1 tenants",
	} {
		code, out, errOut := runCLI(t, "validate", "--allow-loopback-metal", filepath.Join(testenv.Root(), filepath.FromSlash(dir)))
		if code != 0 || out != "" || !strings.HasPrefix(errOut, want) {
			t.Errorf("validate %s: code %d stdout %q stderr %q", dir, code, out, errOut)
		}
	}
}

// Offline, validate refuses bare-metal machines at loopback addresses as a
// server does by default, at their file:line; --allow-loopback-metal, or
// its environment variable, accepts them as the server's flag does.
func TestValidateLoopbackMetal(t *testing.T) {
	dir := filepath.Join(testenv.Root(), "examples", "metal")
	file := filepath.Join(dir, "nodegroups.yaml")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	line := 1 + strings.Count(string(b[:bytes.Index(b, []byte("address: 127.3.0.11"))]), "\n")
	code, out, errOut := runCLI(t, "validate", dir)
	want := fmt.Sprintf(`%s:%d:1: /spec/providerConfig/machines/0/address: metal providerConfig.machines[0].address "127.3.0.11" is a loopback address`, file, line)
	if code != 1 || !strings.HasPrefix(out, want) || strings.Count(out, "is a loopback address") != 4 || errOut != "invalid: 4 problems\n" {
		t.Errorf("without the flag: code %d stdout %q stderr %q; want 4 problems, the first %q", code, out, errOut, want)
	}
	t.Setenv("REZUSCLOUD_ALLOW_LOOPBACK_METAL", "true")
	if code, out, errOut := runCLI(t, "validate", dir); code != 0 || out != "" {
		t.Errorf("with REZUSCLOUD_ALLOW_LOOPBACK_METAL=true: code %d stdout %q stderr %q", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, "validate", "--allow-loopback-metal=false", dir); code != 1 {
		t.Errorf("the flag beats the environment: code %d stderr %q", code, errOut)
	}
	t.Setenv("REZUSCLOUD_ALLOW_LOOPBACK_METAL", "maybe")
	if code, _, errOut := runCLI(t, "validate", dir); code != 2 || !strings.Contains(errOut, `REZUSCLOUD_ALLOW_LOOPBACK_METAL="maybe": want true or false`) {
		t.Errorf("a bad value: code %d stderr %q", code, errOut)
	}
}

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const tenantDoc = `apiVersion: rezuscloud.io/v1
kind: Tenant
metadata:
  name: acme
spec:
  kubernetesVersion: "1.34.1"
  talosVersion: "1.12.6"
  controlPlaneEndpoint: https://acme.example.internal:6443
`

const badNodeGroup = `apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: workers
  labels:
    rezuscloud.io/tenant: acme
    rezuscloud.io/role: worker
spec:
  count: -2
  providerClass: sim
`

const badShape = `apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: big
  labels:
    rezuscloud.io/tenant: acme
    rezuscloud.io/role: worker
spec:
  count: 1
  providerClass: sim
  providerConfig:
    shape: enormous
`

func TestValidateInvalidIsCompilerStyle(t *testing.T) {
	dir := writeTree(t, map[string]string{"tenant.yaml": tenantDoc, "ng/workers.yaml": badNodeGroup})
	code, out, errOut := runCLI(t, "validate", dir)
	if code != 1 {
		t.Fatalf("code %d, want 1; stderr %q", code, errOut)
	}
	want := filepath.Join(dir, "ng", "workers.yaml") + ":9:"
	if !strings.HasPrefix(out, want) || !strings.Contains(out, "/spec/count") {
		t.Errorf("stdout %q, want a line starting %q naming /spec/count", out, want)
	}
	if !strings.Contains(errOut, "invalid: 1 problems") {
		t.Errorf("stderr %q", errOut)
	}
}

func TestValidateRunsProviderChecks(t *testing.T) {
	dir := writeTree(t, map[string]string{"tenant.yaml": tenantDoc, "big.yaml": badShape})
	code, out, _ := runCLI(t, "validate", dir)
	if code != 1 || !strings.Contains(out, "big.yaml:12:") || !strings.Contains(out, `shape "enormous"`) {
		t.Fatalf("code %d stdout %q, want the sim module's shape problem at big.yaml:12", code, out)
	}
}

func TestValidateJSON(t *testing.T) {
	dir := writeTree(t, map[string]string{"tenant.yaml": tenantDoc, "workers.yaml": badNodeGroup})
	code, out, _ := runCLI(t, "validate", "-o", "json", dir)
	var res validateResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("code %d, output is not JSON: %v\n%s", code, err, out)
	}
	if code != 1 || res.Valid || len(res.Problems) != 1 || res.Problems[0].Line != 9 || res.Problems[0].Path != "/spec/count" {
		t.Fatalf("code %d result %+v", code, res)
	}
}

func TestValidateUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"validate", filepath.Join(t.TempDir(), "missing")},
		{"validate", "-o", "xml", "."},
		{"validate", "a", "b"},
		{"validate", "--no-such-flag"},
		{"validate", "--rev", "HEAD", "--repo", t.TempDir()},
	} {
		code, _, errOut := runCLI(t, args...)
		if code != 2 || !strings.HasPrefix(errOut, "error: ") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: code %d stderr %q, want 2 and one error line", args, code, errOut)
		}
	}
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestValidateRev reads commits straight from git: the working tree does
// not matter, only the commit's tree does.
func TestValidateRev(t *testing.T) {
	repo := writeTree(t, map[string]string{"clusters/tenant.yaml": tenantDoc})
	git(t, repo, "init", "-q", "-b", "main")
	git(t, repo, "add", ".")
	git(t, repo, "commit", "-q", "-m", "good")
	good := git(t, repo, "rev-parse", "HEAD")
	if err := os.WriteFile(filepath.Join(repo, "clusters", "workers.yaml"), []byte(badNodeGroup), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, repo, "add", ".")
	git(t, repo, "commit", "-q", "-m", "bad")
	// Break the working tree too: --rev must not look at it.
	if err := os.WriteFile(filepath.Join(repo, "clusters", "tenant.yaml"), []byte("::: not yaml"), 0o644); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runCLI(t, "validate", "--repo", repo, "--rev", good, "clusters")
	if code != 0 {
		t.Fatalf("good commit: code %d stdout %q stderr %q", code, out, errOut)
	}
	code, out, _ = runCLI(t, "validate", "--repo", repo, "--rev", "HEAD", "clusters")
	if code != 1 || !strings.HasPrefix(out, "clusters/workers.yaml:9:") {
		t.Fatalf("bad commit: code %d stdout %q", code, out)
	}
	code, _, errOut = runCLI(t, "validate", "--repo", repo, "--rev", "no-such-branch", "clusters")
	if code != 2 || !strings.Contains(errOut, "no-such-branch") {
		t.Fatalf("unknown revision: code %d stderr %q", code, errOut)
	}
}
