package talos

import (
	"fmt"
	"strings"

	"github.com/siderolabs/crypto/x509"
	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
)

// bundleField is one field of a machine config whose value comes from the
// tenant's secrets bundle (or, for the accepted CAs, decides which keys the
// machine trusts besides the bundle's). The server reaches its machines only
// with the bundle's keys, so a patch that changed one of them could lock it
// out of the machines for good.
type bundleField struct {
	path string // as a patch writes it
	// get returns the field's value as the config's accessors give it, so
	// that whatever document of the config sets the field is seen.
	get func(coreconfig.Provider) string
}

var bundleFields = []bundleField{
	{"machine.ca", func(c coreconfig.Provider) string { return certAndKey(c.Machine().Security().IssuingCA()) }},
	{"machine.acceptedCAs", func(c coreconfig.Provider) string { return certs(c.Machine().Security().AcceptedCAs()) }},
	{"machine.token", func(c coreconfig.Provider) string { return c.Machine().Security().Token() }},
	{"cluster.id", func(c coreconfig.Provider) string {
		if id := c.DiscoveryIdentityConfig(); id != nil {
			return id.ClusterID()
		}
		return ""
	}},
	{"cluster.secret", func(c coreconfig.Provider) string {
		if id := c.DiscoveryIdentityConfig(); id != nil {
			return id.ClusterSecret()
		}
		return ""
	}},
	{"cluster.token", func(c coreconfig.Provider) string {
		t := c.Cluster().Token()
		return t.ID() + "." + t.Secret()
	}},
	{"cluster.ca", func(c coreconfig.Provider) string {
		if l := legacyCluster(c); l != nil && l.ClusterCA != nil {
			return certAndKey(l.ClusterCA)
		}
		if ca := c.K8sAPIServerCAConfig(); ca != nil {
			return certAndKey(ca.IssuingCA())
		}
		return ""
	}},
	{"cluster.acceptedCAs", func(c coreconfig.Provider) string {
		if l := legacyCluster(c); l != nil && (l.ClusterCA != nil || l.ClusterAcceptedCAs != nil) {
			return certs(l.ClusterAcceptedCAs)
		}
		if ca := c.K8sAPIServerCAConfig(); ca != nil {
			return certs(ca.AcceptedCAs())
		}
		return ""
	}},
	{"cluster.aggregatorCA", func(c coreconfig.Provider) string {
		if ca := c.K8sAggregatorCAConfig(); ca != nil {
			return certAndKey(ca.IssuingCA())
		}
		return ""
	}},
	{"cluster.serviceAccount", func(c coreconfig.Provider) string {
		if l := legacyCluster(c); l != nil && l.ClusterServiceAccount != nil {
			return string(l.ClusterServiceAccount.Key)
		}
		if sa := c.K8sServiceAccountConfig(); sa != nil && sa.IssuingKey() != nil {
			return string(sa.IssuingKey().Key)
		}
		return ""
	}},
	{"cluster.etcd.ca", func(c coreconfig.Provider) string { return certAndKey(c.Cluster().Etcd().CA()) }},
	{"cluster.secretboxEncryptionSecret", func(c coreconfig.Provider) string { return c.Cluster().SecretboxEncryptionSecret() }},
	{"cluster.aescbcEncryptionSecret", func(c coreconfig.Provider) string { return c.Cluster().AESCBCEncryptionSecret() }},
}

// legacyCluster is the cluster section of cfg's v1alpha1 document, which
// holds the Kubernetes CAs and keys in configs of the Talos 1.13 contract
// and older; nil when there is none. Newer contracts keep them in
// documents of their own, which the config's accessors read.
func legacyCluster(cfg coreconfig.Provider) *v1alpha1.ClusterConfig {
	if v1 := cfg.RawV1Alpha1(); v1 != nil {
		return v1.ClusterConfig
	}
	return nil
}

func certAndKey(c *x509.PEMEncodedCertificateAndKey) string {
	if c == nil {
		return ""
	}
	return string(c.Crt) + "\x00" + string(c.Key)
}

func certs(cs []*x509.PEMEncodedCertificate) string {
	var b strings.Builder
	for _, c := range cs {
		if c != nil {
			b.Write(c.Crt)
		}
		b.WriteByte(0)
	}
	return b.String()
}

// bundleValues is what a config's bundle-owned fields hold, in the order
// of bundleFields; the strings are copies, so a later merge into the config
// does not change them.
type bundleValues []string

func bundleValuesOf(cfg coreconfig.Provider) bundleValues {
	v := make(bundleValues, len(bundleFields))
	for i, f := range bundleFields {
		v[i] = f.get(cfg)
	}
	return v
}

// checkBundleFields compares the bundle-owned fields of a patched config
// with their values before any patch, and names each field that a patch
// set, changed or removed. Comparing the result, not the patch's text,
// holds for every kind of patch: a strategic merge, a JSON 6902 operation,
// or a document of any kind.
func checkBundleFields(before bundleValues, patched coreconfig.Provider) error {
	var set, removed []string
	for i, f := range bundleFields {
		switch now := f.get(patched); {
		case now == before[i]:
		case now == "" || now == "." || now == "\x00":
			removed = append(removed, f.path)
		default:
			set = append(set, f.path)
		}
	}
	if len(set) == 0 && len(removed) == 0 {
		return nil
	}
	var verbs []string
	if len(set) > 0 {
		verbs = append(verbs, "set "+strings.Join(set, ", "))
	}
	if len(removed) > 0 {
		verbs = append(verbs, "remove "+strings.Join(removed, ", "))
	}
	return fmt.Errorf("may not %s: the tenant's secrets bundle owns %s, and cluster keys are not rotated with a patch",
		strings.Join(verbs, " or "), pronoun(len(set)+len(removed)))
}

func pronoun(n int) string {
	if n == 1 {
		return "this field"
	}
	return "these fields"
}
