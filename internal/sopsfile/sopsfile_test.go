package sopsfile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"filippo.io/age"
	sops "github.com/getsops/sops/v3"
	yaml "sigs.k8s.io/yaml/goyaml.v3"
)

// secrets are the plain values of manifests; no error may hold one.
var secrets = []string{"s3cr3t-registry-password", "s3cr3t-wg-key"}

const manifests = `apiVersion: rezuscloud.io/v1
kind: ConfigPatch
metadata:
  name: registry
  labels:
    rezuscloud.io/tenant: alpha
spec:
  targetRole: worker
  # the registry's credentials
  patch: |
    machine:
      registries:
        config:
          ghcr.io:
            auth:
              password: s3cr3t-registry-password
---
apiVersion: rezuscloud.io/v1
kind: Tenant
metadata:
  name: alpha
spec:
  kubernetesVersion: 1.34.1
  configPatches:
    # first
    - name: wg
      patch: "machine: {wireguard: s3cr3t-wg-key}"
  replicas: 3
  ha: true
`

// keyFile writes a key file of new identities and returns it with their
// recipients.
func keyFile(t *testing.T, n int) (string, []string) {
	t.Helper()
	var b strings.Builder
	var recipients []string
	b.WriteString("# created: by the test\n")
	for range n {
		id, err := age.GenerateX25519Identity()
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("# public key: " + id.Recipient().String() + "\n" + id.String() + "\n\n")
		recipients = append(recipients, id.Recipient().String())
	}
	path := filepath.Join(t.TempDir(), "keys.txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, recipients
}

func open(t *testing.T, path string) *Identities {
	t.Helper()
	ids, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func encryptT(t *testing.T, plain string, recipients []string, regex string) []byte {
	t.Helper()
	enc, err := Encrypt([]byte(plain), recipients, regex)
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

// documents decodes every document of a YAML stream.
func documents(t *testing.T, data []byte) []any {
	t.Helper()
	var out []any
	d := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var v any
		if err := d.Decode(&v); err != nil {
			if err.Error() == "EOF" {
				return out
			}
			t.Fatalf("decode: %v", err)
		}
		out = append(out, v)
	}
}

// noSecret fails when err's text holds a plain value.
func noSecret(t *testing.T, err error) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error quotes the value %s: %v", s, err)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	path, recipients := keyFile(t, 2)
	enc := encryptT(t, manifests, recipients[1:], "")
	for _, s := range append(secrets, "rezuscloud.io/v1", "kubernetesVersion: 1.34.1") {
		if bytes.Contains(enc, []byte(s)) {
			t.Errorf("the encrypted file holds %q", s)
		}
	}
	if !bytes.Contains(enc, []byte("recipient: "+recipients[1])) {
		t.Errorf("the encrypted file does not name its recipient:\n%s", enc)
	}
	plain, ptrs, err := open(t, path).Decrypt("t/alpha.yaml", enc)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := documents(t, plain), documents(t, []byte(manifests)); !equalYAML(got, want) {
		t.Errorf("decrypted %v, want %v", got, want)
	}
	want := []string{
		"/0/apiVersion", "/0/kind", "/0/metadata/name", "/0/metadata/labels/rezuscloud.io~1tenant", "/0/spec/targetRole", "/0/spec/patch",
		"/1/apiVersion", "/1/kind", "/1/metadata/name", "/1/spec/kubernetesVersion", "/1/spec/configPatches/0/name", "/1/spec/configPatches/0/patch",
		"/1/spec/replicas", "/1/spec/ha",
	}
	if !slices.Equal(ptrs, want) {
		t.Errorf("pointers\n%q\nwant\n%q", ptrs, want)
	}
	if !bytes.Contains(plain, []byte("ha: true")) || !bytes.Contains(plain, []byte("replicas: 3")) {
		t.Errorf("a number or boolean did not keep its type:\n%s", plain)
	}
}

func equalYAML(a, b any) bool {
	x, _ := yaml.Marshal(a)
	y, _ := yaml.Marshal(b)
	return bytes.Equal(x, y)
}

func TestEncryptedRegex(t *testing.T) {
	path, recipients := keyFile(t, 1)
	enc := encryptT(t, manifests, recipients, "^patch$")
	for _, s := range []string{"kubernetesVersion: 1.34.1", "name: registry", "rezuscloud.io/tenant: alpha", "encrypted_regex: ^patch$"} {
		if !bytes.Contains(enc, []byte(s)) {
			t.Errorf("the encrypted file lost the plain %q:\n%s", s, enc)
		}
	}
	for _, s := range secrets {
		if bytes.Contains(enc, []byte(s)) {
			t.Errorf("the encrypted file holds %q", s)
		}
	}
	plain, ptrs, err := open(t, path).Decrypt("t/alpha.yaml", enc)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/0/spec/patch", "/1/spec/configPatches/0/patch"}; !slices.Equal(ptrs, want) {
		t.Errorf("pointers %q, want %q", ptrs, want)
	}
	if !equalYAML(documents(t, plain), documents(t, []byte(manifests))) {
		t.Errorf("decrypted:\n%s", plain)
	}
}

