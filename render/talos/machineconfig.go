package talos

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	jsonpatch "github.com/evanphx/json-patch"
	"github.com/siderolabs/go-pointer"
	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	configdoc "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/k8s"
	"github.com/siderolabs/talos/pkg/machinery/config/types/network"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
)

// Machine roles, as NodeGroup manifests name them.
const (
	RoleControlPlane = "controlplane"
	RoleWorker       = "worker"
)

// CNI choices for ConfigInput.CNI.
const (
	// CNIFlannel is the Talos default CNI; "" means the same.
	CNIFlannel = "flannel"
	// CNICilium disables the default CNI and kube-proxy (on control-plane
	// configs), which Cilium replaces; the caller installs Cilium itself.
	// A patch setting cluster.proxy.disabled to false (with the Talos 1.14
	// contract, a KubeProxyConfig document with enabled: true) brings
	// kube-proxy back.
	CNICilium = "cilium"
	// CNINone disables the default CNI and nothing else.
	CNINone = "none"
)

// Mode says how the machines boot, which decides what the Talos validator
// asks of a config.
type Mode int

const (
	// ModeCloud is for machines that boot an installed Talos image (cloud
	// and VM images): the config needs no install disk. It is the default.
	ModeCloud Mode = iota
	// ModeMetal is for machines that boot an ISO or PXE image and install
	// Talos to a disk: machine.install.disk or machine.install.diskSelector
	// must be set, through ConfigInput.InstallDisk or a patch.
	ModeMetal
)

// String returns "cloud" or "metal".
func (m Mode) String() string {
	if m == ModeMetal {
		return "metal"
	}
	return "cloud"
}

// RequiresInstall reports whether the config must say where to install
// Talos. Together with InContainer it lets a Mode serve as the Talos
// validator's runtime mode.
func (m Mode) RequiresInstall() bool { return m == ModeMetal }

// InContainer reports false: RezusCloud machines are never containers.
func (m Mode) InContainer() bool { return false }

var _ validation.RuntimeMode = ModeCloud

// Patch is one Talos machine config patch.
type Patch struct {
	// Name names the patch in errors, as the manifest names it.
	Name string
	// Patch is YAML (or JSON) text: a strategic merge patch, i.e. one or
	// more config documents (partial v1alpha1 "machine:"/"cluster:"
	// sections, or documents with apiVersion and kind), or a JSON 6902
	// patch, i.e. a list of operations, whose paths address the v1alpha1
	// document ("/machine/...", "/cluster/...").
	Patch string
	// Source is "file:line" of the patch in the manifests, for errors.
	Source string
	// Encrypted is set when the patch's text was SOPS-encrypted in git:
	// its errors tell none of its values.
	Encrypted bool
}

// ConfigInput is everything a machine config is made of.
type ConfigInput struct {
	ClusterName string // the tenant name
	// ControlPlaneEndpoint is the https URL, with port, of the Kubernetes
	// API, e.g. "https://10.0.0.10:6443".
	ControlPlaneEndpoint string
	KubernetesVersion    string // "1.34.1", with or without a leading v
	TalosVersion         string // the node group's talosVersion, else the tenant's
	// PodNetwork and ServiceNetwork are CIDRs; empty means the Talos
	// defaults (10.244.0.0/16 and 10.96.0.0/12).
	PodNetwork, ServiceNetwork []string
	// CNI is "" or CNIFlannel (the Talos default), CNICilium or CNINone.
	CNI  string
	Role string // RoleControlPlane or RoleWorker
	// Secrets is the bundle from GenerateSecrets.
	Secrets []byte
	// Patches are applied in the given order, each to the result of the
	// ones before. RezusCloud documents this order: the tenant's
	// spec.configPatches, ConfigPatch resources without a targetRole,
	// ConfigPatch resources whose targetRole is Role, the node group's
	// spec.configPatches. The caller chooses and orders them.
	Patches []Patch
	// Mode selects what validation asks for; ModeCloud by default.
	Mode Mode
	// InstallDisk sets machine.install.disk, e.g. "/dev/sda"; "" leaves it
	// unset. ModeMetal needs it or a diskSelector patch.
	InstallDisk string
	// Components holds Kubernetes components at other versions than
	// KubernetesVersion, while an upgrade of Kubernetes goes component
	// by component; an empty field follows KubernetesVersion. They set
	// the components' images before the patches, so a patch that pins
	// an image keeps it.
	Components ComponentVersions
	// Now is the clock the config is generated with. With this machinery
	// version nothing in a config depends on it; it is passed so that the
	// output stays a function of the input should that change. The zero
	// time means the creation time of the bundle's OS CA.
	Now time.Time
}

