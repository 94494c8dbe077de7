package talos

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
)

// load parses rendered bytes the way a Talos node does and runs the Talos
// validator on them, independently of how MachineConfig validated.
func load(t testing.TB, b []byte, mode Mode) coreconfig.Provider {
	t.Helper()
	cfg, err := configloader.NewFromBytes(b)
	if err != nil {
		t.Fatalf("configloader: %v", err)
	}
	warnings, err := cfg.Validate(mode)
	if err != nil {
		t.Fatalf("Validate(%s): %v", mode, err)
	}
	if len(warnings) > 0 {
		t.Errorf("Validate(%s) warnings: %v", mode, warnings)
	}
	return cfg
}

func render(t testing.TB, in ConfigInput) []byte {
	t.Helper()
	b, err := MachineConfig(in)
	if err != nil {
		t.Fatalf("MachineConfig: %v", err)
	}
	return b
}

func TestMachineConfigRoles(t *testing.T) {
	k8sCA, osCA, err := CACertificates(testSecrets(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{RoleControlPlane, RoleWorker} {
		t.Run(role, func(t *testing.T) {
			in := baseInput(t, role)
			in.KubernetesVersion = "v1.34.1"
			cfg := load(t, render(t, in), ModeCloud)

			if got := cfg.Machine().Type().String(); got != role {
				t.Errorf("machine.type = %s", got)
			}
			if got := cfg.K8sClusterConfig().ClusterName(); got != "alpha" {
				t.Errorf("cluster name = %q", got)
			}
			if got := cfg.K8sClusterConfig().ClusterEndpoint().String(); got != "https://10.0.0.10:6443" {
				t.Errorf("endpoint = %q", got)
			}
			if got := cfg.K8sKubeletConfig().Image(); got != "ghcr.io/siderolabs/kubelet:v1.34.1" {
				t.Errorf("kubelet image = %q", got)
			}
			if got := prefixes(cfg.K8sNetworkConfig().PodCIDRs()); !slices.Equal(got, []string{"10.200.0.0/16"}) {
				t.Errorf("pod CIDRs = %v", got)
			}
			if got := prefixes(cfg.K8sNetworkConfig().ServiceCIDRs()); !slices.Equal(got, []string{"10.100.0.0/16"}) {
				t.Errorf("service CIDRs = %v", got)
			}
			if got := cfg.RawV1Alpha1().ClusterConfig.CNI().Name(); got != "flannel" {
				t.Errorf("CNI = %q, want the default, flannel", got)
			}
			// The secrets come from the bundle, not from the generator.
			if got := cfg.RawV1Alpha1().ClusterConfig.ClusterCA.Crt; !bytes.Equal(got, k8sCA) {
				t.Error("cluster.ca is not the bundle's Kubernetes CA")
			}
			if got := cfg.Machine().Security().IssuingCA().Crt; !bytes.Equal(got, osCA) {
				t.Error("machine.ca is not the bundle's OS CA")
			}
			hasKey := len(cfg.RawV1Alpha1().ClusterConfig.ClusterCA.Key) > 0
			if hasKey != (role == RoleControlPlane) {
				t.Errorf("cluster CA key present = %v on a %s", hasKey, role)
			}
			// The 1.12 contract: a HostnameConfig document, stable hostnames.
			hn := cfg.NetworkHostnameConfig()
			if hn == nil || hn.AutoHostname() != nethelpers.AutoHostnameKindStable || hn.Hostname() != "" {
				t.Errorf("HostnameConfig = %+v, want auto: stable", hn)
			}
		})
	}
}

func TestMachineConfigDefaultsAndContract(t *testing.T) {
	in := baseInput(t, RoleWorker)
	in.PodNetwork, in.ServiceNetwork = nil, nil
	in.TalosVersion = "1.11.5"
	cfg := load(t, render(t, in), ModeCloud)
	if got := prefixes(cfg.K8sNetworkConfig().PodCIDRs()); !slices.Equal(got, []string{"10.244.0.0/16"}) {
		t.Errorf("default pod CIDRs = %v", got)
	}
	if got := prefixes(cfg.K8sNetworkConfig().ServiceCIDRs()); !slices.Equal(got, []string{"10.96.0.0/12"}) {
		t.Errorf("default service CIDRs = %v", got)
	}
	// The 1.11 contract has no HostnameConfig document.
	for _, doc := range cfg.Documents() {
		if doc.Kind() == "HostnameConfig" {
			t.Error("a Talos 1.11 config carries a HostnameConfig document")
		}
	}
}

func TestMachineConfigCNI(t *testing.T) {
	for _, tc := range []struct {
		cni       string
		role      string
		wantCNI   string
		wantProxy bool
	}{
		{"", RoleControlPlane, "flannel", true},
		{CNIFlannel, RoleControlPlane, "flannel", true},
		{CNICilium, RoleControlPlane, "none", false},
		{CNICilium, RoleWorker, "none", true},
		{CNINone, RoleControlPlane, "none", true},
	} {
		in := baseInput(t, tc.role)
		in.CNI = tc.cni
		cfg := load(t, render(t, in), ModeCloud)
		if got := cfg.RawV1Alpha1().ClusterConfig.CNI().Name(); got != tc.wantCNI {
			t.Errorf("CNI %q on %s: cni.name = %q, want %q", tc.cni, tc.role, got, tc.wantCNI)
		}
		if got := cfg.K8sProxyConfig().Enabled(); got != tc.wantProxy {
			t.Errorf("CNI %q on %s: kube-proxy enabled = %v, want %v", tc.cni, tc.role, got, tc.wantProxy)
		}
	}

	// A patch can bring kube-proxy back for Cilium without its replacement.
	in := baseInput(t, RoleControlPlane)
	in.CNI = CNICilium
	in.Patches = []Patch{{Name: "kube-proxy", Patch: "cluster:\n  proxy:\n    disabled: false\n"}}
	if cfg := load(t, render(t, in), ModeCloud); !cfg.K8sProxyConfig().Enabled() {
		t.Error("patch did not re-enable kube-proxy")
	}
}

func TestMachineConfigDeterministic(t *testing.T) {
	for _, role := range []string{RoleControlPlane, RoleWorker} {
		in := baseInput(t, role)
		in.CNI = CNICilium
		in.Patches = []Patch{
			{Name: "labels", Patch: "machine:\n  nodeLabels:\n    zone: z1\n    tier: web\n    app: a\n"},
			{Name: "sysctls", Patch: "machine:\n  sysctls:\n    net.core.somaxconn: \"65535\"\n    vm.max_map_count: \"262144\"\n"},
			{Name: "json", Patch: "- op: add\n  path: /machine/kubelet/extraArgs\n  value:\n    max-pods: \"250\"\n    v: \"2\"\n"},
		}
		first := render(t, in)
		for i := range 5 {
			if again := render(t, in); !bytes.Equal(first, again) {
				t.Fatalf("%s: call %d gave different bytes", role, i+2)
			}
		}
		// A zero Now falls back to the bundle's creation time, which is
		// fixed as well.
		in.Now = time.Time{}
		zero := render(t, in)
		if again := render(t, in); !bytes.Equal(zero, again) {
			t.Fatalf("%s: with a zero Now, two calls gave different bytes", role)
		}
	}
}

func TestMachineConfigSecretsOnlyFromBundle(t *testing.T) {
	other, err := GenerateSecrets("1.12.6", testNow, "")
	if err != nil {
		t.Fatal(err)
	}
	a := baseInput(t, RoleWorker)
	b := a
	b.Secrets = other
	ra, rb := render(t, a), render(t, b)
	if bytes.Equal(ra, rb) {
		t.Fatal("two bundles gave the same config")
	}
	ca, cb := load(t, ra, ModeCloud), load(t, rb, ModeCloud)
	if ca.DiscoveryIdentityConfig().ClusterID() == cb.DiscoveryIdentityConfig().ClusterID() || ca.Machine().Security().Token() == cb.Machine().Security().Token() {
		t.Error("cluster id or machine token does not come from the bundle")
	}
}

func TestMachineConfigAppliesPatchesInOrder(t *testing.T) {
	tenant := Patch{Name: "tenant-defaults", Source: "tenants/alpha.yaml:14", Patch: "machine:\n  nodeLabels:\n    tier: default\n    owner: platform\n"}
	workers := Patch{Name: "workers", Source: "patches/workers.yaml:1", Patch: "machine:\n  nodeLabels:\n    tier: worker\n  sysctls:\n    vm.max_map_count: \"262144\"\n"}
	group := Patch{Name: "gpu", Source: "nodegroups/gpu.yaml:20", Patch: "- op: replace\n  path: /machine/nodeLabels/tier\n  value: gpu\n"}

	labels := func(in ConfigInput) map[string]string {
		t.Helper()
		return map[string]string(load(t, render(t, in), ModeCloud).K8sNodeConfig().Labels())
	}

	// The caller passes the worker-targeted patch only to worker configs;
	// MachineConfig applies exactly what it is given.
	cp := baseInput(t, RoleControlPlane)
	cp.Patches = []Patch{tenant}
	if got := labels(cp); got["tier"] != "default" || got["owner"] != "platform" {
		t.Errorf("control plane labels = %v", got)
	}
	cpCfg := load(t, render(t, cp), ModeCloud)
	if _, ok := cpCfg.Machine().Sysctls()["vm.max_map_count"]; ok {
		t.Error("control plane config carries the workers' sysctl")
	}

	w := baseInput(t, RoleWorker)
	w.Patches = []Patch{tenant, workers}
	got := labels(w)
	if got["tier"] != "worker" || got["owner"] != "platform" {
		t.Errorf("worker labels = %v: the later patch must override the earlier one and keep the rest", got)
	}
	if v := load(t, render(t, w), ModeCloud).Machine().Sysctls()["vm.max_map_count"]; v != "262144" {
		t.Errorf("worker sysctl = %q", v)
	}

	// The node group's JSON 6902 patch comes last and wins.
	w.Patches = []Patch{tenant, workers, group}
	if got := labels(w); got["tier"] != "gpu" {
		t.Errorf("tier = %q after the node group's patch", got["tier"])
	}
	// A JSON 6902 patch leaves the other documents alone.
	if hn := load(t, render(t, w), ModeCloud).NetworkHostnameConfig(); hn == nil || hn.AutoHostname() != nethelpers.AutoHostnameKindStable {
		t.Errorf("HostnameConfig after a JSON 6902 patch = %+v", hn)
	}
	// Order matters: the same patches reversed give the other value.
	w.Patches = []Patch{workers, tenant}
	if got := labels(w); got["tier"] != "default" {
		t.Errorf("tier = %q with the tenant patch last", got["tier"])
	}
}

func TestMachineConfigPatchErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		role  string
		patch string
		want  string
	}{
		{"invalid yaml", RoleWorker, "machine: [\n", "load: "},
		{"not a config", RoleWorker, "just a string\n", "load: "},
		{"unknown field", RoleWorker, "machine:\n  nosuchfield: 1\n", "load: "},
		{"unknown kind", RoleWorker, "apiVersion: v1alpha1\nkind: NoSuchConfig\nfoo: bar\n", "load: "},
		{"empty", RoleWorker, "  \n", "load: patch is empty"},
		{"machine type nonsense", RoleWorker, "machine:\n  type: nonsense\n", `changes machine.type from worker to "nonsense"`},
		{"machine type other role", RoleControlPlane, "machine:\n  type: worker\n", `changes machine.type from controlplane to "worker"`},
		{"invalid pod CIDR", RoleWorker, "cluster:\n  network:\n    podSubnets: [10.300.0.0/16]\n", `cluster.network.podSubnets[0]: "10.300.0.0/16" is not a CIDR`},
		{"invalid service CIDR", RoleControlPlane, "cluster:\n  network:\n    serviceSubnets: [not-a-cidr]\n", `cluster.network.serviceSubnets[0]: "not-a-cidr" is not a CIDR`},
		{"invalid DNS domain", RoleControlPlane, "cluster:\n  network:\n    dnsDomain: \"bad domain!\"\n", `"bad domain!" is not a valid DNS name`},
		{"endpoint not https", RoleWorker, "cluster:\n  controlPlane:\n    endpoint: \"ftp://x\"\n", `cluster.controlPlane.endpoint: "ftp://x" is not an https URL`},
		{"endpoint bad port", RoleWorker, "cluster:\n  controlPlane:\n    endpoint: \"https://x:99999\"\n", "invalid controlplane endpoint"},
		{"hostname off without name", RoleWorker, "apiVersion: v1alpha1\nkind: HostnameConfig\nauto: \"off\"\n", "HostnameConfig: either 'auto' or 'hostname' must be set"},
		{"json patch on missing path", RoleWorker, "- op: replace\n  path: /machine/nosuch/x\n  value: 1\n", "apply: "},
		{"json patch bad op", RoleWorker, "[{\"op\": \"frobnicate\", \"path\": \"/machine\"}]", "apply: "},
		{"json patch removes machine", RoleWorker, "- op: remove\n  path: /machine\n", "machine"},
		{"delete missing document", RoleWorker, "apiVersion: v1alpha1\nkind: EthernetConfig\nname: eth0\n$patch: delete\n", "apply: deletes {apiVersion:v1alpha1, kind:EthernetConfig, idx:0, name:eth0}, which the config does not have"},
		{"delete cluster section", RoleWorker, "cluster:\n  $patch: delete\n", "may not remove cluster.id, cluster.secret, cluster.token, cluster.ca:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput(t, tc.role)
			good := Patch{Name: "fine", Source: "tenants/alpha.yaml:9", Patch: "machine:\n  nodeLabels:\n    a: b\n"}
			bad := Patch{Name: "broken-" + strings.ReplaceAll(tc.name, " ", "-"), Source: "patches/broken.yaml:7", Patch: tc.patch}
			in.Patches = []Patch{good, bad, good}
			out, err := MachineConfig(in)
			if err == nil {
				t.Fatalf("no error; got a config of %d bytes", len(out))
			}
			var pe *PatchError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T %q is not a *PatchError", err, err)
			}
			if pe.Patch != bad {
				t.Errorf("PatchError names %+v, want the broken patch", pe.Patch)
			}
			msg := err.Error()
			prefix := `config patch "` + bad.Name + `" (patches/broken.yaml:7): `
			if !strings.HasPrefix(msg, prefix) {
				t.Errorf("error %q does not start with %q", msg, prefix)
			}
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q does not contain %q", msg, tc.want)
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error spans lines: %q", msg)
			}
		})
	}
}