// TestRules: every rule sops writes in a file's metadata decides what
// Decrypt reports as encrypted.
func TestRules(t *testing.T) {
	const doc = "a: 1\nb_secret: x\nc:\n    d_secret: y\n    e: z\nlist:\n    - p\n    - q\n"
	for _, tc := range []struct {
		name string
		md   sops.Metadata
		want []string
	}{
		{"encrypted_suffix", sops.Metadata{EncryptedSuffix: "_secret"}, []string{"/0/b_secret", "/0/c/d_secret"}},
		{"unencrypted_suffix", sops.Metadata{UnencryptedSuffix: "_secret"}, []string{"/0/a", "/0/c/e", "/0/list/0", "/0/list/1"}},
		{"encrypted_regex", sops.Metadata{EncryptedRegex: "^(c|list)$"}, []string{"/0/c/d_secret", "/0/c/e", "/0/list/0", "/0/list/1"}},
		{"unencrypted_regex", sops.Metadata{UnencryptedRegex: "^c$"}, []string{"/0/a", "/0/b_secret", "/0/list/0", "/0/list/1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, recipients := keyFile(t, 1)
			enc, err := encrypt([]byte(doc), recipients, tc.md)
			if err != nil {
				t.Fatal(err)
			}
			plain, ptrs, err := open(t, path).Decrypt("f.yaml", enc)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ptrs, tc.want) {
				t.Errorf("pointers %q, want %q\n%s", ptrs, tc.want, enc)
			}
			if !equalYAML(documents(t, plain), documents(t, []byte(doc))) {
				t.Errorf("decrypted:\n%s", plain)
			}
		})
	}
}

func TestAnotherKey(t *testing.T) {
	path, _ := keyFile(t, 1)
	_, others := keyFile(t, 2)
	enc := encryptT(t, manifests, others, "")
	_, _, err := open(t, path).Decrypt("t/alpha.yaml", enc)
	if !errors.Is(err, ErrNoIdentity) {
		t.Fatalf("err = %v, want ErrNoIdentity", err)
	}
	want := "t/alpha.yaml: no age identity matches the file's recipients (recipients: " + others[0] + ", " + others[1] + ")"
	if err.Error() != want {
		t.Errorf("err = %q\nwant  %q", err, want)
	}
}

// encValue matches one encrypted value of a file.
var encValue = regexp.MustCompile(`ENC\[AES256_GCM,data:([^,]+),iv:[^,]+,tag:[^,]+,type:[a-z]+\]`)

func TestTampered(t *testing.T) {
	path, recipients := keyFile(t, 1)
	ids := open(t, path)
	enc := encryptT(t, manifests, recipients, "^patch$")
	tamper := map[string]func([]byte) []byte{
		// Another value's ciphertext in place of the first patch's.
		"value": func(b []byte) []byte {
			all := encValue.FindAll(b, -1)
			return bytes.Replace(b, all[0], all[1], 1)
		},
		// A plain value changed: the MAC no longer matches.
		"plain value": func(b []byte) []byte {
			return bytes.Replace(b, []byte("kubernetesVersion: 1.34.1"), []byte("kubernetesVersion: 1.35.0"), 1)
		},
		// The MAC of another file.
		"mac": func(b []byte) []byte {
			other := encryptT(t, manifests, recipients, "^patch$")
			mac := regexp.MustCompile(`mac: (ENC\[[^\]]+\])`)
			return mac.ReplaceAll(b, mac.Find(other))
		},
		// A value whose ciphertext is cut short.
		"truncated value": func(b []byte) []byte {
			m := encValue.FindSubmatchIndex(b)
			return slices.Concat(b[:m[2]], b[m[2]+4:])
		},
	}
	for name, f := range tamper {
		t.Run(name, func(t *testing.T) {
			bad := f(bytes.Clone(enc))
			if bytes.Equal(bad, enc) {
				t.Fatal("the file did not change")
			}
			_, _, err := ids.Decrypt("t/alpha.yaml", bad)
			if !errors.Is(err, ErrMACMismatch) {
				t.Fatalf("err = %v, want ErrMACMismatch", err)
			}
			if !strings.HasPrefix(err.Error(), "t/alpha.yaml: MAC mismatch") {
				t.Errorf("err = %v", err)
			}
			noSecret(t, err)
		})
	}
}

