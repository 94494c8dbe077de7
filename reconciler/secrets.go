package reconciler

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/rezuscloud/rezuscloud/internal/version"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/render/talos"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// secretsCache keeps each tenant's Talos secrets bundle in memory once read
// from its state, so that rendering never needs a tofu run for it. The
// bundle lives in the tenant's TF state and nowhere else on disk.
type secretsCache struct {
	mu sync.Mutex
	m  map[string][]byte
	// misses are the digests of stored states that gave no bundle, by
	// tenant, so that an encrypted one is not decrypted again until it
	// changes.
	misses map[string][32]byte
}

// missed reports whether state is the one recorded as giving no bundle.
func (c *secretsCache) missed(tenant string, state []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.misses[tenant]
	return ok && d == sha256.Sum256(state)
}

// miss records that state gave no bundle.
func (c *secretsCache) miss(tenant string, state []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.misses == nil {
		c.misses = map[string][32]byte{}
	}
	c.misses[tenant] = sha256.Sum256(state)
}

func (c *secretsCache) get(tenant string) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[tenant]
}

// values returns the values of the tenant's bundle that its runs' output
// must not show (talos.SecretValues), when the bundle is in memory.
func (c *secretsCache) values(tenant string) []string {
	if b := c.get(tenant); b != nil {
		return talos.SecretValues(b)
	}
	return nil
}

func (c *secretsCache) put(tenant string, b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string][]byte{}
	}
	if b == nil {
		delete(c.m, tenant)
		return
	}
	c.m[tenant] = b
}

// secretsFor returns the tenant's secrets bundle: from memory; else from its
// stored state (storedSecrets); else, for a tenant that has none yet, a new
// bundle made with the version contract of its talosVersion. fresh reports
// the last case.
func (r *Reconciler) secretsFor(ctx context.Context, td *schema.TenantDesired, dir string, initInputs []byte, creds tofu.Creds) (bundle []byte, fresh bool, err error) {
	name := td.Tenant.Metadata.Name
	if b := r.secrets.get(name); b != nil {
		return b, false, keyAsAsked(td, b)
	}
	var raw []byte
	if err := r.store.View(func(tx store.Tx) error {
		raw = append([]byte(nil), store.CurrentState(tx, name)...)
		return nil
	}); err != nil {
		return nil, false, err
	}
	if len(raw) > 0 {
		b, err := r.storedSecrets(ctx, name, raw, dir, initInputs, creds)
		if err != nil {
			return nil, false, err
		}
		if b != nil {
			r.secrets.put(name, b)
			return b, false, keyAsAsked(td, b)
		}
	}
	b, err := talos.GenerateSecrets(td.Tenant.Spec.TalosVersion, r.opts.Now(), td.Tenant.Spec.ServiceAccountKey)
	if err != nil {
		return nil, false, fmt.Errorf("generate secrets of %s: %w", name, err)
	}
	return b, true, nil
}

// keyAsAsked checks that the service-account key of the tenant's bundle
// is of the kind its spec asks for, when it asks for one: the key is made
// once, with the bundle, so a spec that asks for another kind later is an
// error of the tenant's runs rather than a change that never happens.
func keyAsAsked(td *schema.TenantDesired, bundle []byte) error {
	want := td.Tenant.Spec.ServiceAccountKey
	if want == "" {
		return nil
	}
	have, err := talos.ServiceAccountKeyOf(bundle)
	if err != nil {
		return fmt.Errorf("secrets of %s: %w", td.Tenant.Metadata.Name, err)
	}
	if have != want {
		return fmt.Errorf("tenant %s: spec.serviceAccountKey is %s, but the cluster's service-account key is %s: the key is made once, with the cluster's secrets at its first apply; set serviceAccountKey to %s or leave it out",
			td.Tenant.Metadata.Name, want, have, have)
	}
	return nil
}

