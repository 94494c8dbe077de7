package talosnode

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configdiff"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
)

// validationMode is the Talos validator's runtime mode of a node: cloud
// machines boot an installed image, metal machines install Talos from
// their first config (and need an install disk until they have).
type validationMode struct {
	metal, installed bool
}

func (m validationMode) String() string {
	if m.metal {
		return "metal"
	}
	return "cloud"
}

func (m validationMode) RequiresInstall() bool { return m.metal && !m.installed }
func (m validationMode) InContainer() bool     { return false }

// summary is what a node keeps in memory (and in its state file) of its
// running config: enough to serve probes without parsing the config again.
type summary struct {
	// ControlPlane is machine.type controlplane (or init).
	ControlPlane bool `json:"controlPlane"`
	// Cluster identifies the cluster: a hash of cluster.id and
	// cluster.secret. Nodes whose configs share it form one etcd cluster.
	Cluster string `json:"cluster"`
	// CA is the PEM certificate of machine.ca, the Talos API CA; CAKey is
	// its key, present in control-plane configs only.
	CA    []byte `json:"ca"`
	CAKey []byte `json:"caKey,omitempty"`
	// AcceptedCAs are further CAs that client certificates may chain to.
	AcceptedCAs [][]byte `json:"acceptedCAs,omitempty"`
	// Token hashes machine.token, which a worker presents to trustd on a
	// control plane to get its API certificate.
	Token    string   `json:"token"`
	CertSANs []string `json:"certSANs,omitempty"`
	// InstallVersion is the version of machine.install.image, if it names
	// one ("ghcr.io/siderolabs/installer:v1.12.6" → "v1.12.6").
	InstallVersion string `json:"installVersion,omitempty"`
	// Hostname is a static host name the config sets, if any.
	Hostname string `json:"hostname,omitempty"`
}

// loadConfig parses and validates a machine config as a Talos node does.
// The error is Talos's message, without a prefix.
func loadConfig(b []byte, mode validationMode) (config.Provider, []string, error) {
	cfg, err := configloader.NewFromBytes(b)
	if err != nil {
		return nil, nil, err
	}
	warnings, err := cfg.Validate(mode)
	if err != nil {
		return nil, warnings, err
	}
	return cfg, warnings, nil
}

// clusterIdentity is the cluster's ID and secret, wherever the config's
// layout keeps them.
func clusterIdentity(cfg config.Provider) string {
	if id := cfg.DiscoveryIdentityConfig(); id != nil {
		return id.ClusterID() + "\x00" + id.ClusterSecret()
	}
	return "\x00"
}

// summarize extracts a summary of a config that loaded and validated.
func summarize(cfg config.Provider) (summary, error) {
	m, c := cfg.Machine(), cfg.Cluster()
	if m == nil || c == nil {
		return summary{}, errors.New("the config has no machine or cluster section")
	}
	sec := m.Security()
	ca := sec.IssuingCA()
	if ca == nil || len(ca.Crt) == 0 {
		return summary{}, errors.New("machine.ca is missing")
	}
	s := summary{
		ControlPlane: m.Type() == machine.TypeControlPlane || m.Type() == machine.TypeInit,
		Cluster:      hashHex([]byte(clusterIdentity(cfg))),
		CA:           ca.Crt,
		CAKey:        ca.Key,
		Token:        hashHex([]byte(sec.Token())),
		CertSANs:     sec.CertSANs(),
	}
	for _, a := range sec.AcceptedCAs() {
		s.AcceptedCAs = append(s.AcceptedCAs, a.Crt)
	}
	if img := m.Install().Image(); img != "" {
		s.InstallVersion = versionOfImage(img)
	}
	if h := cfg.NetworkHostnameConfig(); h != nil && h.Hostname() != "" {
		s.Hostname = h.Hostname()
	} else if raw := cfg.RawV1Alpha1(); raw != nil && raw.MachineConfig != nil && raw.MachineConfig.MachineNetwork != nil {
		//lint:ignore SA1019 configs of older contracts set the host name here
		s.Hostname = raw.MachineConfig.MachineNetwork.NetworkHostname
	}
	return s, nil
}

func hashHex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

var versionTag = regexp.MustCompile(`^v?([0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.-]+)?)$`)