func TestMetadata(t *testing.T) {
	path, recipients := keyFile(t, 1)
	ids := open(t, path)
	enc := string(encryptT(t, manifests, recipients, "^patch$"))
	metadata := enc[strings.Index(enc, "\nsops:\n")+1:]
	withoutSops := strings.Replace(enc, metadata, "", 1)
	for name, tc := range map[string]struct{ file, detail string }{
		"missing":        {withoutSops, "sops metadata not found"},
		"not a mapping":  {withoutSops + "sops: yes\n", "not a mapping"},
		"no mac":         {regexp.MustCompile(`(?m)^    mac: .*\n`).ReplaceAllString(enc, ""), "no mac"},
		"no recipient":   {regexp.MustCompile(`(?s)    age:\n.*?recipient: [^\n]*\n`).ReplaceAllString(enc, ""), "No keys found in file"},
		"bad time":       {regexp.MustCompile(`(?m)^    lastmodified: .*$`).ReplaceAllString(enc, `    lastmodified: "yesterday"`), "cannot parse"},
		"two rules":      {strings.Replace(enc, "    encrypted_regex:", "    unencrypted_suffix: _x\n    encrypted_regex:", 1), "Cannot use more than one"},
		"plain manifest": {manifests, "sops metadata not found"},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.file == enc {
				t.Fatal("the file did not change")
			}
			_, _, err := ids.Decrypt("t/alpha.yaml", []byte(tc.file))
			if !errors.Is(err, ErrMetadata) {
				t.Fatalf("err = %v, want ErrMetadata", err)
			}
			if !strings.HasPrefix(err.Error(), "t/alpha.yaml: missing or malformed sops metadata: ") || !strings.Contains(err.Error(), tc.detail) {
				t.Errorf("err = %v, want one with %q", err, tc.detail)
			}
			noSecret(t, err)
		})
	}
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	id, _ := age.GenerateX25519Identity()
	good := write("good.txt", "# a comment\r\n\r\n"+id.String()+"\r\n")
	if ids := open(t, good); ids.Len() != 1 || ids.Path() != good {
		t.Errorf("Open: %d identities from %s", ids.Len(), ids.Path())
	}
	broken := id.String()[:40] + "qqqq" + id.String()[44:]
	for name, tc := range map[string]struct{ path, want string }{
		"missing":     {filepath.Join(dir, "nope.txt"), "age key file: open " + filepath.Join(dir, "nope.txt") + ": no such file or directory"},
		"unreadable":  {dir, "age key file: read " + dir + ": is a directory"},
		"no identity": {write("empty.txt", "# public key: age1xyz\n\n"), "age key file " + filepath.Join(dir, "empty.txt") + " holds no age identity (a line AGE-SECRET-KEY-1…)"},
		"bad line":    {write("bad.txt", "# ok\n"+broken+"\n"), "age key file " + filepath.Join(dir, "bad.txt") + ": line 2 is not an age identity"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Open(tc.path)
			if err == nil || err.Error() != tc.want {
				t.Errorf("err = %v, want %s", err, tc.want)
			}
		})
	}
}

