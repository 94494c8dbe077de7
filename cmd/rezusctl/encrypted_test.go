package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	fage "filippo.io/age"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/internal/sopsfile"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

const (
	encTenant = `apiVersion: rezuscloud.io/v1
kind: Tenant
metadata:
  name: alpha
spec:
  kubernetesVersion: "1.34.1"
  talosVersion: "1.12.6"
  controlPlaneEndpoint: https://127.3.0.11:6443
`
	encPatch = `apiVersion: rezuscloud.io/v1
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
	encSecret = "s3cr3t"
)

// ageKeyFile writes a key file of a new identity and returns it and the
// recipient.
func ageKeyFile(t *testing.T, dir string) (string, string) {
	t.Helper()
	id, err := fage.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "keys.txt")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("# test\n"+id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, id.Recipient().String()
}

// encryptedTree writes a tree of a plain tenant and a ConfigPatch whose
// patch (and, with regex, more) sops encrypted for recipient.
func encryptedTree(t *testing.T, patch, recipient, regex string) (string, []byte) {
	t.Helper()
	enc, err := sopsfile.Encrypt([]byte(patch), []string{recipient}, regex)
	if err != nil {
		t.Fatal(err)
	}
	return writeTree(t, map[string]string{"tenant.yaml": encTenant, "patch.yaml": string(enc)}), enc
}

// sopsEnv leaves the user no age key but what the test gives.
func sopsEnv(t *testing.T) string {
	t.Helper()
	home := isolate(t)
	t.Setenv(sopsfile.EnvKeyFile, "")
	t.Setenv(sopsfile.EnvKey, "")
	return home
}

func noSecret(t *testing.T, what, s string) {
	t.Helper()
	if strings.Contains(s, encSecret) {
		t.Errorf("%s tells the secret:\n%s", what, s)
	}
}

// TestValidateEncrypted: validate decrypts with the user's key, from
// SOPS_AGE_KEY_FILE or sops's default file, reports problems inside an
// encrypted value at the committed line without the value, and without a
// key checks the rest and says so.
func TestValidateEncrypted(t *testing.T) {
	home := sopsEnv(t)
	keyFile, recipient := ageKeyFile(t, t.TempDir())
	dir, _ := encryptedTree(t, encPatch, recipient, "^patch$")

	code, out, errOut := runCLI(t, "validate", dir)
	if code != 0 || out != "" || errOut != "1 encrypted file was checked without their encrypted values: no age key (SOPS_AGE_KEY_FILE)\nvalid: 2 files, 1 tenants, 0 documents of other apiVersions skipped\n" {
		t.Errorf("without a key: code %d stdout %q stderr %q", code, out, errOut)
	}
	code, out, _ = runCLI(t, "validate", "-o", "json", dir)
	var res validateResult
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || res.Undecrypted != 1 {
		t.Errorf("-o json without a key: code %d %v %s", code, err, out)
	}

	t.Setenv(sopsfile.EnvKeyFile, keyFile)
	if code, out, errOut := runCLI(t, "validate", dir); code != 0 || out != "" || errOut != "valid: 2 files, 1 tenants, 0 documents of other apiVersions skipped\n" {
		t.Errorf("with SOPS_AGE_KEY_FILE: code %d stdout %q stderr %q", code, out, errOut)
	}

	// A problem inside an encrypted value.
	bad := strings.Replace(encPatch, "targetRole: worker", "targetRole: s3cr3t-role", 1)
	dir, enc := encryptedTree(t, bad, recipient, "^(patch|targetRole)$")
	code, out, errOut = runCLI(t, "validate", dir)
	line := 1 + strings.Count(string(enc[:strings.Index(string(enc), "targetRole: ENC[")]), "\n")
	want := filepath.Join(dir, "patch.yaml") + ":" + strconv.Itoa(line) + ":5: /spec/targetRole: must be one of \"controlplane\", \"worker\", not <encrypted>\n"
	if code != 1 || out != want || errOut != "invalid: 1 problems\n" {
		t.Errorf("a bad encrypted value: code %d stdout %q stderr %q, want %q", code, out, errOut, want)
	}
	noSecret(t, "validate", out+errOut)

	// A valid value encrypted where the server shows it: refused at its
	// line, as the server refuses it.
	shown, enc := encryptedTree(t, encPatch, recipient, "^(patch|targetRole)$")
	code, out, errOut = runCLI(t, "validate", shown)
	line = 1 + strings.Count(string(enc[:strings.Index(string(enc), "targetRole: ENC[")]), "\n")
	want = filepath.Join(shown, "patch.yaml") + ":" + strconv.Itoa(line) + ":1: /spec/targetRole: this value is encrypted, but the server shows it"
	if code != 1 || !strings.HasPrefix(out, want) || errOut != "invalid: 1 problems\n" {
		t.Errorf("an encrypted targetRole: code %d stdout %q stderr %q, want %q…", code, out, errOut, want)
	}
	noSecret(t, "validate", out+errOut)

	// The same file without the key: valid, but for the unchecked value.
	t.Setenv(sopsfile.EnvKeyFile, "")
	if code, _, errOut := runCLI(t, "validate", dir); code != 0 || !strings.HasPrefix(errOut, "1 encrypted file was checked without") {
		t.Errorf("a bad encrypted value, without the key: code %d stderr %q", code, errOut)
	}

	// sops's default key file, under the user's configuration directory.
	_, other := ageKeyFile(t, filepath.Join(home, "sops", "age"))
	dir, _ = encryptedTree(t, encPatch, other, "^patch$")
	if code, out, errOut := runCLI(t, "validate", dir); code != 0 || out != "" || strings.Contains(errOut, "encrypted file") {
		t.Errorf("with ~/.config/sops/age/keys.txt: code %d stdout %q stderr %q", code, out, errOut)
	}

	// A file for another key.
	dir, _ = encryptedTree(t, encPatch, recipient, "^patch$")
	code, out, _ = runCLI(t, "validate", dir)
	if want := filepath.Join(dir, "patch.yaml") + ": no age identity matches the file's recipients (recipients: " + recipient + ")\n"; code != 1 || out != want {
		t.Errorf("another key: code %d stdout %q, want %q", code, out, want)
	}

	t.Setenv(sopsfile.EnvKeyFile, filepath.Join(home, "nope.txt"))
	if code, _, errOut := runCLI(t, "validate", dir); code != 2 || !strings.Contains(errOut, "SOPS_AGE_KEY_FILE: age key file: open ") {
		t.Errorf("a missing SOPS_AGE_KEY_FILE: code %d stderr %q", code, errOut)
	}
}

// diffRig is a real server that has applied tenant alpha with the
// ConfigPatch registry, targeted at the control planes, whose patch it
// shows as applied.
func diffRig(t *testing.T, appliedPatch string) {
	t.Helper()
	srv := servertest.StartBackend(t, backend.Config{}, nil)
	t.Setenv(envServer, srv.URL())
	tenant := &schema.Tenant{APIVersion: schema.APIVersion, Kind: schema.KindTenant, Metadata: schema.ObjectMeta{Name: "alpha"},
		Spec: schema.TenantSpec{KubernetesVersion: "1.34.1", TalosVersion: "1.12.6", ControlPlaneEndpoint: "https://127.3.0.11:6443"}}
	patch := &schema.ConfigPatch{APIVersion: schema.APIVersion, Kind: schema.KindConfigPatch,
		Metadata: schema.ObjectMeta{Name: "registry", Labels: map[string]string{schema.LabelTenant: "alpha"}},
		Spec:     schema.ConfigPatchSpec{TargetRole: schema.RoleControlPlane, Patch: appliedPatch}}
	err := srv.Store().Update(func(tx store.Tx) error {
		if _, err := tx.PutObject(schema.KindTenant, "alpha", tenant); err != nil {
			return err
		}
		_, err := tx.PutObject(schema.KindConfigPatch, "alpha/registry", patch)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDiffEncrypted: diff, with the key and without, shows the changes
// of a file with an encrypted patch and never the patch's value.
func TestDiffEncrypted(t *testing.T) {
	sopsEnv(t)
	keyFile, recipient := ageKeyFile(t, t.TempDir())
	dir, _ := encryptedTree(t, encPatch, recipient, "^patch$")

	// The server shows the applied patch as <encrypted>: only targetRole
	// can be compared.
	diffRig(t, schema.EncryptedValue)
	for _, key := range []string{keyFile, ""} {
		t.Setenv(sopsfile.EnvKeyFile, key)
		code, out, errOut := runCLI(t, "diff", "--color", "never", dir)
		want := "tenant alpha\n~ ConfigPatch registry\n    - /targetRole: \"controlplane\"\n    + /targetRole: \"worker\"\n1 of 1 tenants differ: 0 to create, 1 to change, 0 to delete; machines +0 -0\n"
		note := ""
		if key == "" {
			note = "1 encrypted file was checked without their encrypted values: no age key (SOPS_AGE_KEY_FILE)\n"
		}
		if code != 1 || out != want || errOut != note {
			t.Errorf("key %q: code %d stdout %q stderr %q\nwant %q", key, code, out, errOut, want)
		}
		code, out, _ = runCLI(t, "diff", "-o", "json", dir)
		noSecret(t, "diff -o json", out)
		if code != 1 || strings.Contains(out, `"/patch"`) {
			t.Errorf("diff -o json: code %d\n%s", code, out)
		}
	}

	// The server applied a plain patch: the new one reads <encrypted>.
	diffRig(t, "machine: {}\n")
	t.Setenv(sopsfile.EnvKeyFile, keyFile)
	code, out, errOut := runCLI(t, "diff", "--color", "never", dir)
	noSecret(t, "diff", out+errOut)
	if code != 1 || !strings.Contains(out, "    - /patch: \"machine: {}\\n\"\n    + /patch: \"<encrypted>\"\n") {
		t.Errorf("code %d stdout %q stderr %q", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "diff", "--color", "never", "--rendered", dir)
	noSecret(t, "diff --rendered", out+errOut)
	if code != 1 || !strings.Contains(out, "+++ local/alpha/main.tf.json") {
		t.Errorf("--rendered with the key: code %d stdout %q stderr %q", code, out, errOut)
	}
	t.Setenv(sopsfile.EnvKeyFile, "")
	code, _, errOut = runCLI(t, "diff", "--color", "never", "--rendered", dir)
	if code != 1 || !strings.Contains(errOut, "tenant alpha: no rendered diff: it has encrypted values and there is no age key (SOPS_AGE_KEY_FILE)\n") {
		t.Errorf("--rendered without the key: code %d stderr %q", code, errOut)
	}
}