// storedSecrets reads the bundle from the tenant's stored state raw: as
// it is, or, encrypted, through `tofu show` in the work directory when it
// has been initialised (initInputs), else decrypted with the state
// passphrase. An encrypted state that neither can read is an error, never a
// state without a bundle: a new bundle would take the place of the one the
// state holds.
func (r *Reconciler) storedSecrets(ctx context.Context, name string, raw []byte, dir string, initInputs []byte, creds tofu.Creds) ([]byte, error) {
	b, encrypted, err := secretsFromStateFile(raw)
	switch {
	case err != nil:
		return nil, fmt.Errorf("read secrets of %s from its state: %w", name, err)
	case !encrypted:
		return b, nil
	case len(initInputs) > 0:
		st, err := r.runner.State(ctx, dir, initInputs, creds)
		if err != nil {
			return nil, fmt.Errorf("read secrets of %s from its encrypted state: %w", name, err)
		}
		return secretsFromShow(st), nil
	case r.opts.StatePassphrase != "":
		plain, err := decryptState(raw, r.opts.StatePassphrase)
		if err == nil {
			b, _, err = secretsFromStateFile(plain)
		}
		if err != nil {
			return nil, fmt.Errorf("read secrets of %s from its encrypted state: %w", name, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("read secrets of %s: its state is encrypted, and the server has neither a work directory nor the passphrase to read it with", name)
}

// formerSecretsKept returns the addresses a destroy of the tenant leaves in
// its state: render.FormerSecretsResource when the stored state may hold
// it (it does, or it is encrypted and the server has no passphrase to
// look). tofu would print that resource's output, the bundle, in its plan;
// the state goes once the destroy is done.
func (r *Reconciler) formerSecretsKept(tenant string) []string {
	var raw []byte
	_ = r.store.View(func(tx store.Tx) error {
		raw = append([]byte(nil), store.CurrentState(tx, tenant)...)
		return nil
	})
	var st struct {
		EncryptedData json.RawMessage `json:"encrypted_data"`
		Resources     []struct {
			Mode, Type, Name string
		} `json:"resources"`
	}
	if json.Unmarshal(raw, &st) != nil {
		return nil
	}
	if len(st.EncryptedData) > 0 {
		plain, err := decryptState(raw, r.opts.StatePassphrase)
		if err != nil || json.Unmarshal(plain, &st) != nil {
			return []string{render.FormerSecretsResource}
		}
	}
	for _, res := range st.Resources {
		if res.Mode == "managed" && res.Type+"."+res.Name == render.FormerSecretsResource {
			return []string{render.FormerSecretsResource}
		}
	}
	return nil
}

// plainState reports whether the tenant has a stored state that is not
// encrypted.
func (r *Reconciler) plainState(tenant string) bool {
	plain := false
	_ = r.store.View(func(tx store.Tx) error {
		raw := store.CurrentState(tx, tenant)
		if len(raw) > 0 {
			_, encrypted, err := secretsFromStateFile(raw)
			plain = err == nil && !encrypted
		}
		return nil
	})
	return plain
}

// secretsFromStateFile finds the bundle in a state file as tofu writes it
// (see bundleIn). encrypted reports an OpenTofu-encrypted state, which
// needs tofu to read.
func secretsFromStateFile(raw []byte) (bundle []byte, encrypted bool, err error) {
	var st struct {
		EncryptedData json.RawMessage `json:"encrypted_data"`
		Resources     []struct {
			Mode      string `json:"mode"`
			Type      string `json:"type"`
			Name      string `json:"name"`
			Instances []struct {
				Attributes map[string]json.RawMessage `json:"attributes"`
			} `json:"instances"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, false, err
	}
	if len(st.EncryptedData) > 0 {
		return nil, true, nil
	}
	return bundleIn(func(address, attribute string) any {
		for _, res := range st.Resources {
			if res.Mode == "managed" && res.Type+"."+res.Name == address && len(res.Instances) > 0 {
				// A terraform_data attribute is {"value": V, "type": T}.
				var a struct{ Value any }
				_ = json.Unmarshal(res.Instances[0].Attributes[attribute], &a)
				return a.Value
			}
		}
		return nil
	}), false, nil
}

// secretsFromShow finds the bundle in the state `tofu show -json` gives
// (see bundleIn).
func secretsFromShow(st *tfjson.State) []byte {
	if st == nil || st.Values == nil || st.Values.RootModule == nil {
		return nil
	}
	return bundleIn(func(address, attribute string) any {
		for _, res := range st.Values.RootModule.Resources {
			if res.Address == address {
				return res.AttributeValues[attribute]
			}
		}
		return nil
	})
}

// bundleIn finds the bundle in a state, given a func that reads an
// attribute of a resource in it: in render.SecretsResource, else in the
// resource of earlier versions (render.FormerSecretsResource), which a
// state holds until its first apply by this version (and with the same
// bundle in both while that apply lasts).
func bundleIn(attr func(address, attribute string) any) []byte {
	for _, at := range [][2]string{
		{render.SecretsResource, render.SecretsAttribute},
		{render.FormerSecretsResource, render.FormerSecretsAttribute},
	} {
		if s, ok := attr(at[0], at[1]).(string); ok && s != "" {
			return []byte(s)
		}
	}
	return nil
}

// inputHash is a digest of everything a tenant's workspace is rendered
// from besides its secrets: the manifests as loaded and this build's
// version. An equal hash means an equal render, so a tenant whose hash
// matches what was applied needs neither rendering nor tofu. The hash of
// a tenant with SOPS-encrypted values is keyed with key (Options.HashKey),
// so that the hash the store keeps cannot be checked against guesses of
// those values.
func inputHash(td *schema.TenantDesired, key []byte) string {
	h := sha256.New()
	if len(key) > 0 && td.Encrypted() {
		h = hmac.New(sha256.New, key)
	}
	fmt.Fprintf(h, "rezuscloud %s\x00", version.Version)
	enc := json.NewEncoder(h)
	_ = enc.Encode(td.Tenant)
	for _, ng := range td.NodeGroups {
		_ = enc.Encode(ng)
	}
	for _, p := range td.Patches {
		_ = enc.Encode(p)
	}
	return hex.EncodeToString(h.Sum(nil))
}