func TestMachineConfigBlamesLastBreakingPatch(t *testing.T) {
	badDNS := Patch{Name: "bad-dns", Source: "a.yaml:1", Patch: "cluster:\n  network:\n    dnsDomain: \"bad domain!\"\n"}
	fixDNS := Patch{Name: "fix-dns", Source: "b.yaml:2", Patch: "cluster:\n  network:\n    dnsDomain: cluster.example\n"}
	labels := Patch{Name: "labels", Source: "c.yaml:3", Patch: "machine:\n  nodeLabels:\n    a: b\n"}
	hostOff := Patch{Name: "host-off", Source: "d.yaml:4", Patch: "apiVersion: v1alpha1\nkind: HostnameConfig\nauto: \"off\"\n"}
	hostName := Patch{Name: "host-name", Source: "e.yaml:5", Patch: "apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: web-1\n"}

	// A later patch may repair what an earlier one left invalid.
	in := baseInput(t, RoleControlPlane)
	in.Patches = []Patch{badDNS, labels, fixDNS, hostOff, hostName}
	cfg := load(t, render(t, in), ModeCloud)
	if got := cfg.K8sNetworkConfig().DNSDomain(); got != "cluster.example" {
		t.Errorf("dnsDomain = %q", got)
	}
	if got := cfg.NetworkHostnameConfig().Hostname(); got != "web-1" {
		t.Errorf("hostname = %q", got)
	}

	// Otherwise the patch after the last valid config is to blame, even
	// when valid patches follow it.
	in.Patches = []Patch{labels, fixDNS, badDNS, labels}
	_, err := MachineConfig(in)
	var pe *PatchError
	if !errors.As(err, &pe) || pe.Patch.Name != "bad-dns" {
		t.Fatalf("err = %v, want a PatchError naming bad-dns", err)
	}
}

