package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
)

// writeAgeKey writes a new age identity to a key file in dir, as
// age-keygen writes one, and returns the file.
func writeAgeKey(t *testing.T, dir, name string) string {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	body := "# public key: " + id.Recipient().String() + "\n" + id.String() + "\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSOPSKeyFileAtStartup: a key file that is missing, unreadable or
// holds no identity stops the server at start-up with an error that names
// the setting and the file; a good one is taken from the flag, the
// environment or the config file.
func TestSOPSKeyFileAtStartup(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.txt")
	os.WriteFile(empty, []byte("# no key here\n"), 0o600)
	for name, path := range map[string]string{
		"missing":     filepath.Join(dir, "missing.txt"),
		"unreadable":  dir, // a directory
		"no identity": empty,
	} {
		_, err := parseServe(t, nil, "--sops-age-key-file", path)
		if err == nil || !strings.Contains(err.Error(), "--sops-age-key-file") || !strings.Contains(err.Error(), path) {
			t.Errorf("%s key file: %v, want an error naming --sops-age-key-file and %s", name, err, path)
		}
	}

	key := writeAgeKey(t, dir, "keys.txt")
	if _, err := parseServe(t, nil, "--sops-age-key-file", key); err != nil {
		t.Fatalf("flag: %v", err)
	}
	if _, err := parseServe(t, map[string]string{"REZUSCLOUD_SOPS_AGE_KEY_FILE": empty}); err == nil {
		t.Error("REZUSCLOUD_SOPS_AGE_KEY_FILE is not read")
	}
	cfg := filepath.Join(dir, "rezuscloud.yaml")
	os.WriteFile(cfg, []byte("sops-age-key-file: "+empty+"\n"), 0o600)
	if _, err := parseServe(t, nil, "--config", cfg); err == nil {
		t.Error("the config file's sops-age-key-file is not read")
	}
}

// The key of the input hashes comes from the key file: the same file
// gives the same key, another file another key.
func TestSOPSHashKey(t *testing.T) {
	dir := t.TempDir()
	a, b := writeAgeKey(t, dir, "a.txt"), writeAgeKey(t, dir, "b.txt")
	_, ka, err := sopsKeys(a)
	if err != nil {
		t.Fatal(err)
	}
	_, ka2, _ := sopsKeys(a)
	_, kb, _ := sopsKeys(b)
	if len(ka) != 32 || !bytes.Equal(ka, ka2) || bytes.Equal(ka, kb) {
		t.Errorf("keys %x, %x, %x: want equal for one file, different for another", ka, ka2, kb)
	}
	if d, k, err := sopsKeys(""); d != nil || k != nil || err != nil {
		t.Errorf("no file: %v %x %v", d, k, err)
	}
}

// A server with a SOPS key file and no state encryption does not start:
// decrypted values would rest in clear in the tenants' TF state.
func TestSOPSNeedsStateEncryption(t *testing.T) {
	key := writeAgeKey(t, t.TempDir(), "keys.txt")
	p := &reconcilerPart{f: &serveFlags{sopsAgeKeyFile: key}, log: slog.New(slog.DiscardHandler)}
	if err := p.openSOPS(); err == nil || !strings.Contains(err.Error(), envStatePassphrase) || p.decrypt == nil {
		t.Errorf("a key file without state encryption: %v, want an error that names %s", err, envStatePassphrase)
	}
	p = &reconcilerPart{f: &serveFlags{sopsAgeKeyFile: key}, log: slog.New(slog.DiscardHandler), encrypt: true}
	if err := p.openSOPS(); err != nil || p.decrypt == nil {
		t.Errorf("a key file with state encryption: %v", err)
	}
}
