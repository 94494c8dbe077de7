package webhook

import (
	"bytes"
	"crypto/hmac"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/backend/api"
)

// FuzzWebhook sends arbitrary hooks: a path, header lines ("Key: value"),
// a body, and whether to sign it correctly. The handler must never panic,
// must answer with one of its codes and a JSON body, and must never call
// Trigger unless the request carried a valid signature or token.
func FuzzWebhook(f *testing.F) {
	f.Add("/hooks/github", "X-GitHub-Event: push\nContent-Type: application/json", githubPushBody("refs/heads/main"), uint8(1))
	f.Add("/hooks/github", "X-GitHub-Event: push\nContent-Type: application/x-www-form-urlencoded", []byte("payload=%7B%22ref%22%3A%22refs%2Fheads%2Fmain%22%7D"), uint8(1))
	f.Add("/hooks/github", "X-Gitea-Event: push\nX-Hub-Signature-256: sha256=00", giteaPushBody("refs/heads/main"), uint8(0))
	f.Add("/hooks/github", "X-GitHub-Event: ping", []byte(`{"zen":"x"}`), uint8(1))
	f.Add("/hooks/github", "X-GitHub-Event: issues", []byte(`{}`), uint8(1))
	f.Add("/hooks/github", "X-GitHub-Event: push\nX-Hub-Signature: sha1=0000", githubPushBody("refs/heads/main"), uint8(0))
	f.Add("/hooks/gitlab", "X-Gitlab-Event: Push Hook", gitlabPushBody("refs/heads/main"), uint8(2))
	f.Add("/hooks/gitlab", "X-Gitlab-Event: Tag Push Hook\nX-Gitlab-Token: guess", gitlabPushBody("refs/tags/v1"), uint8(0))
	f.Add("/hooks/generic", "", []byte("anything"), uint8(1))
	f.Add("/hooks/generic", "", []byte(`{"repository":"git@github.com:acme/infra.git","ref":"refs/heads/main"}`), uint8(1))
	f.Add("/hooks/generic", "", []byte(`{"repository":`), uint8(1))
	f.Add("/hooks/generic", "X-Hub-Signature-256: SHA256=ABCDEF", []byte(nil), uint8(0))
	f.Add("/hooks/generic", "X-Hub-Signature-256: sha256=0000000000000000000000000000000000000000000000000000000000000000", []byte("go"), uint8(0))
	f.Add("/hooks/github", "X-GitHub-Event: push\nX-Hub-Signature-256: sha256=00814e98027aea2cd4c91cffa6f2a2295dad5d1ce77714b0d31f5d2c41cb1133", githubPushBody("refs/heads/main"), uint8(0))
	f.Add("/hooks/nope", "", []byte(nil), uint8(3))
	f.Add("/github", "X-GitHub-Event: push", []byte(`{"ref":7}`), uint8(7))

	allowed := map[int]bool{200: true, 202: true, 400: true, 401: true, 404: true, 405: true, 413: true, 503: true}
	methods := []string{http.MethodPost, http.MethodGet, http.MethodPut}
	f.Fuzz(func(t *testing.T, path, headers string, body []byte, mode uint8) {
		fired := 0
		trig := TriggerFunc(func(repoURL, ref string) bool {
			fired++
			return NormalizeRepoURL(repoURL) != "github.com/acme/other"
		})
		secret := testSecret
		if mode&8 != 0 {
			secret = nil
		}
		h, err := New(Options{Secret: secret, Trigger: trig})
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		r.Method = methods[int(mode>>4)%len(methods)]
		r.URL.Path = path
		for line := range strings.Lines(headers) {
			k, v, ok := strings.Cut(strings.TrimRight(line, "\r\n"), ":")
			if ok && k != "" {
				r.Header.Add(k, strings.TrimSpace(v))
			}
		}
		if mode&1 != 0 {
			r.Header.Set(SignatureHeader, Sign(testSecret, body))
		}
		if mode&2 != 0 {
			r.Header.Set(TokenHeader, string(testSecret))
		}
		if mode&4 != 0 {
			r.ContentLength = -1
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)

		if !allowed[w.Code] {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		if w.Code >= 400 {
			var e api.Error
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Code != w.Code || e.Message == "" {
				t.Fatalf("status %d with body %q", w.Code, w.Body)
			}
		} else {
			var a Answer
			if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil || a.Status == "" {
				t.Fatalf("status %d with body %q", w.Code, w.Body)
			}
		}
		if fired == 0 {
			return
		}
		if len(secret) == 0 || r.Method != http.MethodPost || len(body) > MaxBodyBytes {
			t.Fatalf("triggered: secret %q, method %s, body of %d bytes", secret, r.Method, len(body))
		}
		switch hookName(path) {
		case HookGitHub, HookGeneric:
			vals := r.Header.Values(SignatureHeader)
			if len(vals) != 1 {
				t.Fatalf("triggered with signature headers %q", vals)
			}
			hexSum, ok := strings.CutPrefix(strings.TrimSpace(vals[0]), "sha256=")
			got, err := hex.DecodeString(hexSum)
			if !ok || err != nil || !hmac.Equal(got, mac(testSecret, body)) {
				t.Fatalf("triggered with signature %q for body %q", vals[0], body)
			}
		case HookGitLab:
			if vals := r.Header.Values(TokenHeader); len(vals) != 1 || vals[0] != string(testSecret) {
				t.Fatalf("triggered with token %q", vals)
			}
		default:
			t.Fatalf("triggered on path %q", path)
		}
	})
}