func TestHostnamePatch(t *testing.T) {
	in := baseInput(t, RoleWorker)
	in.Patches = []Patch{HostnamePatch("gpu-worker-1")}
	cfg := load(t, render(t, in), ModeCloud)
	hn := cfg.NetworkHostnameConfig()
	if hn.Hostname() != "gpu-worker-1" || hn.AutoHostname() != nethelpers.AutoHostnameKindOff {
		t.Errorf("hostname = %q, auto = %v", hn.Hostname(), hn.AutoHostname())
	}

	in.Patches = []Patch{HostnamePatch("bad_name.")}
	in.Patches[0].Patch = strings.Replace(in.Patches[0].Patch, "bad_name.", "", 1)
	if _, err := MachineConfig(in); err == nil {
		t.Error("an empty static hostname passed")
	}
}

func TestMachineConfigMetal(t *testing.T) {
	in := baseInput(t, RoleWorker)
	in.Mode = ModeMetal
	_, err := MachineConfig(in)
	if err == nil || !strings.Contains(err.Error(), "either install disk or diskSelector should be defined") {
		t.Fatalf("metal without an install disk: err = %v", err)
	}
	var pe *PatchError
	if errors.As(err, &pe) {
		t.Errorf("no patch is to blame, got %v", err)
	}

	in.InstallDisk = "/dev/sda"
	cfg := load(t, render(t, in), ModeMetal)
	if got := cfg.Machine().Install().Disk(); got != "/dev/sda" {
		t.Errorf("install disk = %q", got)
	}

	in.InstallDisk = ""
	in.Patches = []Patch{{Name: "disk", Patch: "machine:\n  install:\n    diskSelector:\n      size: '>= 100GB'\n"}}
	load(t, render(t, in), ModeMetal)
}

func TestMachineConfigInputErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*ConfigInput)
		want string
	}{
		{"role", func(in *ConfigInput) { in.Role = "master" }, `role: want "controlplane" or "worker", not "master"`},
		{"no cluster name", func(in *ConfigInput) { in.ClusterName = "" }, "cluster name: empty"},
		{"no endpoint", func(in *ConfigInput) { in.ControlPlaneEndpoint = "" }, "control plane endpoint: empty"},
		{"bad endpoint", func(in *ConfigInput) { in.ControlPlaneEndpoint = "10.0.0.1" }, "invalid controlplane endpoint"},
		{"kubernetes version", func(in *ConfigInput) { in.KubernetesVersion = "1.34" }, `kubernetes version "1.34": not of the form 1.34.1`},
		{"kubernetes too old", func(in *ConfigInput) { in.KubernetesVersion = "1.28.0" }, "too old to be used with Talos"},
		{"kubernetes too new", func(in *ConfigInput) { in.KubernetesVersion = "1.40.0" }, "too new to be used with Talos"},
		{"talos version", func(in *ConfigInput) { in.TalosVersion = "latest" }, `talos version "latest": not of the form 1.12.6`},
		{"talos too new", func(in *ConfigInput) { in.TalosVersion = "1.15.0" }, `talos version "1.15.0": newer than v1.14`},
		{"cni", func(in *ConfigInput) { in.CNI = "calico" }, `cni "calico": want "flannel", "cilium" or "none"`},
		{"no secrets", func(in *ConfigInput) { in.Secrets = nil }, "secrets bundle: empty"},
		{"bad secrets", func(in *ConfigInput) { in.Secrets = []byte("cluster: {}\n") }, "secrets bundle: "},
		{"bad pod network", func(in *ConfigInput) { in.PodNetwork = []string{"10.0.0.0/33"} }, `machine config for worker: invalid: cluster.network.podSubnets[0]: "10.0.0.0/33" is not a CIDR`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput(t, RoleWorker)
			tc.edit(&in)
			_, err := MachineConfig(in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
			var pe *PatchError
			if errors.As(err, &pe) {
				t.Errorf("input error reported as a patch error: %v", err)
			}
		})
	}
}

