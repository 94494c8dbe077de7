package schema

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"filippo.io/age"

	"github.com/rezuscloud/rezuscloud/internal/sopsfile"
)

var _ Decrypter = (*sopsfile.Identities)(nil)

const sopsTenant = `apiVersion: rezuscloud.io/v1
kind: Tenant
metadata:
  name: alpha
spec:
  kubernetesVersion: "1.34.1"
  talosVersion: "1.12.6"
  controlPlaneEndpoint: https://127.3.0.11:6443
`

// sopsPatch is a ConfigPatch whose patch holds a secret.
const sopsPatch = `apiVersion: rezuscloud.io/v1
kind: ConfigPatch
metadata:
  name: registry
  labels:
    rezuscloud.io/tenant: alpha
spec:
  targetRole: worker
  patch: |
    machine:
      registries:
        config:
          ghcr.io:
            auth:
              password: s3cr3t-registry-password
`

// newAgeKey makes an age identity in a key file and returns the identities
// and the recipient.
func newAgeKey(t testing.TB) (*sopsfile.Identities, string) {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "keys.txt")
	if err := os.WriteFile(path, []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ids, err := sopsfile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return ids, id.Recipient().String()
}

func sopsEncrypt(t testing.TB, plain, recipient, regex string) []byte {
	t.Helper()
	enc, err := sopsfile.Encrypt([]byte(plain), []string{recipient}, regex)
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

// lineOf returns the line of the first line of data that starts, after
// its indentation, with prefix.
func lineOf(t *testing.T, data []byte, prefix string) int {
	t.Helper()
	for i, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimLeft(l, " -"), prefix) {
			return i + 1
		}
	}
	t.Fatalf("no line starts with %q in\n%s", prefix, data)
	return 0
}

// noSecretIn fails when a problem tells s.
func noSecretIn(t *testing.T, problems []Problem, s string) {
	t.Helper()
	for _, p := range problems {
		if strings.Contains(p.String(), s) {
			t.Errorf("problem tells the secret %q: %s", s, p)
		}
	}
}

func TestLoadSOPS(t *testing.T) {
	ids, recipient := newAgeKey(t)
	enc := sopsEncrypt(t, sopsPatch, recipient, "^patch$")
	if bytes.Contains(enc, []byte("s3cr3t")) {
		t.Fatal("the file holds the secret")
	}
	fsys := fstest.MapFS{"t/tenant.yaml": {Data: []byte(sopsTenant)}, "t/patch.yaml": {Data: enc}}
	d, err := Load(fsys, ".", &Options{Decrypt: ids})
	if err != nil {
		t.Fatal(err)
	}
	p := d.Tenant("alpha").Patches[0]
	if !strings.Contains(p.Spec.Patch, "password: s3cr3t-registry-password") || p.Spec.TargetRole != "worker" {
		t.Errorf("patch %+v", p.Spec)
	}
	if want := []string{"/spec/patch"}; !slices.Equal(p.Source.Encrypted, want) {
		t.Errorf("Source.Encrypted = %q, want %q", p.Source.Encrypted, want)
	}
	if got, want := p.Source.LineOf("/spec/patch"), lineOf(t, enc, "patch: ENC["); got != want {
		t.Errorf("line of /spec/patch = %d, want %d, the line in the file as committed", got, want)
	}
	if d.Undecrypted != 0 || d.Files != 2 {
		t.Errorf("files %d, undecrypted %d", d.Files, d.Undecrypted)
	}
	if len(d.Tenant("alpha").Tenant.Source.Encrypted) != 0 {
		t.Error("the plain tenant has encrypted values")
	}

	// Without a decrypter, the file is checked but for the patch.
	d, err = Load(fsys, ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	p = d.Tenant("alpha").Patches[0]
	if p.Spec.Patch != EncryptedValue || p.Spec.TargetRole != "worker" || !slices.Equal(p.Source.Encrypted, []string{"/spec/patch"}) {
		t.Errorf("undecrypted patch %+v, encrypted %q", p.Spec, p.Source.Encrypted)
	}
	if d.Undecrypted != 1 {
		t.Errorf("undecrypted %d, want 1", d.Undecrypted)
	}
}

// TestLoadSOPSProblems: a problem in or about an encrypted value names
// the file, the line as committed and the path, never the value.
func TestLoadSOPSProblems(t *testing.T) {
	ids, recipient := newAgeKey(t)
	for _, tc := range []struct {
		name, plain, regex, secret string
		at, path, want             string
	}{
		{
			name:  "schema error in an encrypted value",
			plain: strings.Replace(sopsPatch, "targetRole: worker", "targetRole: s3cr3t-role", 1),
			regex: "^(patch|targetRole)$", secret: "s3cr3t-role",
			at: "targetRole: ENC[", path: "/spec/targetRole", want: `must be one of "controlplane", "worker", not <encrypted>`,
		},
		{
			name:  "patch that is not YAML",
			plain: strings.Replace(sopsPatch, "password: s3cr3t-registry-password", "password: [s3cr3t-unclosed", 1),
			regex: "^patch$", secret: "s3cr3t-unclosed",
			at: "patch: ENC[", path: "/spec/patch", want: "patch is not valid YAML",
		},
		{
			name:  "patch with a duplicate key",
			plain: strings.Replace(sopsPatch, "password: s3cr3t-registry-password", "s3cr3t-key: 1\n              s3cr3t-key: 2", 1),
			regex: "^patch$", secret: "s3cr3t-key",
			at: "patch: ENC[", path: "/spec/patch", want: "patch: duplicate key <encrypted> (line 7 of the patch)",
		},
		{
			name:  "check that quotes the value",
			plain: strings.Replace(sopsTenant, "https://127.3.0.11:6443", "http://s3cr3t.example:6443", 1),
			regex: "^controlPlaneEndpoint$", secret: "s3cr3t.example",
			at: "controlPlaneEndpoint: ENC[", path: "/spec/controlPlaneEndpoint", want: "<encrypted> must be an https URL with a port",
		},
		{
			name:  "encrypted number of the wrong type",
			plain: sopsTenant + "  configPatches:\n    - name: n\n      patch: 12345\n",
			regex: "^patch$", secret: "12345",
			at: "patch: ENC[", path: "/spec/configPatches/0/patch", want: "must be a string or a mapping, not <encrypted>",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc := sopsEncrypt(t, tc.plain, recipient, tc.regex)
			fsys := fstest.MapFS{"t/x.yaml": {Data: enc}}
			if !strings.Contains(tc.plain, "kind: Tenant") {
				fsys["t/tenant.yaml"] = &fstest.MapFile{Data: []byte(sopsTenant)}
			}
			_, err := Load(fsys, ".", &Options{Decrypt: ids})
			problems := problemsOf(t, nil, err)
			noSecretIn(t, problems, tc.secret)
			if len(problems) != 1 {
				t.Fatalf("problems %v", problems)
			}
			p := problems[0]
			if p.File != "t/x.yaml" || p.Line != lineOf(t, enc, tc.at) || p.Path != tc.path || !strings.Contains(p.Message, tc.want) {
				t.Errorf("problem %s\nwant t/x.yaml:%d: %s: ...%s...", p, lineOf(t, enc, tc.at), tc.path, tc.want)
			}

			// Without a key the encrypted value is not checked.
			if _, err := Load(fsys, ".", nil); err != nil {
				t.Errorf("without a key: %v", err)
			}
		})
	}
}

