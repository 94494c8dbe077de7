package test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/sim"
	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/notify"
	"github.com/rezuscloud/rezuscloud/schema"
)

// The notifications end to end: the real server with --notifications
// sends real events of its tenants to receivers on loopback: a generic
// webhook whose HMAC signature the receiver checks, and a Slack incoming
// webhook that refuses its first message with a 500.

// notifyHookKey is the generic webhook's HMAC key; notifySlackToken the
// secret part of the Slack webhook's URL.
const (
	notifyHookKey    = "e2e-hmac-key-0123456789abcdef"
	notifySlackToken = "T0E2E/B0E2E/s3cr3tSlackT0ken"
)

// hookMessage is what the generic webhook receives.
type hookMessage struct {
	notify.Event
	Count int    `json:"count"`
	Text  string `json:"text"`
}

// notifyReceiver is the receivers of one test.
type notifyReceiver struct {
	t   *testing.T
	srv *httptest.Server

	mu        sync.Mutex
	hook      []hookMessage
	badSigned int
	// slack are the texts Slack took; slackTries every text it got, the
	// refused first one too.
	slack, slackTries []string
}

func newNotifyReceiver(t *testing.T) *notifyReceiver {
	r := &notifyReceiver{t: t}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hook", func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		mac := hmac.New(sha256.New, []byte(notifyHookKey))
		mac.Write(body)
		want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
		r.mu.Lock()
		defer r.mu.Unlock()
		if !hmac.Equal([]byte(req.Header.Get(notify.SignatureHeader)), []byte(want)) {
			r.badSigned++
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var m hookMessage
		if err := json.Unmarshal(body, &m); err != nil {
			r.t.Errorf("webhook body %s: %v", body, err)
		}
		r.hook = append(r.hook, m)
	})
	mux.HandleFunc("POST /services/"+notifySlackToken, func(w http.ResponseWriter, req *http.Request) {
		var m struct {
			Text string `json:"text"`
		}
		if err := json.NewDecoder(req.Body).Decode(&m); err != nil {
			r.t.Errorf("slack body: %v", err)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.slackTries = append(r.slackTries, m.Text)
		if len(r.slackTries) == 1 {
			http.Error(w, "the first message fails", http.StatusInternalServerError)
			return
		}
		r.slack = append(r.slack, m.Text)
		io.WriteString(w, "ok")
	})
	r.srv = httptest.NewServer(mux)
	t.Cleanup(r.srv.Close)
	return r
}

// config writes the notifications config and its secret files into dir:
// every event to the webhook, errors to Slack, repeats within a minute
// coalesced.
func (r *notifyReceiver) config(dir string) string {
	r.t.Helper()
	files := map[string]string{
		"hook.key":  notifyHookKey + "\n",
		"slack.url": r.srv.URL + "/services/" + notifySlackToken + "\n",
		"notifications.yaml": `coalesceWindow: 1m
providers:
  - {name: hook, type: webhook, address: "` + r.srv.URL + `/hook", secretFile: hook.key}
  - {name: chat, type: slack, addressFile: slack.url}
alerts:
  - {name: everything, providers: [hook]}
  - {name: errors, providers: [chat], severities: [error], tenants: {selector: "environment in (production, staging)"}}
`,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			r.t.Fatal(err)
		}
	}
	return filepath.Join(dir, "notifications.yaml")
}

// hooked returns the webhook's messages of reason about tenant.
func (r *notifyReceiver) hooked(reason notify.Reason, tenant string) []hookMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []hookMessage
	for _, m := range r.hook {
		if m.Reason == reason && m.Tenant == tenant {
			out = append(out, m)
		}
	}
	return out
}

// slackSaid counts the texts Slack took that start with title.
func (r *notifyReceiver) slackSaid(title string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.slack {
		if strings.HasPrefix(s, title) {
			n++
		}
	}
	return n
}

// waitHook waits until the webhook got a message of reason about tenant,
// and returns the first.
func (r *notifyReceiver) waitHook(e *e2e, reason notify.Reason, tenant string) hookMessage {
	e.t.Helper()
	e.srv.WaitFor(fmt.Sprintf("the webhook to get %s of %q", reason, tenant), func() bool { return len(r.hooked(reason, tenant)) > 0 })
	return r.hooked(reason, tenant)[0]
}