// TestMachineConfigConcurrent renders many configs at once, as a renderer
// of many tenants does, and expects what one goroutine renders alone.
func TestMachineConfigConcurrent(t *testing.T) {
	inputs := []ConfigInput{baseInput(t, RoleControlPlane), baseInput(t, RoleWorker)}
	inputs[1].Patches = []Patch{{Name: "labels", Patch: "machine:\n  nodeLabels:\n    a: b\n"}, {Name: "json", Patch: "- op: add\n  path: /machine/sysctls\n  value: {a: \"1\"}\n"}}
	want := [][]byte{render(t, inputs[0]), render(t, inputs[1])}
	const n = 8
	got := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { got[i], errs[i] = MachineConfig(inputs[i%2]) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("goroutine %d: %v", i, errs[i])
		}
		if !bytes.Equal(got[i], want[i%2]) {
			t.Errorf("goroutine %d rendered different bytes", i)
		}
	}
}

func BenchmarkMachineConfig(b *testing.B) {
	strategic := Patch{Name: "labels", Patch: "machine:\n  nodeLabels:\n    tier: web\n"}
	json6902 := Patch{Name: "sysctls", Patch: "- op: add\n  path: /machine/sysctls\n  value:\n    vm.max_map_count: \"262144\"\n"}
	for _, bc := range []struct {
		name    string
		role    string
		patches []Patch
	}{
		{"controlplane/no-patches", RoleControlPlane, nil},
		{"controlplane/strategic", RoleControlPlane, []Patch{strategic}},
		{"controlplane/json6902", RoleControlPlane, []Patch{json6902}},
		{"worker/no-patches", RoleWorker, nil},
		{"worker/strategic", RoleWorker, []Patch{strategic}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			in := baseInput(b, bc.role)
			in.Patches = bc.patches
			b.ReportAllocs()
			for b.Loop() {
				if _, err := MachineConfig(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A strategic merge used to deep-copy the whole config before merging,
// once per patch: most of the cost of building a config. The config being
// built is held by its builder alone, so the patch merges into it.
func TestStrategicMergeIntoOwnConfig(t *testing.T) {
	in := baseInput(t, RoleWorker)
	cfg, err := generateBase(in)
	if err != nil {
		t.Fatal(err)
	}
	v1 := cfg.RawV1Alpha1()
	patched, err := applyPatch(cfg, Patch{Name: "s", Patch: "machine:\n  sysctls:\n    net.core.somaxconn: \"1024\"\n"}, cfg.Machine().Type())
	if err != nil {
		t.Fatal(err)
	}
	if patched.RawV1Alpha1() != v1 {
		t.Error("the patched config is a copy of the config, not the config itself")
	}
	if got := v1.MachineConfig.MachineSysctls["net.core.somaxconn"]; got != "1024" {
		t.Errorf("the config's sysctl is %q after the merge", got)
	}
}

// The Talos 1.14 contract renders its own layout: the Kubernetes settings
// in documents of their own, Cilium without the flannel document and with
// kube-proxy off (a patch brings it back), and the fields the bundle owns
// refused in those documents too.
func TestMachineConfigContract114(t *testing.T) {
	in := baseInput(t, RoleControlPlane)
	in.TalosVersion, in.CNI = "1.14.1", CNICilium
	cfg := load(t, render(t, in), ModeCloud)
	if cfg.RawV1Alpha1().ClusterConfig.ClusterCA != nil || cfg.K8sAPIServerCAConfig() == nil || !bytes.Equal(cfg.K8sAPIServerCAConfig().IssuingCA().Crt, cfg.K8sAPIServerCAConfig().AcceptedCAs()[0].Crt) {
		t.Error("the Kubernetes CA is not in a KubeAPIServerCAConfig document of its own")
	}
	if got := cfg.K8sKubeletConfig().Image(); got != "ghcr.io/siderolabs/kubelet:v1.34.1" {
		t.Errorf("kubelet image = %q", got)
	}
	for _, doc := range cfg.Documents() {
		if doc.Kind() == "KubeFlannelCNIConfig" {
			t.Error("a Cilium control plane carries the flannel document")
		}
	}
	if cfg.K8sProxyConfig().Enabled() {
		t.Error("kube-proxy enabled with Cilium")
	}
	in.Patches = []Patch{{Name: "kube-proxy", Patch: "apiVersion: v1alpha1\nkind: KubeProxyConfig\nenabled: true\n"}}
	if cfg := load(t, render(t, in), ModeCloud); !cfg.K8sProxyConfig().Enabled() {
		t.Error("patch did not re-enable kube-proxy")
	}
	in.Patches = []Patch{{Name: "own-ca", Source: "a.yaml:3", Patch: "apiVersion: v1alpha1\nkind: KubeAPIServerCAConfig\nissuingCA:\n  cert: x\n  key: y\n"}}
	if _, err := MachineConfig(in); err == nil || !strings.Contains(err.Error(), "may not set cluster.ca") {
		t.Errorf("a patch of the Kubernetes CA document: %v", err)
	}
}