// TestLoadSOPSDecryptErrors: a file that does not decrypt is a problem at
// the file, and nothing of it is loaded.
func TestLoadSOPSDecryptErrors(t *testing.T) {
	ids, recipient := newAgeKey(t)
	_, other := newAgeKey(t)
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"another key": {sopsEncrypt(t, sopsPatch, other, "^patch$"), "no age identity matches the file's recipients (recipients: " + other + ")"},
		"tampered":    {bytes.Replace(sopsEncrypt(t, sopsPatch, recipient, "^patch$"), []byte("targetRole: worker"), []byte("targetRole: controlplane"), 1), "MAC mismatch"},
		"malformed":   {[]byte(sopsTenant + "sops:\n  version: 3.13.3\n"), "missing or malformed sops metadata"},
	} {
		t.Run(name, func(t *testing.T) {
			fsys := fstest.MapFS{"t/tenant.yaml": {Data: []byte(sopsTenant)}, "t/patch.yaml": {Data: tc.data}}
			if name == "malformed" {
				delete(fsys, "t/tenant.yaml")
			}
			problems := problemsOf(t, nil, func() error { _, err := Load(fsys, ".", &Options{Decrypt: ids}); return err }())
			if len(problems) != 1 || problems[0].File != "t/patch.yaml" || problems[0].Line != 0 || !strings.HasPrefix(problems[0].Message, tc.want) {
				t.Errorf("problems %v, want one at t/patch.yaml: %s", problems, tc.want)
			}
		})
	}
}

