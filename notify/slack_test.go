package notify

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSlackWebhook: an incoming webhook gets a JSON body with the text,
// Slack's reserved characters escaped, at the URL from addressFile.
func TestSlackWebhook(t *testing.T) {
	rcv := newReceiver(t)
	rcv.body = "ok"
	path := writeFiles(t, map[string]string{"url": rcv.srv.URL + "/services/T1/B2/t0ken\n", "notifications.yaml": `
providers: [{name: team, type: slack, addressFile: url}]
alerts: [{name: all, providers: [team]}]
`})
	h := start(t, path, true)
	ev := event(ReconcileFailed, "shop")
	ev.Message = "the patch <encrypted> & the rest"
	h.n.Notify(ev)
	got := rcv.next(t)
	if got.Method != "POST" || got.Path != "/services/T1/B2/t0ken" || got.Header.Get("Content-Type") != "application/json" {
		t.Errorf("request %s %s, content type %q", got.Method, got.Path, got.Header.Get("Content-Type"))
	}
	var m map[string]any
	if err := json.Unmarshal(got.Body, &m); err != nil {
		t.Fatal(err)
	}
	text, _ := m["text"].(string)
	for _, want := range []string{"ReconcileFailed in tenant shop", "the patch &lt;encrypted&gt; &amp; the rest", "Commit 0123456789ab: raise the worker count", "https://rezus.example.com/tenants/shop"} {
		if !strings.Contains(text, want) {
			t.Errorf("text %q lacks %q", text, want)
		}
	}
	if _, ok := m["channel"]; ok {
		t.Errorf("an incoming webhook got a channel: %s", got.Body)
	}
	h.waitMetric(t, "team", resultSent, 1)
}

// TestSlackBot: with a bot token the message goes to chat.postMessage
// with the channel and a Bearer token; an answer with "ok": false is a
// failure, not retried, and in the metrics.
func TestSlackBot(t *testing.T) {
	rcv := newReceiver(t)
	rcv.body = `{"ok":true,"channel":"C1","ts":"1.2"}`
	path := writeFiles(t, map[string]string{"token": "xoxb-bot-t0ken\n", "notifications.yaml": `
providers: [{name: bot, type: slack, address: "` + rcv.srv.URL + `/api", secretFile: token, channel: "#ops"}]
alerts: [{name: all, providers: [bot]}]
`})
	h := start(t, path, true)
	h.n.Notify(event(Stalled, "shop"))
	got := rcv.next(t)
	if got.Path != "/api/chat.postMessage" || got.Header.Get("Authorization") != "Bearer xoxb-bot-t0ken" ||
		got.Header.Get("Content-Type") != "application/json; charset=utf-8" {
		t.Errorf("request %s, authorization %q, content type %q", got.Path, got.Header.Get("Authorization"), got.Header.Get("Content-Type"))
	}
	var m struct{ Channel, Text string }
	if err := json.Unmarshal(got.Body, &m); err != nil || m.Channel != "#ops" || !strings.HasPrefix(m.Text, "Stalled in tenant shop") {
		t.Errorf("body %s (%v)", got.Body, err)
	}
	h.waitMetric(t, "bot", resultSent, 1)

	rcv.mu.Lock()
	rcv.body = `{"ok":false,"error":"channel_not_found"}`
	rcv.mu.Unlock()
	h.n.Notify(event(Drifted, "shop"))
	rcv.next(t)
	h.waitMetric(t, "bot", resultFailed, 1)
	if r := h.metric("bot", resultRetried); r != 0 {
		t.Errorf("a refused message was retried %v times", r)
	}
	if !strings.Contains(h.log.String(), "slack refused the message: channel_not_found") || strings.Contains(h.log.String(), "xoxb") {
		t.Errorf("log:\n%s", h.log)
	}
}
