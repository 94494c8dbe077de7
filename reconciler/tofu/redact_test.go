package tofu

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"strings"
	"testing"
)

// secretText is a value shaped as a Talos secrets bundle is, with a key
// of its own: a PEM key, its base64, a token and a 32-byte secret.
type secretText struct {
	keyPEM, keyBase64, token, secret32 string
}

func newSecretText(t *testing.T) secretText {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	p := string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return secretText{keyPEM: p, keyBase64: base64.StdEncoding.EncodeToString([]byte(p)),
		token: "ko2m88.5akwd6kihwh6kyfp", secret32: base64.StdEncoding.EncodeToString(b)}
}

func (s secretText) yaml() string {
	return "certs:\n    key: " + s.keyBase64 + "\nsecrets:\n    bootstraptoken: " + s.token + "\n    secretbox: " + s.secret32 + "\n"
}

// leaks names the parts of s that text holds.
func (s secretText) leaks(text string) []string {
	var out []string
	for what, v := range map[string]string{"base64 key": s.keyBase64, "token": s.token, "secret": s.secret32} {
		if strings.Contains(text, v) {
			out = append(out, what)
		}
	}
	for _, l := range strings.Split(s.keyPEM, "\n")[1:3] {
		if strings.Contains(text, l) {
			out = append(out, "a line of the PEM key")
		}
	}
	return out
}

// The output and the errors of a run never show a secret: not when a
// destroy plan prints a terraform_data whose output mirrors a sensitive
// input (as tofu 1.10 does), not when a failing check quotes one in its
// error, and not a value the caller names in Creds.Secrets that has no
// form a redaction knows.
func TestRunOutputAndErrorsAreRedacted(t *testing.T) {
	r, dir := approveRig(t)
	ctx := context.Background()
	sec := newSecretText(t)
	vars, err := json.Marshal(map[string]string{"bundle": sec.yaml()})
	if err != nil {
		t.Fatal(err)
	}
	writeTF(t, dir, `
variable "bundle" {
  type      = string
  sensitive = true
}
resource "terraform_data" "secrets" {
  input = var.bundle
  lifecycle { ignore_changes = [input] }
}
resource "terraform_data" "plain" { input = "correct-horse-battery-staple" }
`)
	creds := Creds{Secrets: []string{"correct-horse-battery-staple"}}
	res, err := r.Apply(ctx, dir, []byte("v1"), vars, creds)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if strings.Contains(res.Output, "correct-horse-battery-staple") {
		t.Errorf("the apply's output shows a value named in Creds.Secrets")
	}

	res, err = r.Destroy(ctx, dir, []byte("v1"), vars, creds)
	if err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if !strings.Contains(res.Output, "terraform_data.secrets will be destroyed") {
		t.Fatalf("the destroy's output does not show its plan:\n%s", res.Output)
	}
	if l := sec.leaks(res.Output); len(l) > 0 {
		t.Errorf("the destroy's output shows the %s", strings.Join(l, ", "))
	}

	writeTF(t, dir, `
variable "ok" { default = false }
resource "terraform_data" "checked" {
  input = "x"
  lifecycle {
    precondition {
      condition     = var.ok
      error_message = <<-EOT
        the key
        `+strings.ReplaceAll(sec.keyPEM, "\n", "\n        ")+`is refused, and so are `+sec.token+` and `+sec.secret32+`
      EOT
    }
  }
}
`)
	res, err = r.Apply(ctx, dir, []byte("v1"), nil, creds)
	if err == nil || !strings.Contains(err.Error(), "Resource precondition failed") {
		t.Fatalf("apply of a failing check: %v, want the precondition's error", err)
	}
	if l := sec.leaks(err.Error()); len(l) > 0 {
		t.Errorf("the error shows the %s", strings.Join(l, ", "))
	}
	if l := sec.leaks(res.Output); len(l) > 0 {
		t.Errorf("the failed apply's output shows the %s", strings.Join(l, ", "))
	}
}
