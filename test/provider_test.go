package test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/rezuscloud/rezuscloud/internal/sim"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/internal/tfcli"
)

// installSimProvider builds the provider with scripts/install-provider.sh
// into mirror, with extra linker flags, and returns the version it printed.
func installSimProvider(t *testing.T, mirror, ldflags string) string {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(testenv.Root(), "scripts", "install-provider.sh"), mirror)
	cmd.Env = append(os.Environ(), "REZUSSIM_LDFLAGS="+ldflags)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("install-provider.sh: %v\n%s", err, stderr.Bytes())
	}
	lines := strings.Fields(string(out))
	if len(lines) == 0 {
		t.Fatalf("install-provider.sh printed no version\n%s", stderr.Bytes())
	}
	v := lines[len(lines)-1]
	if !regexp.MustCompile(`^0\.1\.[0-9]+$`).MatchString(v) {
		t.Fatalf("install-provider.sh printed version %q", v)
	}
	return v
}

// simWorkspace is a tofu work directory using the sim provider from a mirror.
type simWorkspace struct {
	t        *testing.T
	tofu     string
	dir      string // the work directory
	machines string // the provider's machine directory
	env      []string
}

// newSimWorkspace writes main.tf with count machines read from var.n, and a
// CLI config pointing at mirror. Its tofu runs see only PATH, HOME and the
// CLI config: no REZUSSIM_DIR unless extraEnv adds it.
func newSimWorkspace(t *testing.T, mirror, mainTF string, extraEnv ...string) *simWorkspace {
	t.Helper()
	root := t.TempDir()
	w := &simWorkspace{
		t:        t,
		tofu:     testenv.Tofu(t),
		dir:      filepath.Join(root, "work"),
		machines: filepath.Join(root, "machines"),
	}
	if err := os.Mkdir(w.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(root, "tofu.rc")
	if err := tfcli.WriteCLIConfig(cfg, tfcli.CLIConfig{MirrorDir: mirror}); err != nil {
		t.Fatal(err)
	}
	w.env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + root,
		"TF_CLI_CONFIG_FILE=" + cfg,
		"TF_IN_AUTOMATION=1",
	}, extraEnv...)
	w.write(mainTF)
	return w
}

func (w *simWorkspace) write(mainTF string) {
	w.t.Helper()
	mainTF = strings.ReplaceAll(mainTF, "MACHINES", w.machines)
	if err := os.WriteFile(filepath.Join(w.dir, "main.tf"), []byte(mainTF), 0o600); err != nil {
		w.t.Fatal(err)
	}
}

// run runs tofu and returns its combined output and exit code; only a
// failure to start it fails the test.
func (w *simWorkspace) run(args ...string) (string, int) {
	w.t.Helper()
	n := 1 // options follow the (sub)command
	if args[0] == "state" {
		n = 2
	}
	cmd := exec.Command(w.tofu, append(args[:n:n], append([]string{"-no-color"}, args[n:]...)...)...)
	cmd.Dir = w.dir
	cmd.Env = w.env
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(out), exit.ExitCode()
	}
	if err != nil {
		w.t.Fatalf("tofu %s: %v", strings.Join(args, " "), err)
	}
	return string(out), 0
}

