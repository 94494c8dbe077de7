package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/backoff"
)

// oneProvider writes a config with one webhook provider named hook at
// rcv and an alert that sends it everything; extra is added to the
// provider's fields.
func oneProvider(t testing.TB, rcv *receiver, extra string) string {
	return writeFiles(t, map[string]string{"notifications.yaml": `
providers: [{name: hook, type: webhook, address: "` + rcv.srv.URL + `/hook"` + extra + `}]
alerts: [{name: all, providers: [hook]}]
`})
}

// webhookBody decodes a generic webhook's body.
func webhookBody(t testing.TB, r received) webhookPayload {
	t.Helper()
	var p webhookPayload
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("body %s: %v", r.Body, err)
	}
	return p
}

// TestCoalesceQueued: repeats of an event that wait in the queue leave as
// one message with their count; another tenant's event stays apart.
func TestCoalesceQueued(t *testing.T) {
	rcv := newReceiver(t)
	h := start(t, oneProvider(t, rcv, ""), false)
	for range 5 {
		h.n.Notify(event(ReconcileFailed, "shop"))
	}
	h.n.Notify(event(ReconcileFailed, "blog"))
	h.run(t)
	first, second := webhookBody(t, rcv.next(t)), webhookBody(t, rcv.next(t))
	if first.Tenant != "shop" || first.Count != 5 || !strings.HasPrefix(first.Text, "ReconcileFailed in tenant shop (5 times)") {
		t.Errorf("first message: tenant %q, count %d, text %q", first.Tenant, first.Count, first.Text)
	}
	if second.Tenant != "blog" || second.Count != 1 || strings.Contains(second.Text, "times") {
		t.Errorf("second message: tenant %q, count %d, text %q", second.Tenant, second.Count, second.Text)
	}
	h.waitMetric(t, "hook", resultSent, 2)
	if c := h.metric("hook", resultCoalesced); c != 4 {
		t.Errorf("coalesced %v, want 4", c)
	}
	rcv.none(t)
}

// TestCoalesceWindow: after a message, repeats within the window are held
// and leave as one message with their count when the window ends; a
// different machine's event is not gathered with them.
func TestCoalesceWindow(t *testing.T) {
	rcv := newReceiver(t)
	h := start(t, oneProvider(t, rcv, ""), true)
	failed := func(machine string) Event {
		ev := event(RolloutFailed, "shop")
		ev.Machine = machine
		return ev
	}
	h.n.Notify(failed("cp-1"))
	if p := webhookBody(t, rcv.next(t)); p.Count != 1 || p.Machine != "cp-1" {
		t.Fatalf("first message %+v", p)
	}
	h.waitMetric(t, "hook", resultSent, 1)
	for range 3 {
		h.n.Notify(failed("cp-1"))
	}
	h.n.Notify(failed("cp-2"))
	if p := webhookBody(t, rcv.next(t)); p.Machine != "cp-2" || p.Count != 1 {
		t.Fatalf("the other machine's message %+v", p)
	}
	rcv.none(t)
	if moved := h.clock.advanceToWait(t); moved != DefaultCoalesceWindow {
		t.Errorf("the held message left after %v, want the window %v", moved, DefaultCoalesceWindow)
	}
	p := webhookBody(t, rcv.next(t))
	if p.Machine != "cp-1" || p.Count != 3 || !strings.HasPrefix(p.Text, "RolloutFailed in tenant shop, machine cp-1 (3 times)") {
		t.Errorf("held message: machine %q, count %d, text %q", p.Machine, p.Count, p.Text)
	}
	h.waitMetric(t, "hook", resultSent, 3)
	if c := h.metric("hook", resultCoalesced); c != 2 {
		t.Errorf("coalesced %v, want 2", c)
	}
}

// TestRecoveryReleasesHeld: a recovery does not wait for the window, and
// the failures held before it leave first, so that the last word is the
// recovery.
func TestRecoveryReleasesHeld(t *testing.T) {
	rcv := newReceiver(t)
	h := start(t, oneProvider(t, rcv, ""), true)
	h.n.Notify(event(ReconcileFailed, "shop"))
	rcv.next(t)
	h.waitMetric(t, "hook", resultSent, 1)
	h.n.Notify(event(ReconcileFailed, "shop"))
	h.n.Notify(event(ReconcileFailed, "shop"))
	h.n.Notify(event(Recovered, "shop"))
	a, b := webhookBody(t, rcv.next(t)), webhookBody(t, rcv.next(t))
	if a.Reason != ReconcileFailed || a.Count != 2 || b.Reason != Recovered || b.Count != 1 {
		t.Errorf("after the recovery: %s ×%d, then %s ×%d; want ReconcileFailed ×2, then Recovered", a.Reason, a.Count, b.Reason, b.Count)
	}
	h.n.Notify(event(ReconcileFailed, "shop")) // failing again, within the window of the first message
	rcv.none(t)
	h.clock.advanceToWait(t)
	if c := webhookBody(t, rcv.next(t)); c.Reason != ReconcileFailed || c.Count != 1 {
		t.Errorf("failing again: %s ×%d", c.Reason, c.Count)
	}
}