// kubernetesVersionRE is a Kubernetes release as image tags name it,
// without the leading v.
var kubernetesVersionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

// MachineConfig generates the Talos machine config of one role, applies the
// patches in order, validates the result with the Talos validator for
// in.Mode, and returns it as YAML (several documents, without comments).
// Validation runs on the returned bytes as a Talos node loads them. The same
// input always gives byte-identical output.
//
// A patch that cannot be loaded or applied, that changes machine.type or a
// field that the secrets bundle owns (machine.ca, cluster.token, ...), or
// after which the config fails validation (and no later patch makes it pass)
// gives a *PatchError naming that patch. Any other problem with the input
// gives a plain error naming the field.
func MachineConfig(in ConfigInput) ([]byte, error) {
	cfg, err := build(in)
	if err != nil {
		return nil, err
	}
	out, verr := encodeValid(cfg, in.Mode)
	if verr == nil {
		return out, nil
	}
	return nil, blame(in, verr)
}

// build generates the config of in and applies its patches in order. A
// patch after which a field that the secrets bundle owns differs from the
// generated config's is refused (checkBundleFields).
func build(in ConfigInput) (coreconfig.Provider, error) {
	cfg, err := generateBase(in)
	if err != nil {
		return nil, err
	}
	want := cfg.Machine().Type()
	owned := bundleValuesOf(cfg)
	for _, p := range in.Patches {
		cfg, err = applyPatch(cfg, p, want)
		if err == nil {
			err = checkBundleFields(owned, cfg)
		}
		if err != nil {
			return nil, &PatchError{Patch: p, Err: err}
		}
	}
	return cfg, nil
}

// blame finds the patch after which the config became invalid for good:
// the one after the last config that passed validation. It replays the
// patches on a fresh config, because merging can modify values that earlier
// configs share.
func blame(in ConfigInput, verr error) error {
	last := -1 // patches applied to the last valid config; -1 when none was
	cfg, err := generateBase(in)
	if err == nil && isValid(cfg, in.Mode) {
		last = 0
	}
	for i, p := range in.Patches {
		if err != nil {
			break
		}
		cfg, err = applyPatch(cfg, p, cfg.Machine().Type())
		if err == nil && isValid(cfg, in.Mode) {
			last = i + 1
		}
	}
	if last >= 0 && last < len(in.Patches) {
		return &PatchError{Patch: in.Patches[last], Err: fmt.Errorf("config is invalid after this patch: %s", flattenError(verr))}
	}
	return fmt.Errorf("machine config for %s: invalid: %s", in.Role, flattenError(verr))
}

// encodeValid encodes cfg, loads the bytes back as a Talos node would, and
// validates what it loaded.
func encodeValid(cfg coreconfig.Provider, mode Mode) ([]byte, error) {
	out, _, err := encodeLoad(cfg, mode)
	return out, err
}

// roundTrip is encodeValid, and returns the config that loaded.
func roundTrip(cfg coreconfig.Provider, mode Mode) (coreconfig.Provider, error) {
	_, loaded, err := encodeLoad(cfg, mode)
	return loaded, err
}

func encodeLoad(cfg coreconfig.Provider, mode Mode) ([]byte, coreconfig.Provider, error) {
	roundTrips.Add(1)
	out, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return nil, nil, fmt.Errorf("encode: %w", err)
	}
	loaded, err := configloader.NewFromBytes(out)
	if err != nil {
		return nil, nil, fmt.Errorf("the rendered config does not load: %w", err)
	}
	if err := validate(loaded, mode); err != nil {
		return nil, nil, err
	}
	return out, loaded, nil
}

// roundTrips counts the configs encoded and loaded back, for the tests.
var roundTrips atomic.Int64

func isValid(cfg coreconfig.Provider, mode Mode) bool {
	_, err := encodeValid(cfg, mode)
	return err == nil
}