// must runs tofu and fails the test unless it exits 0.
func (w *simWorkspace) must(args ...string) string {
	w.t.Helper()
	out, code := w.run(args...)
	if code != 0 {
		w.t.Fatalf("tofu %s: exit %d\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

func (w *simWorkspace) apply(n int, extra ...string) string {
	w.t.Helper()
	return w.must(append([]string{"apply", "-auto-approve", "-input=false", fmt.Sprintf("-var=n=%d", n)}, extra...)...)
}

// block returns the address block of the workspace's sim dir.
func (w *simWorkspace) block() sim.Block {
	w.t.Helper()
	store, err := sim.Open(w.machines)
	if err != nil {
		w.t.Fatal(err)
	}
	return store.Block()
}

// records returns the machine files keyed by Terraform's count index, read
// back through the state so that both views are checked against each other.
func (w *simWorkspace) records() map[int]sim.Record {
	w.t.Helper()
	store, err := sim.Open(w.machines)
	if err != nil {
		w.t.Fatal(err)
	}
	files, err := store.List()
	if err != nil {
		w.t.Fatal(err)
	}
	byID := map[string]sim.Record{}
	for _, r := range files {
		byID[r.ID] = r
	}

	var st tfjson.State
	if err := json.Unmarshal([]byte(w.must("show", "-json")), &st); err != nil {
		w.t.Fatal(err)
	}
	out := map[int]sim.Record{}
	if st.Values == nil {
		if len(files) != 0 {
			w.t.Fatalf("empty state but %d machine files", len(files))
		}
		return out
	}
	for _, res := range st.Values.RootModule.Resources {
		if res.Type != "rezussim_machine" {
			continue
		}
		idx := int(res.Index.(float64))
		id, _ := res.AttributeValues["id"].(string)
		r, ok := byID[id]
		if !ok {
			w.t.Fatalf("%s: id %q in state has no machine file", res.Address, id)
		}
		for attr, want := range map[string]string{
			"address": r.Address, "hostname": r.Hostname, "name": r.Name, "tenant": r.Tenant,
			"node_group": r.NodeGroup, "role": r.Role, "shape": r.Shape, "image": r.Image,
			"user_data_hash": r.UserDataSHA256,
		} {
			if got := res.AttributeValues[attr]; got != want {
				w.t.Errorf("%s: state %s = %v, machine file has %q", res.Address, attr, got, want)
			}
		}
		var sensitive map[string]any
		json.Unmarshal(res.SensitiveValues, &sensitive)
		if sensitive["user_data"] != true {
			w.t.Errorf("%s: user_data not marked sensitive in state (sensitive_values %s)", res.Address, res.SensitiveValues)
		}
		out[idx] = r
		delete(byID, id)
	}
	for id := range byID {
		w.t.Errorf("machine file %s is in no state", id)
	}
	return out
}

const simMachinesTF = `
terraform {
  required_providers {
    rezussim = { source = "rezuscloud.io/rezuscloud/rezussim" }
  }
}

variable "n" { type = number }
variable "shape" {
  type    = string
  default = "small"
}
variable "image" {
  type    = string
  default = "talos-v1.12.6"
}

provider "rezussim" {
  dir = "MACHINES"
}

resource "rezussim_machine" "w" {
  count      = var.n
  name       = "w-${count.index}"
  tenant     = "acme"
  node_group = "workers"
  role       = "worker"
  shape      = var.shape
  image      = var.image
  user_data  = "machine:\n  token: TOPSECRET-${count.index}\n"
}

output "machines" {
  value = [for m in rezussim_machine.w : { id = m.id, address = m.address, hostname = m.hostname }]
}
`

func TestSimProviderMachines(t *testing.T) {
	mirror := t.TempDir()
	installSimProvider(t, mirror, "")
	w := newSimWorkspace(t, mirror, simMachinesTF)
	w.must("init", "-input=false")

	// The plan never shows user_data.
	plan := w.must("plan", "-input=false", "-var=n=3")
	if strings.Contains(plan, "TOPSECRET") {
		t.Fatalf("plan output shows user_data:\n%s", plan)
	}
	hash0 := sim.HashUserData([]byte("machine:\n  token: TOPSECRET-0\n"))
	if !regexp.MustCompile(`user_data += \(sensitive value\)`).MatchString(plan) ||
		!strings.Contains(plan, `user_data_hash = "`+hash0+`"`) ||
		!strings.Contains(plan, "3 to add, 0 to change, 0 to destroy") {
		t.Fatalf("plan output:\n%s", plan)
	}

	applied := w.apply(3)
	if strings.Contains(applied, "TOPSECRET") {
		t.Fatalf("apply output shows user_data:\n%s", applied)
	}
	three := w.records()
	if len(three) != 3 {
		t.Fatalf("%d machines after apply of 3", len(three))
	}
	addrs := map[string]bool{}
	for i, r := range three {
		a, err := netip.ParseAddr(r.Address)
		if err != nil || !w.block().Contains(a) || addrs[r.Address] {
			t.Fatalf("machine %d: address %q not a distinct address of the sim dir's block %s", i, r.Address, w.block())
		}
		addrs[r.Address] = true
		if !sim.ValidID(r.ID) || r.Hostname != "acme-workers-"+r.ID[len(r.ID)-6:] || r.Name != fmt.Sprintf("w-%d", i) {
			t.Fatalf("machine %d: %+v", i, r)
		}
		if want := sim.HashUserData(fmt.Appendf(nil, "machine:\n  token: TOPSECRET-%d\n", i)); r.UserDataSHA256 != want {
			t.Fatalf("machine %d: userDataSHA256 %s, want %s", i, r.UserDataSHA256, want)
		}
		b, err := os.ReadFile(filepath.Join(w.machines, r.ID+".json"))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("TOPSECRET")) || bytes.Contains(b, []byte("token")) {
			t.Fatalf("machine file holds user_data:\n%s", b)
		}
		fi, _ := os.Stat(filepath.Join(w.machines, r.ID+".json"))
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("machine file mode %v", fi.Mode())
		}
		// The machine's own disk holds its user data, as a real one does.
		disk := filepath.Join(w.machines, sim.DisksDir, r.ID, sim.UserDataFile)
		ud, err := os.ReadFile(disk)
		if want := fmt.Sprintf("machine:\n  token: TOPSECRET-%d\n", i); err != nil || string(ud) != want {
			t.Fatalf("machine %d: disk %q, %v; want %q", i, ud, err, want)
		}
		if fi, _ := os.Stat(disk); fi.Mode().Perm() != 0o600 {
			t.Fatalf("disk file mode %v", fi.Mode())
		}
	}
	if fi, _ := os.Stat(w.machines); fi.Mode().Perm() != 0o700 {
		t.Fatalf("machine dir mode %v", fi.Mode())
	}
	var outputs []struct{ ID, Address, Hostname string }
	if err := json.Unmarshal([]byte(w.must("output", "-json", "machines")), &outputs); err != nil {
		t.Fatal(err)
	}
	for i, o := range outputs {
		if r := three[i]; o.ID != r.ID || o.Address != r.Address || o.Hostname != r.Hostname {
			t.Fatalf("output %d = %+v, machine file %+v", i, o, r)
		}
	}

	// A refresh changes nothing: ids, addresses and host names are stable.
	if out, code := w.run("plan", "-input=false", "-detailed-exitcode", "-var=n=3"); code != 0 {
		t.Fatalf("plan after apply: exit %d\n%s", code, out)
	}

	w.apply(5)
	five := w.records()
	if len(five) != 5 {
		t.Fatalf("%d machines after scaling to 5", len(five))
	}
	for i := range 3 {
		if five[i] != three[i] {
			t.Fatalf("machine %d changed when scaling up: %+v -> %+v", i, three[i], five[i])
		}
	}
	w.apply(2)
	two := w.records()
	if len(two) != 2 {
		t.Fatalf("%d machines after scaling to 2", len(two))
	}
	for i := range 2 {
		if two[i] != three[i] {
			t.Fatalf("machine %d changed when scaling down: %+v -> %+v", i, three[i], two[i])
		}
	}
	if files, _ := filepath.Glob(filepath.Join(w.machines, "sim-*.json")); len(files) != 2 {
		t.Fatalf("%d machine files after scaling to 2: %v", len(files), files)
	}

	// Shape changes in place; the machine keeps its id and address.
	out := w.apply(2, "-var=shape=large")
	if !strings.Contains(out, "0 added, 2 changed, 0 destroyed") {
		t.Fatalf("shape change:\n%s", out)
	}
	for i, r := range w.records() {
		if r.ID != two[i].ID || r.Address != two[i].Address || r.Shape != "large" || !r.CreatedAt.Equal(two[i].CreatedAt) {
			t.Fatalf("machine %d after shape change: %+v, was %+v", i, r, two[i])
		}
	}

	// A new image replaces the machines.
	out = w.apply(2, "-var=shape=large", "-var=image=talos-v1.13.0")
	if !strings.Contains(out, "2 added, 0 changed, 2 destroyed") {
		t.Fatalf("image change:\n%s", out)
	}
	for i, r := range w.records() {
		if r.ID == two[i].ID || r.Image != "talos-v1.13.0" {
			t.Fatalf("machine %d not replaced: %+v", i, r)
		}
	}

	// New user data replaces the machines; the plan shows only its hash.
	w.write(strings.Replace(simMachinesTF, "TOPSECRET", "NEWSECRET", 1))
	out, code := w.run("plan", "-input=false", "-detailed-exitcode", "-var=n=2", "-var=shape=large", "-var=image=talos-v1.13.0")
	newHash := sim.HashUserData([]byte("machine:\n  token: NEWSECRET-0\n"))
	if code != 2 || !strings.Contains(out, "rezussim_machine.w[0] must be replaced") ||
		!strings.Contains(out, "2 to add, 0 to change, 2 to destroy") || !strings.Contains(out, newHash) ||
		strings.Contains(out, "SECRET-") {
		t.Fatalf("plan after changing user_data: exit %d\n%s", code, out)
	}

	w.must("destroy", "-auto-approve", "-input=false", "-var=n=2")
	if files, _ := filepath.Glob(filepath.Join(w.machines, "sim-*.json")); len(files) != 0 {
		t.Fatalf("machine files after destroy: %v", files)
	}
	if disks, _ := filepath.Glob(filepath.Join(w.machines, sim.DisksDir, "*")); len(disks) != 0 {
		t.Fatalf("machine disks after destroy: %v", disks)
	}
}

func TestSimProviderDriftBehindTofusBack(t *testing.T) {
	mirror := t.TempDir()
	installSimProvider(t, mirror, "")
	w := newSimWorkspace(t, mirror, simMachinesTF)
	w.must("init", "-input=false")
	w.apply(3)
	before := w.records()

	// A machine file deleted behind tofu's back: refresh drops it, plan
	// creates it again, with the lowest free address.
	if err := os.Remove(filepath.Join(w.machines, before[1].ID+".json")); err != nil {
		t.Fatal(err)
	}
	out, code := w.run("plan", "-input=false", "-detailed-exitcode", "-var=n=3")
	if code != 2 {
		t.Fatalf("plan after deleting a machine file: exit %d, want 2 (changes)\n%s", code, out)
	}
	if !strings.Contains(out, "rezussim_machine.w[1] will be created") || !strings.Contains(out, "1 to add, 0 to change, 0 to destroy") {
		t.Fatalf("plan does not recreate the deleted machine:\n%s", out)
	}
	w.apply(3)
	after := w.records()
	if after[0] != before[0] || after[2] != before[2] {
		t.Fatalf("untouched machines changed: %+v -> %+v", before, after)
	}
	if after[1].ID == before[1].ID || after[1].Address != before[1].Address {
		t.Fatalf("recreated machine: %+v; want a new id and the freed address %s", after[1], before[1].Address)
	}

	// A machine file that records other user data than configured: the
	// machine is replaced.
	p := filepath.Join(w.machines, after[2].ID+".json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte(after[2].UserDataSHA256), []byte(sim.HashUserData([]byte("other"))), 1)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, code = w.run("plan", "-input=false", "-detailed-exitcode", "-var=n=3")
	if code != 2 || !strings.Contains(out, "rezussim_machine.w[2] must be replaced") ||
		!strings.Contains(out, "1 to add, 0 to change, 1 to destroy") {
		t.Fatalf("plan after changing a machine's recorded user data hash: exit %d\n%s", code, out)
	}

	// Import adopts a machine file; its address and id come from the file.
	// An id that is not of the store's form never reaches the file system.
	w.must("state", "rm", "rezussim_machine.w[0]")
	out, code = w.run("import", "-input=false", "-var=n=3", "rezussim_machine.w[0]", "sim-../../etc/passwd")
	if code == 0 || !strings.Contains(out, `machine id "sim-../../etc/passwd" is not of the form`) {
		t.Fatalf("import of a bad id: exit %d\n%s", code, out)
	}
	w.must("import", "-input=false", "-var=n=3", "rezussim_machine.w[0]", after[0].ID)
	w.must("apply", "-refresh-only", "-auto-approve", "-input=false", "-var=n=3")
	now := w.records()
	if now[0] != after[0] {
		t.Fatalf("imported machine %+v, want %+v", now[0], after[0])
	}
	if now[2].UserDataSHA256 != sim.HashUserData([]byte("other")) {
		t.Fatalf("refresh did not take the changed hash from the machine file: %+v", now[2])
	}
}

func TestSimProviderBadInput(t *testing.T) {
	mirror := t.TempDir()
	installSimProvider(t, mirror, "")

	// Neither dir nor REZUSSIM_DIR.
	noDir := strings.Replace(simMachinesTF, `dir = "MACHINES"`, "", 1)
	w := newSimWorkspace(t, mirror, noDir)
	w.must("init", "-input=false")
	out, code := w.run("plan", "-input=false", "-var=n=1")
	if code == 0 || !strings.Contains(out, "No machine directory") || !strings.Contains(out, "REZUSSIM_DIR") {
		t.Fatalf("plan without a machine directory: exit %d\n%s", code, out)
	}
	// REZUSSIM_DIR alone is enough.
	envDir := filepath.Join(t.TempDir(), "from-env")
	w.env = append(w.env, "REZUSSIM_DIR="+envDir)
	w.apply(1)
	if files, _ := filepath.Glob(filepath.Join(envDir, "sim-*.json")); len(files) != 1 {
		t.Fatalf("machine files in REZUSSIM_DIR: %v", files)
	}

	// Values that are not DNS labels or roles are refused before anything is made.
	bad := strings.NewReplacer(`tenant     = "acme"`, `tenant     = "Acme Corp"`, `role       = "worker"`, `role       = "master"`).Replace(simMachinesTF)
	w = newSimWorkspace(t, mirror, bad)
	w.must("init", "-input=false")
	out, code = w.run("plan", "-input=false", "-var=n=1")
	if code == 0 || !strings.Contains(out, `tenant "Acme Corp" is not a DNS label`) || !strings.Contains(out, `role "master" is neither`) {
		t.Fatalf("plan with bad tenant and role: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(w.machines); err == nil {
		if files, _ := filepath.Glob(filepath.Join(w.machines, "*.json")); len(files) != 0 {
			t.Fatalf("bad input created machines: %v", files)
		}
	}
}

func TestSimProviderRebuildKeepsLockFilesValid(t *testing.T) {
	mirror := t.TempDir()
	v1 := installSimProvider(t, mirror, "")
	pkg := filepath.Join(mirror, "rezuscloud.io", "rezuscloud", "rezussim")
	bin := func(v string) string {
		return filepath.Join(pkg, v, "linux_amd64", "terraform-provider-rezussim_v"+v)
	}
	first, err := os.ReadFile(bin(v1))
	if err != nil {
		t.Fatal(err)
	}

	w := newSimWorkspace(t, mirror, simMachinesTF)
	w.must("init", "-input=false")
	w.apply(1)
	lock := filepath.Join(w.dir, ".terraform.lock.hcl")
	lockBefore, err := os.ReadFile(lock)
	if err != nil || !strings.Contains(string(lockBefore), `version = "`+v1+`"`) {
		t.Fatalf("lock file does not pin %s (%v):\n%s", v1, err, lockBefore)
	}

	// Same code, same bytes, same version; in another mirror too.
	if again := installSimProvider(t, mirror, ""); again != v1 {
		t.Fatalf("identical rebuild got version %s, want %s", again, v1)
	}
	other := t.TempDir()
	if elsewhere := installSimProvider(t, other, ""); elsewhere != v1 {
		t.Fatalf("identical build into another mirror got version %s, want %s", elsewhere, v1)
	}
	second, _ := os.ReadFile(bin(v1))
	if !bytes.Equal(first, second) {
		t.Fatal("identical rebuild changed the installed binary")
	}

	// A changed build gets a new version beside the old one.
	v2 := installSimProvider(t, mirror, "-X main.build=changed")
	if v2 == v1 {
		t.Fatalf("changed build kept version %s", v1)
	}
	if _, err := os.Stat(bin(v1)); err != nil {
		t.Fatalf("old version removed: %v", err)
	}
	if _, err := os.Stat(bin(v2)); err != nil {
		t.Fatalf("new version not installed: %v", err)
	}
	if latest, _ := os.ReadFile(filepath.Join(pkg, "LATEST")); strings.TrimSpace(string(latest)) != v2 {
		t.Fatalf("LATEST = %q, want %s", latest, v2)
	}

	// The workspace that pinned v1 still inits and plans, unchanged.
	w.must("init", "-input=false")
	if out, code := w.run("plan", "-input=false", "-detailed-exitcode", "-var=n=1"); code != 0 {
		t.Fatalf("plan with the old lock file: exit %d\n%s", code, out)
	}
	if lockAfter, _ := os.ReadFile(lock); !bytes.Equal(lockBefore, lockAfter) {
		t.Fatalf("lock file changed:\n%s\n->\n%s", lockBefore, lockAfter)
	}

	// A workspace that asks for the new version gets it and works.
	pinned := strings.Replace(simMachinesTF, `source = "rezuscloud.io/rezuscloud/rezussim"`,
		`source = "rezuscloud.io/rezuscloud/rezussim", version = "`+v2+`"`, 1)
	w2 := newSimWorkspace(t, mirror, pinned)
	out := w2.must("init", "-input=false")
	if !strings.Contains(out, "Installed rezuscloud.io/rezuscloud/rezussim v"+v2) {
		t.Fatalf("init of a workspace pinning %s:\n%s", v2, out)
	}
	w2.apply(1)
	if n := len(w2.records()); n != 1 {
		t.Fatalf("%d machines with the new build", n)
	}
}