// TestRetriedThenDeliveredOnce: a 500 is retried after the backoff and
// the message is then delivered once.
func TestRetriedThenDeliveredOnce(t *testing.T) {
	rcv := newReceiver(t, http.StatusInternalServerError)
	h := start(t, oneProvider(t, rcv, ""), true)
	h.n.Notify(event(BackupFailed, "shop"))
	first := rcv.next(t)
	moved := h.clock.advanceToWait(t)
	if d := retryPolicy.Base; moved > d || moved < d*8/10 {
		t.Errorf("the retry came %v later, want the first backoff (%v less up to a fifth)", moved, d)
	}
	second := rcv.next(t)
	if string(first.Body) != string(second.Body) {
		t.Errorf("the retry sent another body:\n%s\n%s", first.Body, second.Body)
	}
	h.waitMetric(t, "hook", resultSent, 1)
	if r := h.metric("hook", resultRetried); r != 1 {
		t.Errorf("retried %v, want 1", r)
	}
	if n := rcv.count(); n != 2 {
		t.Errorf("the receiver got %d requests, want 2", n)
	}
	if !strings.Contains(h.log.String(), "will retry") || !strings.Contains(h.log.String(), "provider=hook") || !strings.Contains(h.log.String(), "HTTP 500") {
		t.Errorf("log:\n%s", h.log)
	}
}

// TestRetryAfter: a 429 with Retry-After is retried no sooner than asked.
func TestRetryAfter(t *testing.T) {
	rcv := newReceiver(t, http.StatusTooManyRequests)
	rcv.retryAfter = "30"
	h := start(t, oneProvider(t, rcv, ""), true)
	h.n.Notify(event(Drifted, "shop"))
	rcv.next(t)
	if moved := h.clock.advanceToWait(t); moved != 30*time.Second {
		t.Errorf("retried after %v, want the 30s asked for", moved)
	}
	rcv.next(t)
	h.waitMetric(t, "hook", resultSent, 1)
}

// TestRefusedIsNotRetried: a 4xx other than 408 and 429 is given up at
// once.
func TestRefusedIsNotRetried(t *testing.T) {
	rcv := newReceiver(t, http.StatusBadRequest)
	h := start(t, oneProvider(t, rcv, ""), true)
	h.n.Notify(event(Drifted, "shop"))
	rcv.next(t)
	h.waitMetric(t, "hook", resultFailed, 1)
	if r := h.metric("hook", resultRetried); r != 0 {
		t.Errorf("retried %v", r)
	}
}

// TestFailingProviderGivesUp: a provider that keeps failing is tried
// maxTries times with growing waits, then given up; its failures are
// metrics and log lines that name the provider and never its address.
func TestFailingProviderGivesUp(t *testing.T) {
	rcv := newReceiver(t)
	rcv.ok, rcv.echo = http.StatusBadGateway, true
	path := writeFiles(t, map[string]string{"url": rcv.srv.URL + "/hooks/s3cr3t-p4th?token=t0ken-value\n", "notifications.yaml": `
providers: [{name: chat, type: discord, addressFile: url}]
alerts: [{name: all, providers: [chat]}]
`})
	h := start(t, path, true)
	h.n.Notify(event(ReconcileFailed, "shop"))
	rcv.next(t)
	var prev time.Duration
	for i := 1; i < maxTries; i++ {
		moved := h.clock.advanceToWait(t)
		if full := (backoff.Policy{Base: retryPolicy.Base, Max: retryPolicy.Max}).Delay(i); i > 1 && (moved <= prev && full < retryPolicy.Max || moved > full) {
			t.Errorf("wait %d: %v after %v, want growing up to %v", i, moved, prev, full)
		}
		prev = moved
		rcv.next(t)
	}
	h.waitMetric(t, "chat", resultFailed, 1)
	if r, s := h.metric("chat", resultRetried), h.metric("chat", resultSent); r != maxTries-1 || s != 0 {
		t.Errorf("retried %v, sent %v; want %d and 0", r, s, maxTries-1)
	}
	if n := rcv.count(); n != maxTries {
		t.Errorf("%d attempts, want %d", n, maxTries)
	}
	log := h.log.String()
	if !strings.Contains(log, "given up") || !strings.Contains(log, "provider=chat") || !strings.Contains(log, "HTTP 502") {
		t.Errorf("log:\n%s", log)
	}
	for _, secret := range []string{"s3cr3t", "t0ken-value"} {
		if strings.Contains(log, secret) {
			t.Errorf("the log shows %q:\n%s", secret, log)
		}
	}
}

