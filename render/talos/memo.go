package talos

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	jsonpatch "github.com/evanphx/json-patch"
	"github.com/siderolabs/crypto/x509"
	configdoc "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
)

// Two pure functions of their bytes are the costly parts of MachineConfig
// when a fleet is validated: parsing the secrets bundle (an RSA key above
// all) and loading a patch with Talos's config loader. Validation renders
// thousands of configs from one throwaway bundle per Talos contract and
// from patches that many node groups share, so MachineConfig keeps what
// they gave, keyed by the exact bytes (a SHA-256 of the bundle, the patch
// text itself), and hands out deep copies, never the kept value, so that
// nothing a config does to its bundle or patch can reach a later config.
// A patch's error is kept as well: the same text fails the same way.
//
// Only the throwaway validation bundles are kept (ValidationSecrets adds
// them): a tenant's own bundle is parsed on every call, so that no tenant's
// keys stay in memory after its render.
const maxPatches = 1024

var (
	validationParsed sync.Map // [sha256.Size]byte -> parsedBundle
	patchMemo        = memo[string, loadedPatch]{max: maxPatches}
)

// memo is a bounded map of results, safe for concurrent use; when full, it
// starts again empty. Two callers that miss at once both compute; the
// values are equal.
type memo[K comparable, V any] struct {
	mu  sync.Mutex
	m   map[K]V
	max int
}

func (c *memo[K, V]) get(k K, compute func() V) V {
	if v, ok := c.load(k); ok {
		return v
	}
	v := compute()
	c.store(k, v)
	return v
}

func (c *memo[K, V]) load(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *memo[K, V]) store(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= c.max {
		c.m = make(map[K]V)
	}
	c.m[k] = v
}

// parsedBundle is what ParseSecrets gave for some bytes, and the creation
// time of the bundle's OS CA (the default clock of a config).
type parsedBundle struct {
	bundle *secrets.Bundle
	osCA   time.Time
	err    error
}

// parseBundle parses b with ParseSecrets and finds its OS CA's NotBefore.
func parseBundle(b []byte) parsedBundle {
	bundle, err := ParseSecrets(b)
	if err != nil {
		return parsedBundle{err: err}
	}
	ca, err := bundle.Certs.OS.GetCert()
	if err != nil {
		return parsedBundle{err: fmt.Errorf("secrets bundle: OS CA: %w", err)}
	}
	return parsedBundle{bundle: bundle, osCA: ca.NotBefore}
}

// rememberValidationBundle parses a validation bundle and keeps it.
func rememberValidationBundle(b []byte) {
	if p := parseBundle(b); p.err == nil {
		validationParsed.Store(sha256.Sum256(b), p)
	}
}

// parseSecrets is ParseSecrets, and the OS CA's NotBefore; a validation
// bundle comes from its parse at creation, as a deep copy with the system
// clock.
func parseSecrets(b []byte) (*secrets.Bundle, time.Time, error) {
	if v, ok := validationParsed.Load(sha256.Sum256(b)); ok {
		p := v.(parsedBundle)
		return cloneBundle(p.bundle), p.osCA, nil
	}
	p := parseBundle(b)
	return p.bundle, p.osCA, p.err
}

// cloneBundle deep-copies a validated bundle (every part is set).
func cloneBundle(b *secrets.Bundle) *secrets.Bundle {
	cluster, sec, trustd, certs := *b.Cluster, *b.Secrets, *b.TrustdInfo, *b.Certs
	certs.Etcd = cloneCertAndKey(certs.Etcd)
	certs.K8s = cloneCertAndKey(certs.K8s)
	certs.K8sAggregator = cloneCertAndKey(certs.K8sAggregator)
	certs.OS = cloneCertAndKey(certs.OS)
	certs.K8sServiceAccount = &x509.PEMEncodedKey{Key: bytes.Clone(certs.K8sServiceAccount.Key)}
	return &secrets.Bundle{Clock: secrets.NewClock(), Cluster: &cluster, Secrets: &sec, TrustdInfo: &trustd, Certs: &certs}
}

func cloneCertAndKey(c *x509.PEMEncodedCertificateAndKey) *x509.PEMEncodedCertificateAndKey {
	return &x509.PEMEncodedCertificateAndKey{Crt: bytes.Clone(c.Crt), Key: bytes.Clone(c.Key)}
}

// loadedPatch is what configpatcher.LoadPatch gave for a patch text.
type loadedPatch struct {
	patch configpatcher.Patch
	err   error
}

// loadPatchOnce is configpatcher.LoadPatch, each text loaded once: it
// returns a deep copy of the loaded patch.
func loadPatchOnce(text string) (configpatcher.Patch, error) {
	p := patchMemo.get(text, func() loadedPatch {
		patch, err := configpatcher.LoadPatch([]byte(text))
		return loadedPatch{patch: patch, err: err}
	})
	if p.err != nil {
		return nil, p.err
	}
	switch lp := p.patch.(type) {
	case configpatcher.StrategicMergePatch:
		return cloneStrategicPatch(lp), nil
	case jsonpatch.Patch:
		return cloneJSONPatch(lp), nil
	default:
		return nil, fmt.Errorf("unknown patch type %T", p.patch)
	}
}

// patchDocs is a strategic merge patch of documents that only its
// holder has.
type patchDocs []configdoc.Document

func (p patchDocs) Documents() []configdoc.Document { return p }

// Bytes encodes the documents as configs are encoded.
func (p patchDocs) Bytes() ([]byte, error) {
	var b bytes.Buffer
	for i, doc := range p {
		out, err := encoder.NewEncoder(doc, encoder.WithComments(encoder.CommentsDisabled)).Encode()
		if err != nil {
			return nil, err
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(out)
	}
	return b.Bytes(), nil
}

var _ configpatcher.StrategicMergePatch = patchDocs(nil)

// cloneStrategicPatch returns a deep copy of p's documents.
func cloneStrategicPatch(p configpatcher.StrategicMergePatch) patchDocs {
	docs := p.Documents()
	out := make(patchDocs, len(docs))
	for i, doc := range docs {
		out[i] = doc.Clone()
	}
	return out
}

func cloneJSONPatch(p jsonpatch.Patch) jsonpatch.Patch {
	out := make(jsonpatch.Patch, len(p))
	for i, op := range p {
		c := make(jsonpatch.Operation, len(op))
		for k, v := range op {
			if v != nil {
				raw := json.RawMessage(bytes.Clone(*v))
				v = &raw
			}
			c[k] = v
		}
		out[i] = c
	}
	return out
}