// TestNotificationsE2E: a staging machine deleted behind tofu's back
// (Drifted), a scale-up of staging that the sim cloud fails until it is
// told to stop (ReconcileFailed, its repeats coalesced with a count, then
// Recovered and DriftResolved), an invalid commit (CommitRefused), and an
// upgrade of production whose worker does not come back (RolloutStarted,
// RolloutFailed with the machine) reach the receivers once each, signed,
// naming the tenant, the commit and its page; Slack's 500 makes it get
// the message again later; no Stalled is sent for the rollout, and no
// secret of the providers reaches the server's log.
func TestNotificationsE2E(t *testing.T) {
	rcv := newNotifyReceiver(t)
	cfg := rcv.config(t.TempDir())
	e := newE2E(t, e2eOptions{args: planeArgs("--notifications", cfg, "--external-url", "https://rezus.example",
		"--retry-base", "1s", "--retry-max", "2s", "--drift-interval", "2s")})
	s := e.srv

	// Drift: a staging worker deleted in the sim cloud.
	st, err := sim.Open(filepath.Clean(e.data) + "-sim")
	if err != nil {
		t.Fatal(err)
	}
	recs, err := st.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if rec.Tenant == "staging" && rec.NodeGroup == "workers" {
			if err := st.Delete(rec.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	drifted := rcv.waitHook(e, notify.Drifted, "staging")
	if drifted.Severity != notify.SeverityError || drifted.Commit.SHA != e.first || drifted.Commit.Subject != "Example tenants production and staging" ||
		drifted.URL != "https://rezus.example/tenants/staging" || drifted.Labels["environment"] != "staging" || !strings.Contains(drifted.Message, "was deleted") {
		t.Fatalf("Drifted: %+v", drifted)
	}
	s.WaitFor("Slack to take Drifted after its 500", func() bool { return rcv.slackSaid("Drifted in tenant staging") == 1 })

	// A tofu failure: the sim cloud fails every machine change until it
	// is told to stop, after three failed runs.
	if err := st.FailNext(1000); err != nil {
		t.Fatal(err)
	}
	e.setCount("staging", "workers", 2)
	scale := e.push("Scale staging workers to 2")
	s.WaitFor("three failed runs of staging", func() bool {
		tn := planeTenant(t, e, "staging")
		return tn.Status.Retry != nil && tn.Status.Retry.Attempts >= 3
	})
	if err := st.FailNext(0); err != nil {
		t.Fatal(err)
	}
	recovered := rcv.waitHook(e, notify.Recovered, "staging")
	if recovered.Commit.SHA != scale || recovered.Severity != notify.SeverityInfo {
		t.Fatalf("Recovered: %+v", recovered)
	}
	failed := rcv.hooked(notify.ReconcileFailed, "staging")
	if len(failed) != 2 || failed[0].Count != 1 || failed[1].Count < 2 {
		t.Fatalf("ReconcileFailed messages %+v: want the first at once and the repeats in one message with their count", counts(failed))
	}
	for _, m := range failed {
		if m.Commit != (notify.Commit{SHA: scale, Subject: "Scale staging workers to 2"}) || m.URL != "https://rezus.example/tenants/staging" ||
			!strings.Contains(m.Message, "TofuFailed") || !strings.Contains(m.Message, sim.FaultsFile) {
			t.Fatalf("ReconcileFailed: %+v", m)
		}
	}
	if !strings.HasPrefix(failed[1].Text, fmt.Sprintf("ReconcileFailed in tenant staging (%d times)", failed[1].Count)) {
		t.Errorf("the coalesced message's text: %q", failed[1].Text)
	}
	rcv.waitHook(e, notify.DriftResolved, "staging")

	// A refused commit: a manifest that does not validate.
	path := e2eManifests + "/staging/tenant.yaml"
	good := e.read(path)
	e.edit(path, `talosVersion: "1.12.6"`, `talosVersion: "one"`)
	bad := e.push("Staging on Talos one")
	refused := rcv.waitHook(e, notify.CommitRefused, "")
	if refused.Commit != (notify.Commit{SHA: bad, Subject: "Staging on Talos one"}) || refused.URL != "https://rezus.example/commits/"+bad ||
		!strings.Contains(refused.Message, "invalid") || !strings.Contains(refused.Message, "staging/tenant.yaml") {
		t.Fatalf("CommitRefused: %+v", refused)
	}
	e.work.Write(path, good)
	e.waitAppliedPush("Staging back on Talos 1.12.6")

	// A rollout whose worker does not come back.
	planeWaitReady(t, e, "production")
	var worker schema.Machine
	for _, m := range s.tenantMachines("production") {
		if m.Spec.TFAddress == "rezussim_machine.ng_workers[0]" {
			worker = m
		}
	}
	if err := talosnode.WriteFaults(e.data+"-sim", talosnode.Faults{worker.Metadata.Name: {NoUpgradeReturn: true}}); err != nil {
		t.Fatal(err)
	}
	bump := planeBump(e, "1.12.7")
	stopped := rcv.waitHook(e, notify.RolloutFailed, "production")
	if stopped.Machine != worker.Spec.Hostname || !strings.Contains(stopped.Message, worker.Spec.TFAddress) || stopped.Commit.SHA != bump || stopped.Severity != notify.SeverityError {
		t.Fatalf("RolloutFailed: %+v", stopped)
	}
	if started := rcv.hooked(notify.RolloutStarted, "production"); len(started) == 0 || started[0].Commit.SHA != bump {
		t.Fatalf("RolloutStarted: %+v", started)
	}
	s.WaitFor("Slack to take RolloutFailed", func() bool { return rcv.slackSaid("RolloutFailed in tenant production") == 1 })

	// Every event once, every message signed, no Stalled, no secret.
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	seen := map[string]int{}
	for _, m := range rcv.hook {
		if m.Reason == notify.ReconcileFailed {
			continue
		}
		k := fmt.Sprintf("%s %s %s", m.Reason, m.Tenant, m.Machine)
		if m.Count != 1 {
			t.Errorf("%s came with count %d", k, m.Count)
		}
		seen[k]++
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("%s was sent %d times", k, n)
		}
		if strings.HasPrefix(k, string(notify.Stalled)) {
			t.Errorf("%s was sent: a rollout's stop is RolloutFailed", k)
		}
	}
	for _, want := range []string{"BootstrapDone production", "BootstrapDone staging", "Drifted staging ", "Recovered staging ",
		"DriftResolved staging ", "CommitRefused  ", "RolloutFailed production " + worker.Spec.Hostname} {
		if !mapHasPrefix(seen, want) {
			t.Errorf("the webhook never got %q; it got %v", want, seen)
		}
	}
	t.Logf("the webhook got %d messages: %v; Slack took %d", len(rcv.hook), seen, len(rcv.slack))
	if rcv.badSigned != 0 {
		t.Errorf("%d webhook messages were not signed with the key", rcv.badSigned)
	}
	if len(rcv.slackTries) != len(rcv.slack)+1 || rcv.slackTries[0] != rcv.slack[0] {
		t.Errorf("Slack got %d tries for %d messages, the first %q then %q; want the refused one again",
			len(rcv.slackTries), len(rcv.slack), rcv.slackTries[0], rcv.slack[0])
	}
	for _, secret := range []string{notifyHookKey, notifySlackToken} {
		if strings.Contains(s.Log(), secret) {
			t.Errorf("the server's log holds a provider's secret")
		}
	}
}

// waitAppliedPush commits and pushes the work tree and waits until the
// commit is applied.
func (e *e2e) waitAppliedPush(msg string) string {
	e.t.Helper()
	sha := e.push(msg)
	e.srv.waitApplied(sha)
	return sha
}

func counts(ms []hookMessage) []int {
	var out []int
	for _, m := range ms {
		out = append(out, m.Count)
	}
	return out
}

func mapHasPrefix(m map[string]int, prefix string) bool {
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}
