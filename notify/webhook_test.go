package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
)

// TestWebhookSignature: the generic webhook posts the event as JSON with
// its count and text, signed with HMAC-SHA256 of the body under the key
// in secretFile; the receiver's own check of the signature passes, and
// fails for a changed body.
func TestWebhookSignature(t *testing.T) {
	rcv := newReceiver(t)
	path := writeFiles(t, map[string]string{"hmac-key": "hm4c-k3y-for-the-test\n", "notifications.yaml": `
providers:
  - {name: hook, type: webhook, address: "` + rcv.srv.URL + `/rezus", secretFile: hmac-key}
alerts:
  - {name: all, providers: [hook]}
`})
	h := start(t, path, true)
	h.n.Notify(event(ReconcileFailed, "shop"))
	got := rcv.next(t)
	if got.Method != "POST" || got.Path != "/rezus" || got.Header.Get("Content-Type") != "application/json" {
		t.Errorf("request %s %s, content type %q", got.Method, got.Path, got.Header.Get("Content-Type"))
	}
	sig, ok := strings.CutPrefix(got.Header.Get(SignatureHeader), "sha256=")
	if !ok {
		t.Fatalf("%s = %q, want sha256=<hex>", SignatureHeader, got.Header.Get(SignatureHeader))
	}
	verify := func(body []byte) bool {
		want, err := hex.DecodeString(sig)
		mac := hmac.New(sha256.New, []byte("hm4c-k3y-for-the-test"))
		mac.Write(body)
		return err == nil && hmac.Equal(mac.Sum(nil), want)
	}
	if !verify(got.Body) {
		t.Error("the signature does not verify")
	}
	if verify(append(got.Body, ' ')) {
		t.Error("the signature verifies a changed body")
	}
	var p struct {
		Event
		Count int    `json:"count"`
		Text  string `json:"text"`
	}
	if err := json.Unmarshal(got.Body, &p); err != nil {
		t.Fatal(err)
	}
	if p.Reason != ReconcileFailed || p.Severity != SeverityError || p.Tenant != "shop" || p.Count != 1 ||
		p.Commit.SHA != "0123456789abcdef0123456789abcdef01234567" || p.URL != "https://rezus.example.com/tenants/shop" || p.Labels["env"] != "prod" {
		t.Errorf("payload %s", got.Body)
	}
	for _, want := range []string{"ReconcileFailed in tenant shop", "tofu apply failed", "Commit 0123456789ab: raise the worker count", "https://rezus.example.com/tenants/shop"} {
		if !strings.Contains(p.Text, want) {
			t.Errorf("text %q lacks %q", p.Text, want)
		}
	}
	h.waitMetric(t, "hook", resultSent, 1)
}

// TestWebhookUnsigned: without secretFile no signature header is sent.
func TestWebhookUnsigned(t *testing.T) {
	rcv := newReceiver(t)
	path := writeFiles(t, map[string]string{"notifications.yaml": `
providers: [{name: hook, type: webhook, address: "` + rcv.srv.URL + `"}]
alerts: [{name: all, providers: [hook]}]
`})
	h := start(t, path, true)
	h.n.Notify(event(Drifted, "shop"))
	if got := rcv.next(t); got.Header.Get(SignatureHeader) != "" {
		t.Errorf("unsigned webhook sent %s: %q", SignatureHeader, got.Header.Get(SignatureHeader))
	}
}
