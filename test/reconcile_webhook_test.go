package test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// e2eSign computes X-Hub-Signature-256 for body the way GitHub does.
func e2eSign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// TestReconcileWebhook runs the server with an hour between polls: a push
// reaches it only through a signed POST to /hooks/generic. Bad signatures
// get 401 and trigger nothing; a hook for another repository triggers
// nothing; a good one makes the commit apply within seconds.
func TestReconcileWebhook(t *testing.T) {
	const secret = "e2e-webhook-secret-0123456789"
	e := newE2E(t, e2eOptions{
		args: []string{"--poll-interval", "1h"},
		env:  []string{"REZUSCLOUD_WEBHOOK_SECRET=" + secret},
	})
	s := e.srv
	polls := s.status().Source.Polls
	runs := s.tofuRuns()

	e.setCount("production", "workers", 3)
	sha := e.push("Scale production workers to 3")

	body, err := json.Marshal(map[string]string{"repository": e.repo, "ref": "refs/heads/main"})
	if err != nil {
		t.Fatal(err)
	}
	hook := func(sig string, body []byte) (int, []byte) {
		h := http.Header{"Content-Type": {"application/json"}}
		if sig != "" {
			h.Set("X-Hub-Signature-256", sig)
		}
		return s.Request(http.MethodPost, "/hooks/generic", body, h)
	}

	for name, sig := range map[string]string{
		"wrong secret":   e2eSign("not-the-secret", body),
		"other body":     e2eSign(secret, append([]byte(" "), body...)),
		"no signature":   "",
		"not hex":        "sha256=zz",
		"sha1 algorithm": "sha1=" + e2eSign(secret, body)[len("sha256="):],
	} {
		if code, answer := hook(sig, body); code != http.StatusUnauthorized {
			t.Errorf("%s: %d %s, want 401", name, code, answer)
		}
	}
	// A valid hook for another repository is acknowledged and ignored.
	other, _ := json.Marshal(map[string]string{"repository": "git://127.0.0.1:1/other.git", "ref": "refs/heads/main"})
	code, answer := hook(e2eSign(secret, other), other)
	var ans struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(answer, &ans); err != nil || code != http.StatusAccepted || ans.Status != "ignored" {
		t.Errorf("hook for another repository: %d %s, want 202 ignored", code, answer)
	}

	// Nothing may have polled. The source would poll within milliseconds
	// of a trigger; a second is a wide margin on a busy machine.
	time.Sleep(time.Second)
	st := s.status()
	if st.Source.Polls != polls || st.Reconciler.LastCommit != e.first || *st.Reconciler.TofuRuns != runs {
		t.Fatalf("after refused and ignored hooks: polls %d (were %d), last commit %s, tofu runs %d (were %d): want nothing to have happened",
			st.Source.Polls, polls, st.Reconciler.LastCommit, *st.Reconciler.TofuRuns, runs)
	}
	if _, ok := s.Commit(sha); ok {
		t.Fatalf("commit %s is known without a valid hook", sha[:12])
	}

	start := time.Now()
	code, answer = hook(e2eSign(secret, body), body)
	if err := json.Unmarshal(answer, &ans); err != nil || code != http.StatusAccepted || ans.Status != "accepted" {
		t.Fatalf("signed hook: %d %s, want 202 accepted", code, answer)
	}
	c := s.waitApplied(sha)
	took := time.Since(start)
	t.Logf("signed hook to applied commit: %v", took.Round(time.Millisecond))
	if r := e2eResult(t, c, "production"); r.Plan != (schema.PlanSummary{Add: 1, Machines: schema.PlanCounts{Add: 1}}) {
		t.Errorf("production plan %s, want +1", r.Plan)
	}
	if took > 30*time.Second {
		t.Errorf("the hooked commit took %v to apply, want it within seconds", took)
	}
	if got := s.status().Source.Polls; got <= polls {
		t.Errorf("source polls %d after the hook, were %d", got, polls)
	}
}
