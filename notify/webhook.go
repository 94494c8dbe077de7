package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// SignatureHeader carries the generic webhook's signature: "sha256=" and
// the hex HMAC-SHA256 of the body, keyed with the provider's secret.
const SignatureHeader = "X-Signature"

// webhookPayload is the generic webhook's body: the event's fields, how
// many events it stands for, and the rendered text.
type webhookPayload struct {
	Event
	Count int    `json:"count"`
	Text  string `json:"text"`
}

func webhookRequest(p *Provider, m *outgoing) (request, error) {
	r, err := jsonRequest(p.address, webhookPayload{Event: m.Event, Count: m.Count, Text: m.text})
	if err != nil {
		return r, err
	}
	if p.secret != "" {
		r.header.Set(SignatureHeader, Sign([]byte(p.secret), r.body))
	}
	return r, nil
}

// Sign returns the value of SignatureHeader for body: "sha256=" and the
// hex HMAC-SHA256 of body keyed with key. A receiver verifies with
// hmac.Equal on its own.
func Sign(key, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}