func TestEncryptRefuses(t *testing.T) {
	_, recipients := keyFile(t, 1)
	enc := encryptT(t, manifests, recipients, "")
	for name, tc := range map[string]struct {
		plain      string
		recipients []string
		want       string
	}{
		"encrypted":     {string(enc), recipients, "already encrypted"},
		"no recipient":  {manifests, nil, "no age recipient"},
		"bad recipient": {manifests, []string{"age1nope"}, "failed to parse"},
		"empty":         {"", recipients, "no document"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Encrypt([]byte(tc.plain), tc.recipients, "")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestCLIFiles decrypts files that the sops CLI wrote (testdata/README.md).
func TestCLIFiles(t *testing.T) {
	ids := open(t, "testdata/age-key.txt")
	plainYAML, err := os.ReadFile("testdata/plain.yaml")
	if err != nil {
		t.Fatal(err)
	}
	all := []string{
		"/0/apiVersion", "/0/kind", "/0/metadata/name", "/0/metadata/labels/rezuscloud.io~1tenant", "/0/spec/targetRole", "/0/spec/patch",
		"/1/apiVersion", "/1/kind", "/1/metadata/name", "/1/spec/kubernetesVersion",
		"/1/spec/configPatches/0/name", "/1/spec/configPatches/0/patch", "/1/spec/configPatches/1/name", "/1/spec/configPatches/1/patch",
		"/1/spec/plugins/cni/type", "/1/spec/plugins/cni/values_secret/encryption/key",
	}
	for file, want := range map[string][]string{
		"cli-default.yaml":           all,
		"cli-regex.yaml":             {"/0/spec/patch", "/1/spec/configPatches/0/patch", "/1/spec/configPatches/1/patch"},
		"cli-suffix.yaml":            {"/1/spec/plugins/cni/values_secret/encryption/key"},
		"cli-unencrypted-regex.yaml": slices.DeleteFunc(slices.Clone(all), func(p string) bool { return regexp.MustCompile(`^/\d/(apiVersion|kind|metadata)`).MatchString(p) }),
	} {
		t.Run(file, func(t *testing.T) {
			enc, err := os.ReadFile("testdata/" + file)
			if err != nil {
				t.Fatal(err)
			}
			plain, ptrs, err := ids.Decrypt(file, enc)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ptrs, want) {
				t.Errorf("pointers\n%q\nwant\n%q", ptrs, want)
			}
			if !equalYAML(documents(t, plain), documents(t, plainYAML)) {
				t.Errorf("decrypted:\n%s", plain)
			}
			if !bytes.Contains(plain, []byte("# WireGuard")) {
				t.Errorf("the comment in a list did not decrypt as a comment:\n%s", plain)
			}
		})
	}
}

// TestFromEnvironment finds a user's identities where sops does.
func TestFromEnvironment(t *testing.T) {
	config := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", config)
	t.Setenv("HOME", t.TempDir())
	t.Setenv(EnvKeyFile, "")
	os.Unsetenv(EnvKeyFile)
	ids, err := FromEnvironment()
	if err != nil || ids != nil {
		t.Fatalf("no key anywhere: %v, %v", ids, err)
	}

	fileKey, fileRecipients := keyFile(t, 1)
	userKey := filepath.Join(config, "sops", "age", "keys.txt")
	data, _ := os.ReadFile(fileKey)
	if err := os.MkdirAll(filepath.Dir(userKey), 0o700); err != nil {
		t.Fatal(err)
	}
	userID, _ := age.GenerateX25519Identity()
	if err := os.WriteFile(userKey, []byte(userID.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	envID, _ := age.GenerateX25519Identity()
	t.Setenv(EnvKeyFile, fileKey)
	t.Setenv(EnvKey, "# keys\n"+envID.String()+"  "+strings.TrimSpace(strings.Split(string(data), "\n")[2]))
	ids, err = FromEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	if want := EnvKey + ", " + fileKey + ", " + userKey; ids.Path() != want || ids.Len() != 4 {
		t.Errorf("found %d identities in %s, want 4 in %s", ids.Len(), ids.Path(), want)
	}
	for _, r := range []string{fileRecipients[0], userID.Recipient().String(), envID.Recipient().String()} {
		if _, _, err := ids.Decrypt("f.yaml", encryptT(t, "a: b\n", []string{r}, "")); err != nil {
			t.Errorf("the identity of %s: %v", r, err)
		}
	}

	t.Setenv(EnvKeyFile, filepath.Join(config, "missing.txt"))
	if _, err := FromEnvironment(); err == nil || !strings.Contains(err.Error(), "SOPS_AGE_KEY_FILE: age key file: open "+filepath.Join(config, "missing.txt")) {
		t.Errorf("a missing SOPS_AGE_KEY_FILE: %v", err)
	}
}

// BenchmarkDecrypt decrypts a ConfigPatch whose patch sops encrypted
// (encrypted_regex ^patch$), as Load does for each such file.
func BenchmarkDecrypt(b *testing.B) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "keys.txt")
	if err := os.WriteFile(path, []byte(id.String()+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	ids, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	plain := strings.SplitN(manifests, "---\n", 2)[0]
	enc, err := Encrypt([]byte(plain), []string{id.Recipient().String()}, "^patch$")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, ptrs, err := ids.Decrypt("t/patch.yaml", enc); err != nil || len(ptrs) != 1 {
			b.Fatal(ptrs, err)
		}
	}
}