// versionOfImage returns the Talos version an image runs: the tag of an
// installer image ("ghcr.io/siderolabs/installer:v1.12.6", any registry),
// or the version in a sim image name ("talos-1.12.6", "talos-v1.12.6").
// It returns "" when the name holds no version.
func versionOfImage(image string) string {
	ref := image
	if i := strings.LastIndex(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	tag := ""
	if i := strings.LastIndex(ref, ":"); i >= 0 && !strings.Contains(ref[i:], "/") {
		tag = ref[i+1:]
	} else if t, ok := strings.CutPrefix(ref, "talos-"); ok {
		tag = t
	}
	if m := versionTag.FindStringSubmatch(tag); m != nil {
		return "v" + m[1]
	}
	return ""
}

// canApplyImmediately reports nil when moving from the running config cur
// to next needs no reboot, the rule of Talos 1.12: a change applies live
// unless it touches the v1alpha1 document outside the fields machined
// reconfigures at runtime (.debug, .cluster, and in .machine: ca,
// acceptedCAs, time, certSANs, install, network, sysfs, sysctls, logging,
// controlPlane, kubelet, kernel, registries, pods, seccompProfiles,
// nodeAnnotations, nodeLabels, nodeTaints, and in .machine.features:
// kubernetesTalosAPIAccess, kubePrism, hostDNS, imageCache,
// nodeAddressSortAlgorithm). Changes of other documents apply live. So
// machine.type, machine.token, machine.env, machine.files, machine.disks,
// machine.features.rbac and the like need a reboot. The error is Talos's
// message with the diff of what needs one.
func canApplyImmediately(cur, next config.Provider) error {
	if cur == nil || cur.RawV1Alpha1() == nil {
		return errors.New("no current config")
	}
	if next.RawV1Alpha1() == nil {
		return errors.New("new config is not v1alpha1")
	}
	old := cur.RawV1Alpha1()
	n := next.RawV1Alpha1().DeepCopy()
	n.ConfigDebug = old.ConfigDebug
	n.ClusterConfig = old.ClusterConfig
	if nm, om := n.MachineConfig, old.MachineConfig; nm != nil && om != nil {
		nm.MachineCA, nm.MachineAcceptedCAs = om.MachineCA, om.MachineAcceptedCAs
		//lint:ignore SA1019 Talos 1.12 still applies machine.time live
		nm.MachineTime = om.MachineTime
		nm.MachineCertSANs, nm.MachineInstall, nm.MachineNetwork = om.MachineCertSANs, om.MachineInstall, om.MachineNetwork
		nm.MachineSysfs, nm.MachineSysctls, nm.MachineLogging = om.MachineSysfs, om.MachineSysctls, om.MachineLogging
		nm.MachineControlPlane, nm.MachineKubelet, nm.MachineKernel = om.MachineControlPlane, om.MachineKubelet, om.MachineKernel
		//lint:ignore SA1019 Talos 1.12 still applies machine.registries live
		nm.MachineRegistries = om.MachineRegistries
		nm.MachinePods, nm.MachineSeccompProfiles = om.MachinePods, om.MachineSeccompProfiles
		nm.MachineNodeAnnotations, nm.MachineNodeLabels, nm.MachineNodeTaints = om.MachineNodeAnnotations, om.MachineNodeLabels, om.MachineNodeTaints
		if nf, of := nm.MachineFeatures, om.MachineFeatures; nf != nil && of != nil {
			nf.KubernetesTalosAPIAccessConfig, nf.KubePrismSupport, nf.HostDNSSupport = of.KubernetesTalosAPIAccessConfig, of.KubePrismSupport, of.HostDNSSupport
			nf.ImageCacheSupport, nf.FeatureNodeAddressSortAlgorithm = of.ImageCacheSupport, of.FeatureNodeAddressSortAlgorithm
		}
	}
	if reflect.DeepEqual(old, n) {
		return nil
	}
	diff, err := configdiff.DiffConfigs(container.NewV1Alpha1(old), container.NewV1Alpha1(n))
	if err != nil {
		return fmt.Errorf("error calculating diff: %w", err)
	}
	return fmt.Errorf("this config change can't be applied in immediate mode\ndiff:\n%s", diff)
}

// diffSummary is the dry-run summary of moving from cur (nil in
// maintenance mode) to next.
func diffSummary(cur, next config.Provider) (string, error) {
	if cur == nil {
		return "Node is running in maintenance mode and does not have a config yet.", nil
	}
	d, err := configdiff.DiffConfigs(cur, next)
	if err != nil {
		return "", fmt.Errorf("failed to generate diff: %w", err)
	}
	if d == "" {
		d = "No changes."
	}
	return "Config diff:\n\n" + d, nil
}