// generateBase generates the config of in.Role before any patch.
func generateBase(in ConfigInput) (coreconfig.Provider, error) {
	var typ machine.Type
	switch in.Role {
	case RoleControlPlane:
		typ = machine.TypeControlPlane
	case RoleWorker:
		typ = machine.TypeWorker
	default:
		return nil, fmt.Errorf("%w, not %q", errNoRole, in.Role)
	}
	if in.ClusterName == "" {
		return nil, errors.New("cluster name: empty")
	}
	if in.ControlPlaneEndpoint == "" {
		return nil, errors.New("control plane endpoint: empty")
	}
	contract, err := parseContract(in.TalosVersion)
	if err != nil {
		return nil, err
	}
	if err := CheckVersions(in.TalosVersion, in.KubernetesVersion); err != nil {
		return nil, err
	}
	k8s := strings.TrimPrefix(in.KubernetesVersion, "v")
	bundle, osCA, err := parseSecrets(in.Secrets)
	if err != nil {
		return nil, err
	}
	now := in.Now
	if now.IsZero() {
		now = osCA
	}
	bundle.Clock = secrets.NewFixedClock(now)

	opts := []generate.Option{
		generate.WithVersionContract(contract),
		generate.WithSecretsBundle(bundle),
	}
	if in.InstallDisk != "" {
		opts = append(opts, generate.WithInstallDisk(in.InstallDisk))
	}
	switch in.CNI {
	case "", CNIFlannel, CNICilium, CNINone:
	default:
		return nil, fmt.Errorf("cni %q: want %q, %q or %q", in.CNI, CNIFlannel, CNICilium, CNINone)
	}
	gen, err := generate.NewInput(in.ClusterName, in.ControlPlaneEndpoint, k8s, opts...)
	if err != nil {
		return nil, fmt.Errorf("machine config for %s: %w", in.Role, err)
	}
	if len(in.PodNetwork) > 0 {
		gen.PodNet = slices.Clone(in.PodNetwork)
	}
	if len(in.ServiceNetwork) > 0 {
		gen.ServiceNet = slices.Clone(in.ServiceNetwork)
	}
	cfg, err := gen.Config(typ)
	if err != nil {
		return nil, fmt.Errorf("machine config for %s: %w", in.Role, err)
	}
	if in.CNI == CNICilium || in.CNI == CNINone {
		if cfg, err = withoutDefaultCNI(cfg, in.CNI == CNICilium); err != nil {
			return nil, fmt.Errorf("machine config for %s: %w", in.Role, err)
		}
	}
	if err := in.Components.set(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// withoutDefaultCNI turns off the CNI that Talos deploys by default and,
// with disableProxy, kube-proxy. Configs of the legacy v1alpha1 layout say
// so in cluster.network.cni (name none) and cluster.proxy.disabled; the
// multi-document layout (the Talos 1.14 contract) drops the
// KubeFlannelCNIConfig document and sets enabled: false in the
// KubeProxyConfig document. The config is the generator's own, so it is
// changed in place.
func withoutDefaultCNI(cfg coreconfig.Provider, disableProxy bool) (coreconfig.Provider, error) {
	if c := cfg.RawV1Alpha1().ClusterConfig; c != nil {
		if c.ClusterNetwork != nil {
			c.ClusterNetwork.CNI = &v1alpha1.CNIConfig{CNIName: constants.NoneCNI} //nolint:staticcheck // the layout of this contract
		}
		if disableProxy && c.ProxyConfig != nil { //nolint:staticcheck // the layout of this contract
			c.ProxyConfig.Disabled = pointer.To(true) //nolint:staticcheck // the layout of this contract
		}
	}
	docs := cfg.Documents()
	kept := make([]configdoc.Document, 0, len(docs))
	for _, doc := range docs {
		switch d := doc.(type) {
		case *k8s.KubeFlannelCNIConfigV1Alpha1:
			continue
		case *k8s.KubeProxyConfigV1Alpha1:
			if disableProxy {
				d.ProxyEnabled = pointer.To(false)
			}
		}
		kept = append(kept, doc)
	}
	if len(kept) == len(docs) {
		return cfg, nil
	}
	return container.New(kept...)
}

// applyPatch loads one patch and applies it to cfg, and checks that the
// result is still a config of machine type want. A JSON 6902 patch applies
// to the v1alpha1 document (the machine and cluster sections); the other
// documents stay as they are. A strategic merge merges into cfg's own
// documents, so the caller must hold cfg alone and use only the result.
// The patch is operator input handed to a third-party library, so a panic
// there becomes an error about the patch.
func applyPatch(cfg coreconfig.Provider, p Patch, want machine.Type) (patched coreconfig.Provider, err error) {
	defer func() {
		if r := recover(); r != nil {
			patched, err = nil, fmt.Errorf("the Talos config library failed on this patch: %v", r)
		}
	}()
	if strings.TrimSpace(p.Patch) == "" {
		return nil, errors.New("load: patch is empty")
	}
	loaded, err := loadPatchOnce(p.Patch)
	if err != nil {
		return nil, fmt.Errorf("load: %s", flattenError(err))
	}
	switch lp := loaded.(type) {
	case jsonpatch.Patch:
		patched, err = applyJSON6902(cfg, lp)
	case configpatcher.StrategicMergePatch:
		if err := checkDeletes(cfg, lp); err != nil {
			return nil, err
		}
		patched, err = configpatcher.StrategicMerge(owned{cfg}, lp)
	default:
		err = fmt.Errorf("load: unknown patch type %T", loaded)
	}
	if err != nil {
		return nil, fmt.Errorf("apply: %s", flattenError(err))
	}
	v1 := patched.RawV1Alpha1()
	if v1 == nil || v1.MachineConfig == nil {
		return nil, errors.New("apply: removes the machine section of the config")
	}
	if got := patched.Machine().Type(); got != want {
		return nil, fmt.Errorf("changes machine.type from %s to %q; a node group's role decides the type", want, v1.MachineConfig.MachineType)
	}
	return patched, nil
}

// checkDeletes refuses a patch that deletes a document cfg does not have
// ($patch: delete), which the merge would skip without a word: the
// operator meant to remove something, and nothing would be removed.
func checkDeletes(cfg coreconfig.Provider, p configpatcher.StrategicMergePatch) error {
	have := map[string]bool{}
	for _, doc := range cfg.Documents() {
		have[documentID(doc)] = true
	}
	for _, doc := range p.Documents() {
		if sel, ok := doc.(configloader.Selector); ok && !have[documentID(doc)] {
			return fmt.Errorf("apply: deletes %s, which the config does not have", sel)
		}
	}
	return nil
}

// documentID names a config document as a strategic merge matches them:
// apiVersion, kind and, for a named document, its name.
func documentID(doc configdoc.Document) string {
	id := doc.APIVersion() + "/" + doc.Kind()
	if named, ok := doc.(configdoc.NamedDocument); ok {
		id += "/" + named.Name()
	}
	return id
}

// owned is a config that only its builder holds: build and blame generate
// a fresh config and keep only the result of each patch, so a strategic
// merge may merge into the config itself instead of into a deep copy
// (StrategicMerge clones what it is given, which was most of its cost).
type owned struct{ coreconfig.Provider }

// Clone returns the config itself.
func (o owned) Clone() coreconfig.Provider { return o.Provider }

// applyJSON6902 applies a JSON 6902 patch to the v1alpha1 document of cfg.
func applyJSON6902(cfg coreconfig.Provider, p jsonpatch.Patch) (coreconfig.Provider, error) {
	return cfg.PatchV1Alpha1(func(v1 *v1alpha1.Config) error {
		doc, err := encoder.NewEncoder(v1, encoder.WithComments(encoder.CommentsDisabled)).Encode()
		if err != nil {
			return err
		}
		doc, err = configpatcher.JSON6902(doc, p)
		if err != nil {
			return err
		}
		loaded, err := configloader.NewFromBytes(doc)
		if err != nil {
			return err
		}
		if len(loaded.Documents()) != 1 || loaded.RawV1Alpha1() == nil {
			return errors.New("the patched document is no longer a v1alpha1 config")
		}
		*v1 = *loaded.RawV1Alpha1()
		return nil
	})
}

// validate runs the Talos validator, plus checks of values that Talos
// leaves to the running machine to reject: the pod and service subnets and
// the scheme of the control plane endpoint.
func validate(cfg coreconfig.Provider, mode Mode) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the Talos validator failed on this config: %v", r)
		}
	}()
	var errs []error
	if _, err := cfg.Validate(mode); err != nil {
		errs = append(errs, err)
	}
	for _, doc := range cfg.Documents() {
		// Talos 1.12 refuses "auto: off" without a hostname, which later
		// versions take as no hostname at all; a machine needs one.
		if h, ok := doc.(*network.HostnameConfigV1Alpha1); ok && h.ConfigAuto != nil && *h.ConfigAuto == nethelpers.AutoHostnameKindOff && h.ConfigHostname == "" {
			errs = append(errs, errors.New("HostnameConfig: either 'auto' or 'hostname' must be set"))
		}
	}
	if c := cfg.RawV1Alpha1(); c != nil && c.ClusterConfig != nil {
		if n := c.ClusterConfig.ClusterNetwork; n != nil {
			errs = append(errs, checkSubnets("cluster.network.podSubnets", n.PodSubnet), checkSubnets("cluster.network.serviceSubnets", n.ServiceSubnet))
		}
		if cp := c.ClusterConfig.ControlPlane; cp != nil && cp.Endpoint != nil && cp.Endpoint.URL != nil && cp.Endpoint.URL.Scheme != "https" {
			errs = append(errs, fmt.Errorf("cluster.controlPlane.endpoint: %q is not an https URL", cp.Endpoint.URL.String()))
		}
	}
	return errors.Join(errs...)
}

func checkSubnets(field string, cidrs []string) error {
	var errs []error
	for i, cidr := range cidrs {
		if _, err := netip.ParsePrefix(cidr); err != nil {
			errs = append(errs, fmt.Errorf("%s[%d]: %q is not a CIDR", field, i, cidr))
		}
	}
	return errors.Join(errs...)
}
