package talos

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/schema"
)

func TestGenerateSecretsRoundTrip(t *testing.T) {
	b := testSecrets(t)
	bundle, err := ParseSecrets(b)
	if err != nil {
		t.Fatalf("ParseSecrets: %v", err)
	}
	again, err := encodeSecrets(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, again) {
		t.Errorf("re-encoding a parsed bundle changed it:\n%s\nvs\n%s", b, again)
	}
	// The format of `talosctl gen secrets`.
	for _, key := range []string{"cluster:\n    id: ", "secrets:\n    bootstraptoken: ", "    secretboxencryptionsecret: ", "trustdinfo:\n    token: ", "certs:\n    etcd:\n        crt: ", "    k8sserviceaccount:\n        key: ", "    os:\n        crt: "} {
		if !bytes.Contains(b, []byte(key)) {
			t.Errorf("bundle lacks %q", key)
		}
	}

	k8sPEM, osPEM, err := CACertificates(b)
	if err != nil {
		t.Fatalf("CACertificates: %v", err)
	}
	k8s := parsePEMCert(t, "kubernetes CA", k8sPEM)
	os := parsePEMCert(t, "OS CA", osPEM)
	if !k8s.IsCA || !os.IsCA {
		t.Errorf("IsCA: kubernetes %v, os %v", k8s.IsCA, os.IsCA)
	}
	if got := k8s.Subject.Organization; len(got) != 1 || got[0] != "kubernetes" {
		t.Errorf("kubernetes CA organization = %v", got)
	}
	if got := os.Subject.Organization; len(got) != 1 || got[0] != "talos" {
		t.Errorf("OS CA organization = %v", got)
	}
	if !k8s.NotBefore.Equal(testNow) || !os.NotBefore.Equal(testNow) {
		t.Errorf("NotBefore = %s, %s; want the clock given, %s", k8s.NotBefore, os.NotBefore, testNow)
	}
}

func TestCACertificatesStable(t *testing.T) {
	b := testSecrets(t)
	k1, o1, err := CACertificates(b)
	if err != nil {
		t.Fatal(err)
	}
	k2, o2, err := CACertificates(bytes.Clone(b))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(k1, k2) || !bytes.Equal(o1, o2) {
		t.Error("the same bundle gave different CAs")
	}
	if bytes.Equal(k1, o1) {
		t.Error("kubernetes and OS CA are the same certificate")
	}
}

func TestGenerateSecretsDiffer(t *testing.T) {
	a := testSecrets(t)
	b, err := GenerateSecrets("v1.12.6", testNow, "")
	if err != nil {
		t.Fatal(err)
	}
	ba, err := ParseSecrets(a)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := ParseSecrets(b)
	if err != nil {
		t.Fatal(err)
	}
	same := map[string]bool{
		"cluster id":        ba.Cluster.ID == bb.Cluster.ID,
		"cluster secret":    ba.Cluster.Secret == bb.Cluster.Secret,
		"bootstrap token":   ba.Secrets.BootstrapToken == bb.Secrets.BootstrapToken,
		"secretbox secret":  ba.Secrets.SecretboxEncryptionSecret == bb.Secrets.SecretboxEncryptionSecret,
		"trustd token":      ba.TrustdInfo.Token == bb.TrustdInfo.Token,
		"kubernetes CA":     bytes.Equal(ba.Certs.K8s.Crt, bb.Certs.K8s.Crt),
		"kubernetes CA key": bytes.Equal(ba.Certs.K8s.Key, bb.Certs.K8s.Key),
		"OS CA key":         bytes.Equal(ba.Certs.OS.Key, bb.Certs.OS.Key),
		"etcd CA key":       bytes.Equal(ba.Certs.Etcd.Key, bb.Certs.Etcd.Key),
		"service account":   bytes.Equal(ba.Certs.K8sServiceAccount.Key, bb.Certs.K8sServiceAccount.Key),
	}
	for what, s := range same {
		if s {
			t.Errorf("two bundles share the %s", what)
		}
	}
}

func TestGenerateSecretsVersions(t *testing.T) {
	for _, tc := range []struct {
		version, want string
	}{
		{"", "talos version: empty"},
		{"banana", `talos version "banana": not of the form 1.12.6`},
		{"1", `talos version "1": not of the form 1.12.6`},
		{"1.15.0", `talos version "1.15.0": newer than v1.14`},
		{"v2.0.0", `talos version "v2.0.0": newer than v1.14`},
	} {
		_, err := GenerateSecrets(tc.version, testNow, "")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("GenerateSecrets(%q) = %v, want an error containing %q", tc.version, err, tc.want)
		}
	}
}