// TestFailingProviderNeverBlocks: while a provider keeps failing, Notify
// returns at once for every event, the full queue drops its oldest
// messages and counts them, and another provider is not held up.
func TestFailingProviderNeverBlocks(t *testing.T) {
	bad, good := newReceiver(t), newReceiver(t)
	bad.ok = http.StatusServiceUnavailable
	path := writeFiles(t, map[string]string{"notifications.yaml": `
providers:
  - {name: bad, type: webhook, address: "` + bad.srv.URL + `", queueSize: 5}
  - {name: good, type: webhook, address: "` + good.srv.URL + `"}
alerts:
  - {name: bad, providers: [bad]}
  - {name: good, providers: [good], tenants: {names: [t-last]}}
`})
	h := start(t, path, true)
	h.n.Notify(event(ReconcileFailed, "t-first"))
	bad.next(t)
	h.waitMetric(t, "bad", resultRetried, 1)
	for i := range 1000 {
		h.n.Notify(event(ReconcileFailed, fmt.Sprintf("t-%d", i)))
	}
	h.n.Notify(event(ReconcileFailed, "t-last"))
	if p := webhookBody(t, good.next(t)); p.Tenant != "t-last" {
		t.Errorf("the good provider got %q", p.Tenant)
	}
	if d := h.metric("bad", resultDropped); d != 997 {
		t.Errorf("dropped %v, want 997 (1002 messages, 5 kept)", d)
	}
	if n := h.n.sinks[0].q.length(); n != 5 {
		t.Errorf("the queue holds %d, want 5", n)
	}
	bad.none(t)
}

// TestFullQueueDropsOldest: a full queue keeps the newest messages.
func TestFullQueueDropsOldest(t *testing.T) {
	rcv := newReceiver(t)
	h := start(t, oneProvider(t, rcv, ", queueSize: 3"), false)
	for i := range 10 {
		h.n.Notify(event(Drifted, fmt.Sprintf("t-%d", i)))
	}
	if d := h.metric("hook", resultDropped); d != 7 {
		t.Errorf("dropped %v, want 7", d)
	}
	h.run(t)
	for _, want := range []string{"t-7", "t-8", "t-9"} {
		if p := webhookBody(t, rcv.next(t)); p.Tenant != want {
			t.Errorf("got %q, want %q", p.Tenant, want)
		}
	}
	rcv.none(t)
}

// TestTemplateOverride: a provider's template replaces the text.
func TestTemplateOverride(t *testing.T) {
	rcv := newReceiver(t)
	h := start(t, oneProvider(t, rcv, `, template: "{{.Reason}} for {{.Tenant}} at {{.Commit.Short}} x{{.Count}} {{.URL}}"`), true)
	h.n.Notify(event(Stalled, "shop"))
	if p := webhookBody(t, rcv.next(t)); p.Text != "Stalled for shop at 0123456789ab x1 https://rezus.example.com/tenants/shop" {
		t.Errorf("text %q", p.Text)
	}
}

// TestNotifierTest: Test sends a test message at once and returns the
// delivery's error, without the provider's secrets.
func TestNotifierTest(t *testing.T) {
	rcv := newReceiver(t)
	path := writeFiles(t, map[string]string{"url": rcv.srv.URL + "/s3cr3t-p4th\n", "notifications.yaml": `
providers: [{name: chat, type: googlechat, addressFile: url}]
`})
	h := start(t, path, false)
	if err := h.n.Test(context.Background(), "chat"); err != nil {
		t.Fatal(err)
	}
	got := rcv.next(t)
	if !strings.Contains(string(got.Body), "A test message from RezusCloud to the provider chat.") {
		t.Errorf("body %s", got.Body)
	}
	rcv.mu.Lock()
	rcv.ok, rcv.echo = http.StatusForbidden, true
	rcv.mu.Unlock()
	err := h.n.Test(context.Background(), "chat")
	if err == nil || !strings.Contains(err.Error(), "provider chat: HTTP 403") || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("error %v", err)
	}
	if err := h.n.Test(context.Background(), "nope"); !errors.Is(err, ErrNoProvider) || err.Error() != `no provider named "nope"` {
		t.Errorf("unknown provider: %v", err)
	}
	if s, f := h.metric("chat", resultSent), h.metric("chat", resultFailed); s != 1 || f != 1 {
		t.Errorf("sent %v, failed %v", s, f)
	}
	rcv.srv.Close()
	if err := h.n.Test(context.Background(), "chat"); err == nil || strings.Contains(err.Error(), "s3cr3t") || !strings.Contains(err.Error(), "Post: ") {
		t.Errorf("a closed receiver: %v", err)
	}
}

// TestNilNotifier: a nil Notifier takes events and drops them, has no
// providers, and its Test says that nothing is configured.
func TestNilNotifier(t *testing.T) {
	var n *Notifier
	n.Notify(event(Drifted, "shop"))
	if p := n.Providers(); p != nil {
		t.Errorf("providers %v", p)
	}
	if err := n.Test(context.Background(), "x"); !errors.Is(err, ErrNotConfigured) {
		t.Errorf("Test: %v", err)
	}
}

// TestRetryAfterHeader: seconds, with or without a fraction, are read;
// anything else is no wait of the service's.
func TestRetryAfterHeader(t *testing.T) {
	for h, want := range map[string]time.Duration{"30": 30 * time.Second, " 1.5 ": 1500 * time.Millisecond, "": 0, "0": 0, "-3": 0,
		"NaN": 0, "Wed, 21 Oct 2026 07:28:00 GMT": 0, "1e9": 0} {
		if got := retryAfter(h); got != want {
			t.Errorf("retryAfter(%q) = %v, want %v", h, got, want)
		}
	}
}