// TestLoadSOPSDocuments: a file of several documents with every value
// encrypted (sops's default), comments in lists included, which sops
// writes as items.
func TestLoadSOPSDocuments(t *testing.T) {
	ids, recipient := newAgeKey(t)
	plain := sopsTenant + `  configPatches:
    # the first patch
    - name: a
      patch: "machine: {}"
    # the second
    - name: b
      patch: "machine: [s3cr3t-b"
---
` + sopsPatch
	enc := sopsEncrypt(t, plain, recipient, "")
	if n := bytes.Count(enc, []byte("type:comment]")); n != 2 {
		t.Fatalf("%d encrypted comments in\n%s", n, enc)
	}
	fsys := fstest.MapFS{"t/all.yaml": {Data: enc}}
	problems := problemsOf(t, nil, func() error { _, err := Load(fsys, ".", &Options{Decrypt: ids}); return err }())
	noSecretIn(t, problems, "s3cr3t")
	var patchLines []int // the lines of the encrypted patches: a, b, then the ConfigPatch's
	for i, l := range strings.Split(string(enc), "\n") {
		if strings.Contains(l, "patch: ENC[") {
			patchLines = append(patchLines, i+1)
		}
	}
	want := patchLines[1]
	if len(problems) != 1 || problems[0].Path != "/spec/configPatches/1/patch" || problems[0].Line != want {
		t.Fatalf("problems %v, want one at line %d, /spec/configPatches/1/patch", problems, want)
	}

	fixed := sopsEncrypt(t, strings.Replace(plain, "[s3cr3t-b", "[s3cr3t-b]", 1), recipient, "")
	fsys["t/all.yaml"] = &fstest.MapFile{Data: fixed}
	d, err := Load(fsys, ".", &Options{Decrypt: ids})
	if err != nil {
		t.Fatal(err)
	}
	td := d.Tenant("alpha")
	if got := td.Tenant.Spec.ConfigPatches; len(got) != 2 || got[1].Patch != "machine: [s3cr3t-b]" {
		t.Errorf("configPatches %+v", got)
	}
	wantPtrs := []string{"/spec/configPatches/0/name", "/spec/configPatches/0/patch", "/spec/configPatches/1/name", "/spec/configPatches/1/patch", "/spec/controlPlaneEndpoint", "/spec/kubernetesVersion", "/spec/talosVersion"}
	if !slices.Equal(td.Tenant.Source.Encrypted, wantPtrs) {
		t.Errorf("tenant's encrypted values %q, want %q", td.Tenant.Source.Encrypted, wantPtrs)
	}
	if len(td.Patches) != 1 || !slices.Equal(td.Patches[0].Source.Encrypted, []string{"/spec/patch", "/spec/targetRole"}) {
		t.Errorf("patches %+v", td.Patches)
	}
	if got, want := td.Patches[0].Source.Line, lineOf(t, fixed[bytes.Index(fixed, []byte("\n---\n")):], "apiVersion:")+strings.Count(string(fixed[:bytes.Index(fixed, []byte("\n---\n"))]), "\n"); got != want {
		t.Errorf("the patch's document is at line %d, want %d", got, want)
	}

	// Without the key, neither document tells what it is: nothing is
	// loaded, nothing is reported, and the file is counted.
	d, err = Load(fsys, ".", nil)
	if err != nil || d.Undecrypted != 1 || len(d.Tenants) != 0 {
		t.Errorf("without the key: %v, %+v", err, d)
	}
}

// TestLoadSOPSWithoutKey: without a decrypter, what is not encrypted is
// checked as usual.
func TestLoadSOPSWithoutKey(t *testing.T) {
	_, recipient := newAgeKey(t)
	bad := strings.Replace(strings.Replace(sopsPatch, "targetRole: worker", "targetRole: nobody", 1), "name: registry", "name: Bad_Name", 1)
	enc := sopsEncrypt(t, bad, recipient, "^patch$")
	fsys := fstest.MapFS{"t/tenant.yaml": {Data: []byte(sopsTenant)}, "t/patch.yaml": {Data: enc}}
	problems := problemsOf(t, nil, func() error { _, err := Load(fsys, ".", nil); return err }())
	if len(problems) != 2 || problems[0].Path != "/metadata/name" || problems[0].Line != lineOf(t, enc, "name: Bad_Name") ||
		problems[1].Path != "/spec/targetRole" || !strings.Contains(problems[1].Message, `not "nobody"`) {
		t.Errorf("problems %v", problems)
	}
}

// TestLoadSOPSCache: a file's result is kept by its content, under one
// decrypter; another decrypter starts over, and the cache's store never
// holds what an encrypted file yielded.
func TestLoadSOPSCache(t *testing.T) {
	ids, recipient := newAgeKey(t)
	enc := sopsEncrypt(t, sopsPatch, recipient, "^patch$")
	fsys := blobFS{fstest.MapFS{"t/tenant.yaml": {Data: []byte(sopsTenant)}, "t/patch.yaml": {Data: enc}}}
	store := &memStore{values: map[string][]byte{}}
	cache := NewCache(0)
	cache.UseStore(store)
	for range 2 {
		if _, err := Load(fsys, ".", &Options{Decrypt: ids, Cache: cache}); err != nil {
			t.Fatal(err)
		}
	}
	if s := cache.Stats(); s.Misses != 2 || s.Hits != 2 {
		t.Errorf("stats %+v, want 2 misses then 2 hits", s)
	}
	for key, v := range store.values {
		if strings.HasPrefix(key, "t/patch.yaml\x00") && v != nil {
			t.Errorf("the store holds the encrypted file's result")
		}
		if bytes.Contains(v, []byte("s3cr3t")) {
			t.Errorf("the store holds the secret under %q", key)
		}
	}
	if !slices.ContainsFunc(mapsKeys(store.values), func(k string) bool { return strings.HasPrefix(k, "t/tenant.yaml\x00") }) {
		t.Errorf("the store does not hold the plain file: %q", mapsKeys(store.values))
	}
	other, _ := newAgeKey(t)
	if _, err := Load(fsys, ".", &Options{Decrypt: other, Cache: cache}); err == nil {
		t.Error("another key decrypted the file")
	}
}

func mapsKeys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
