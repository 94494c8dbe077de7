package talos

import (
	"bytes"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"go.yaml.in/yaml/v4"

	"github.com/rezuscloud/rezuscloud/schema"
)

// GenerateSecrets creates a new secrets bundle for a cluster running
// talosVersion ("1.12.6", with or without a leading v): the cluster's CAs
// (valid ten years from now), service-account key, bootstrap and trustd
// tokens and the cluster identity. Every call gives new secrets.
//
// serviceAccountKey is the kind of the Kubernetes service-account key:
// schema.ServiceAccountKeyRSA, schema.ServiceAccountKeyECDSA, or "" for
// the one Talos makes for the version (RSA-4096 since Talos 1.7, ECDSA
// before). An RSA-4096 key takes around a second of CPU, an ECDSA key a
// millisecond.
//
// The bundle is encoded as YAML in the format `talosctl gen secrets`
// writes, so an operator can use it with talosctl too. The encoding of a
// given bundle is deterministic.
func GenerateSecrets(talosVersion string, now time.Time, serviceAccountKey string) ([]byte, error) {
	contract, err := parseContract(talosVersion)
	if err != nil {
		return nil, err
	}
	var opts []secrets.Option
	switch serviceAccountKey {
	case "":
	case schema.ServiceAccountKeyECDSA:
		opts = append(opts, secrets.WithECDSAServiceAccountKey())
	case schema.ServiceAccountKeyRSA:
		if !contract.UseRSAServiceAccountKey() {
			return nil, fmt.Errorf("generate secrets: an RSA service-account key needs Talos 1.7 or newer, not %s", talosVersion)
		}
	default:
		return nil, fmt.Errorf("generate secrets: service-account key %q: want %s or %s", serviceAccountKey, schema.ServiceAccountKeyRSA, schema.ServiceAccountKeyECDSA)
	}
	bundle, err := secrets.NewBundle(secrets.NewFixedClock(now), contract, opts...)
	if err != nil {
		return nil, fmt.Errorf("generate secrets: %w", err)
	}
	return encodeSecrets(bundle)
}

// ServiceAccountKeyOf returns the kind of a bundle's Kubernetes
// service-account key: schema.ServiceAccountKeyRSA or
// schema.ServiceAccountKeyECDSA.
func ServiceAccountKeyOf(secretsBundle []byte) (string, error) {
	bundle, err := ParseSecrets(secretsBundle)
	if err != nil {
		return "", err
	}
	block, _ := pem.Decode(bundle.Certs.K8sServiceAccount.Key)
	if block == nil {
		return "", errors.New("secrets bundle: the service-account key is not PEM")
	}
	switch block.Type {
	case "RSA PRIVATE KEY":
		return schema.ServiceAccountKeyRSA, nil
	case "EC PRIVATE KEY":
		return schema.ServiceAccountKeyECDSA, nil
	}
	return "", fmt.Errorf("secrets bundle: a service-account key of PEM type %q", block.Type)
}

// ParseSecrets decodes and checks a bundle made by GenerateSecrets (or by
// `talosctl gen secrets`). Unknown fields, missing parts and certificates or
// keys that do not parse are errors. The returned bundle's Clock is the
// system clock; set a fixed one before issuing certificates from it when the
// time matters.
func ParseSecrets(b []byte) (*secrets.Bundle, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, errors.New("secrets bundle: empty")
	}
	bundle := &secrets.Bundle{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(bundle); err != nil {
		return nil, fmt.Errorf("secrets bundle: %s", flattenError(err))
	}
	bundle.Clock = secrets.NewClock()
	if err := bundle.Validate(newestContract); err != nil {
		return nil, fmt.Errorf("secrets bundle: %s", flattenError(err))
	}
	return bundle, nil
}

// CACertificates returns the PEM-encoded certificates of the bundle's
// Kubernetes CA and OS (Talos API) CA, for clients that must trust them.
func CACertificates(secretsBundle []byte) (kubernetesCA, osCA []byte, err error) {
	bundle, err := ParseSecrets(secretsBundle)
	if err != nil {
		return nil, nil, err
	}
	return bytes.Clone(bundle.Certs.K8s.Crt), bytes.Clone(bundle.Certs.OS.Crt), nil
}

// SecretValues returns the values of a bundle as text may carry them, for
// a redaction that removes them: each certificate and key as the base64
// of its PEM (as the bundle and Talos configs hold them) and each line of
// its PEM body of 16 bytes or more, the bootstrap and trustd tokens and the secret part of
// each, the encryption secret, and the cluster ID and secret. A bundle
// that does not decode gives none.
func SecretValues(secretsBundle []byte) []string {
	var b secrets.Bundle
	if err := yaml.Unmarshal(secretsBundle, &b); err != nil || b.Certs == nil || b.Secrets == nil || b.Cluster == nil || b.TrustdInfo == nil {
		return nil
	}
	var out []string
	pemValue := func(p []byte) {
		if len(p) == 0 {
			return
		}
		out = append(out, base64.StdEncoding.EncodeToString(p))
		for _, l := range strings.Split(string(p), "\n") {
			if len(l) >= 16 && !strings.HasPrefix(l, "-----") {
				out = append(out, l)
			}
		}
	}
	for _, ck := range []*x509.PEMEncodedCertificateAndKey{b.Certs.Etcd, b.Certs.K8s, b.Certs.K8sAggregator, b.Certs.OS} {
		if ck != nil {
			pemValue(ck.Crt)
			pemValue(ck.Key)
		}
	}
	if b.Certs.K8sServiceAccount != nil {
		pemValue(b.Certs.K8sServiceAccount.Key)
	}
	for _, token := range []string{b.Secrets.BootstrapToken, b.TrustdInfo.Token} {
		_, secret, _ := strings.Cut(token, ".")
		out = append(out, token, secret)
	}
	return append(out, b.Secrets.SecretboxEncryptionSecret, b.Secrets.AESCBCEncryptionSecret, b.Cluster.ID, b.Cluster.Secret)
}

func encodeSecrets(bundle *secrets.Bundle) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(4)
	if err := enc.Encode(bundle); err != nil {
		return nil, fmt.Errorf("encode secrets: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode secrets: %w", err)
	}
	return buf.Bytes(), nil
}

// newestContract is the newest Talos version this build's machinery can
// generate configs for. Config generation is backwards compatible only.
var newestContract = config.TalosVersion1_14

func parseContract(talosVersion string) (*config.VersionContract, error) {
	if talosVersion == "" {
		return nil, errors.New("talos version: empty")
	}
	contract, err := config.ParseContractFromVersion(talosVersion)
	if err != nil {
		return nil, fmt.Errorf("talos version %q: not of the form 1.12.6", talosVersion)
	}
	if contract.Greater(newestContract) {
		return nil, fmt.Errorf("talos version %q: newer than %s, the newest this build can render", talosVersion, newestContract)
	}
	return contract, nil
}