// TestGenerateSecretsServiceAccountKey: the service-account key is the
// kind asked for, or the one Talos makes for the version (RSA since 1.7,
// ECDSA before); RSA of a version before 1.7, and an unknown kind, are
// errors that say so.
func TestGenerateSecretsServiceAccountKey(t *testing.T) {
	for _, tc := range []struct {
		version, ask, want string
	}{
		{"1.12.6", "", schema.ServiceAccountKeyRSA},
		{"1.12.6", schema.ServiceAccountKeyECDSA, schema.ServiceAccountKeyECDSA},
		{"1.7.0", schema.ServiceAccountKeyRSA, schema.ServiceAccountKeyRSA},
		{"1.6.7", "", schema.ServiceAccountKeyECDSA},
		{"1.6.7", schema.ServiceAccountKeyECDSA, schema.ServiceAccountKeyECDSA},
	} {
		b, err := GenerateSecrets(tc.version, testNow, tc.ask)
		if err != nil {
			t.Errorf("GenerateSecrets(%s, %q): %v", tc.version, tc.ask, err)
			continue
		}
		if got, err := ServiceAccountKeyOf(b); err != nil || got != tc.want {
			t.Errorf("GenerateSecrets(%s, %q): a key of kind %q (%v), want %q", tc.version, tc.ask, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ version, ask, want string }{
		{"1.6.7", schema.ServiceAccountKeyRSA, "an RSA service-account key needs Talos 1.7 or newer, not 1.6.7"},
		{"1.12.6", "ed25519", `service-account key "ed25519": want rsa or ecdsa`},
	} {
		if _, err := GenerateSecrets(tc.version, testNow, tc.ask); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("GenerateSecrets(%s, %q) = %v, want an error containing %q", tc.version, tc.ask, err, tc.want)
		}
	}
	if _, err := ServiceAccountKeyOf([]byte("not: a bundle")); err == nil {
		t.Error("ServiceAccountKeyOf of no bundle: no error")
	}
}

func TestParseSecretsRejects(t *testing.T) {
	good := string(testSecrets(t))
	dropSection := func(section string) string {
		var out []string
		skipping := false
		for _, line := range strings.Split(good, "\n") {
			if strings.HasPrefix(line, section+":") {
				skipping = true
				continue
			}
			if skipping && strings.HasPrefix(line, "        ") {
				continue
			}
			skipping = false
			out = append(out, line)
		}
		return strings.Join(out, "\n")
	}
	replaceValue := func(key, value string) string {
		lines := strings.Split(good, "\n")
		for i, line := range lines {
			if strings.HasPrefix(strings.TrimSpace(line), key+":") {
				indent := line[:len(line)-len(strings.TrimLeft(line, " "))]
				lines[i] = indent + key + ": " + value
				break
			}
		}
		return strings.Join(lines, "\n")
	}
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", "secrets bundle: empty"},
		{"blank", " \n\t\n", "secrets bundle: empty"},
		{"not yaml", "cluster: [", "secrets bundle: "},
		{"a list", "- a\n- b\n", "secrets bundle: "},
		{"unknown field", good + "extra: 1\n", "field extra not found"},
		{"no OS CA", dropSection("    os"), "certs.os is required"},
		{"no cluster", strings.Replace(good, "cluster:", "clusterx:", 1), "field clusterx not found"},
		{"bad token", replaceValue("token", `""`), "trustdinfo.token is required"},
		{"bad crt", replaceValue("crt", "bm90IGEgY2VydA=="), "certs.etcd is invalid"},
		{"bad base64", replaceValue("crt", "!!!"), "secrets bundle: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseSecrets([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseSecrets = %v, want an error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

// SecretValues names every value of the bundle: each value of its YAML,
// and each line of the PEM body of each certificate and key but the short
// ones.
func TestSecretValues(t *testing.T) {
	b := testSecrets(t)
	got := map[string]bool{}
	for _, v := range SecretValues(b) {
		got[v] = true
	}
	bundle, err := ParseSecrets(b)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, line := range strings.Split(string(b), "\n") {
		if _, v, ok := strings.Cut(line, ": "); ok {
			want = append(want, v)
		}
	}
	for _, p := range [][]byte{bundle.Certs.K8s.Key, bundle.Certs.OS.Key, bundle.Certs.Etcd.Crt, bundle.Certs.K8sServiceAccount.Key} {
		lines := strings.Split(strings.TrimSpace(string(p)), "\n")
		for _, l := range lines[1 : len(lines)-1] {
			if len(l) >= 16 { // the short last line of a body is left out
				want = append(want, l)
			}
		}
	}
	if len(want) < 20 {
		t.Fatalf("found only %d values in the bundle", len(want))
	}
	for _, v := range want {
		if !got[v] {
			t.Errorf("SecretValues lacks a value of %d bytes (%.12s…)", len(v), v)
		}
	}
	if v := SecretValues([]byte("not: [a bundle")); v != nil {
		t.Errorf("SecretValues of a broken bundle = %d values, want none", len(v))
	}
}
