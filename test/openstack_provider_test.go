package test

import (
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/sim/openstack"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/internal/tfcli"
)

// osRig is a simulated OpenStack on loopback, a clouds.yaml that points at
// it, and a tofu CLI configuration that takes the real OpenStack provider
// from the mirror.
type osRig struct {
	t      *testing.T
	cloud  *openstack.Cloud
	dir    string // the cloud's directory
	clouds string // clouds.yaml
	cli    string // tofu CLI configuration
	tofu   string

	mu     sync.Mutex
	events []string
}

// osPassword is the password of the simulated cloud's user in tests: no
// rendered file, log, API answer or argv may hold it.
const osPassword = "s3cret-openstack-password-7f2c"

func newOSRig(t *testing.T, block string) *osRig {
	t.Helper()
	root := t.TempDir()
	r := &osRig{t: t, dir: filepath.Join(root, "cloud"), tofu: testenv.Tofu(t)}
	cloud, err := openstack.Open(openstack.Options{
		Dir:         r.dir,
		Addresses:   netip.MustParsePrefix(block),
		Credentials: openstack.Credentials{Username: "rezus", Password: osPassword, ProjectName: "tenants"},
		Hook: openstack.HookFunc(func(ev openstack.Event, id string, addr netip.Addr, userData []byte) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.events = append(r.events, ev.String()+" "+addr.String()+" "+string(userData))
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cloud.Serve("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cloud.Close() })
	r.cloud = cloud
	r.clouds = filepath.Join(root, "clouds.yaml")
	if err := os.WriteFile(r.clouds, cloud.CloudsYAML("sim"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.cli = filepath.Join(root, "tofu.rc")
	if err := tfcli.WriteCLIConfig(r.cli, tfcli.CLIConfig{MirrorDir: testenv.ProviderMirror(t)}); err != nil {
		t.Fatal(err)
	}
	return r
}

// hookEvents returns the cloud's hook events so far. The hook runs in the
// cloud's HTTP handlers, on requests from tofu, another process, so
// nothing but r.mu orders its writes before the test's reads.
func (r *osRig) hookEvents() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// tofuIn runs tofu with args in dir and returns its output; it fails the
// test when tofu fails, unless mayFail.
func (r *osRig) tofuIn(dir string, mayFail bool, args ...string) (string, error) {
	r.t.Helper()
	cmd := exec.Command(r.tofu, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TF_CLI_CONFIG_FILE=" + r.cli,
		"OS_CLIENT_CONFIG_FILE=" + r.clouds, "CHECKPOINT_DISABLE=1"}
	out, err := cmd.CombinedOutput()
	if err != nil && !mayFail {
		r.t.Fatalf("tofu %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), err
}

func (r *osRig) journal() []string {
	var out []string
	for _, q := range r.cloud.Journal() {
		out = append(out, q.Method+" "+q.Path)
	}
	return out
}

// TestOpenStackProviderApplyDestroy drives the real OpenStack provider
// through real tofu against the simulated cloud: an instance on a port it
// also creates, then destroy. The provider authenticates with clouds.yaml
// through its cloud argument and OS_CLIENT_CONFIG_FILE.
func TestOpenStackProviderApplyDestroy(t *testing.T) {
	r := newOSRig(t, "127.2.0.0/24")
	work := t.TempDir()
	main := map[string]any{
		"terraform": map[string]any{"required_providers": map[string]any{"openstack": map[string]any{
			"source": "terraform-provider-openstack/openstack", "version": "= 3.4.0"}}},
		"provider": map[string]any{"openstack": map[string]any{"cloud": "sim"}},
		"data":     map[string]any{"openstack_networking_network_v2": map[string]any{"net": map[string]any{"name": "tenant-net"}}},
		"resource": map[string]any{
			"openstack_networking_port_v2": map[string]any{"p": map[string]any{
				"name": "node-0", "network_id": "${data.openstack_networking_network_v2.net.id}", "admin_state_up": true,
			}},
			"openstack_compute_instance_v2": map[string]any{"m": map[string]any{
				"name": "node-0", "flavor_name": "m1.small", "image_name": "talos-1.12.6",
				"user_data": "machine:\n  type: worker\n", "metadata": map[string]any{"rezuscloud_config_hash": "abc"},
				"network":   []any{map[string]any{"port": "${openstack_networking_port_v2.p.id}"}},
				"lifecycle": map[string]any{"ignore_changes": []string{"user_data"}},
			}},
		},
		"output": map[string]any{"ip": map[string]any{"value": "${openstack_compute_instance_v2.m.access_ip_v4}"}},
	}
	b, _ := json.MarshalIndent(main, "", "  ")
	if err := os.WriteFile(filepath.Join(work, "main.tf.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	r.tofuIn(work, false, "init", "-input=false", "-no-color")
	r.tofuIn(work, false, "apply", "-auto-approve", "-input=false", "-no-color")
	out, _ := r.tofuIn(work, false, "output", "-raw", "ip")
	ip, err := netip.ParseAddr(strings.TrimSpace(out))
	if err != nil || !netip.MustParsePrefix("127.2.0.0/24").Contains(ip) {
		t.Fatalf("access_ip_v4 = %q, want an address of 127.2.0.0/24", out)
	}
	if got := strings.Join(r.hookEvents(), "; "); got != "created "+ip.String()+" machine:\n  type: worker\n" {
		t.Errorf("hook events = %q, want the server's creation with its address and user data", got)
	}
	state, err := os.ReadFile(filepath.Join(r.dir, "state.json"))
	if err != nil || strings.Contains(string(state), "type: worker") || !strings.Contains(string(state), "userDataSha256") {
		t.Errorf("the cloud's state file holds user data or no hash of it (err %v)", err)
	}
	// A second plan, which refreshes through the API, changes nothing.
	plan, _ := r.tofuIn(work, false, "plan", "-detailed-exitcode", "-input=false", "-no-color")
	if !strings.Contains(plan, "No changes") {
		t.Errorf("a plan after apply wants changes:\n%s", plan)
	}
	r.tofuIn(work, false, "destroy", "-auto-approve", "-input=false", "-no-color")
	j := strings.Join(r.journal(), "\n")
	for _, want := range []string{"POST /v3/auth/tokens", "POST /network/v2.0/ports", "POST /compute/v2.1/servers",
		"DELETE /compute/v2.1/servers/", "DELETE /network/v2.0/ports/"} {
		if !strings.Contains(j, want) {
			t.Errorf("journal has no %q:\n%s", want, j)
		}
	}
	if events := r.hookEvents(); len(events) != 2 || !strings.HasPrefix(events[1], "deleted "+ip.String()) {
		t.Errorf("hook events after destroy = %q", events)
	}
	state, _ = os.ReadFile(filepath.Join(r.dir, "state.json"))
	var st struct {
		Servers map[string]any `json:"servers"`
		Ports   map[string]any `json:"ports"`
	}
	if err := json.Unmarshal(state, &st); err != nil || len(st.Servers) != 0 || len(st.Ports) != 0 {
		t.Errorf("after destroy the cloud holds %d servers and %d ports (err %v)", len(st.Servers), len(st.Ports), err)
	}
}
