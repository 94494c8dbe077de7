package notify

import (
	"encoding/json"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"
)

// withProvider writes a config of the one provider given (YAML flow
// mapping) and an alert that sends it everything, with files beside it.
func withProvider(t testing.TB, provider string, files map[string]string) string {
	f := map[string]string{"notifications.yaml": "providers: [" + provider + "]\nalerts: [{name: all, providers: [p]}]\n"}
	maps.Copy(f, files)
	return writeFiles(t, f)
}

func decode(t testing.TB, r received, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("body %s: %v", r.Body, err)
	}
}

func wantRequest(t testing.TB, r received, method, path, contentType string) {
	t.Helper()
	if r.Method != method || r.Path != path || r.Header.Get("Content-Type") != contentType {
		t.Errorf("request %s %s (content type %q), want %s %s (%q)", r.Method, r.Path, r.Header.Get("Content-Type"), method, path, contentType)
	}
}

// TestTeamsPayload: a Workflows webhook gets a message whose attachment is
// an Adaptive Card 1.4 with the title, the text, the facts and a link.
func TestTeamsPayload(t *testing.T) {
	rcv := newReceiver(t, http.StatusAccepted)
	h := start(t, withProvider(t, "{name: p, type: msteams, addressFile: url}",
		map[string]string{"url": rcv.srv.URL + "/workflows/triggers/manual/paths/invoke?sig=s1g"}), true)
	h.n.Notify(event(ReconcileFailed, "shop"))
	got := rcv.next(t)
	wantRequest(t, got, "POST", "/workflows/triggers/manual/paths/invoke", "application/json")
	if got.Query != "sig=s1g" {
		t.Errorf("query %q", got.Query)
	}
	var m struct {
		Type        string
		Attachments []struct {
			ContentType string
			ContentURL  *string `json:"contentUrl"`
			Content     struct {
				Schema  string `json:"$schema"`
				Type    string
				Version string
				Body    []struct {
					Type, Text, Color string
					Wrap              bool
					Facts             []struct{ Title, Value string }
				}
				Actions []struct{ Type, Title, URL string }
			}
		}
	}
	decode(t, got, &m)
	if m.Type != "message" || len(m.Attachments) != 1 {
		t.Fatalf("message %s", got.Body)
	}
	a := m.Attachments[0]
	if a.ContentType != "application/vnd.microsoft.card.adaptive" || !strings.Contains(string(got.Body), `"contentUrl":null`) {
		t.Errorf("attachment %s", got.Body)
	}
	c := a.Content
	if c.Type != "AdaptiveCard" || c.Version != "1.4" || c.Schema != "http://adaptivecards.io/schemas/adaptive-card.json" || len(c.Body) != 3 {
		t.Fatalf("card %s", got.Body)
	}
	if c.Body[0].Type != "TextBlock" || c.Body[0].Text != "ReconcileFailed in tenant shop" || c.Body[0].Color != "Attention" {
		t.Errorf("title %+v", c.Body[0])
	}
	if c.Body[1].Type != "TextBlock" || !strings.HasPrefix(c.Body[1].Text, "tofu apply failed") || !c.Body[1].Wrap {
		t.Errorf("text %+v", c.Body[1])
	}
	if c.Body[2].Type != "FactSet" || len(c.Body[2].Facts) != 2 || c.Body[2].Facts[1].Value != "0123456789ab raise the worker count" {
		t.Errorf("facts %+v", c.Body[2])
	}
	if len(c.Actions) != 1 || c.Actions[0].Type != "Action.OpenUrl" || c.Actions[0].URL != "https://rezus.example.com/tenants/shop" {
		t.Errorf("actions %+v", c.Actions)
	}
	h.waitMetric(t, "p", resultSent, 1)
}

// TestDiscordPayload: an execute-webhook body with one embed, and no
// mention parsed from the text.
func TestDiscordPayload(t *testing.T) {
	rcv := newReceiver(t, http.StatusNoContent)
	h := start(t, withProvider(t, "{name: p, type: discord, addressFile: url}",
		map[string]string{"url": rcv.srv.URL + "/api/webhooks/123/t0ken"}), true)
	ev := event(RolloutFailed, "shop")
	ev.Machine, ev.Message = "cp-1", "@everyone the node did not come back"
	h.n.Notify(ev)
	got := rcv.next(t)
	wantRequest(t, got, "POST", "/api/webhooks/123/t0ken", "application/json")
	var m struct {
		Username string
		Content  *string
		Embeds   []struct {
			Title, Description, URL, Timestamp string
			Color                              int
			Fields                             []struct{ Name, Value string }
		}
		AllowedMentions struct{ Parse []string } `json:"allowed_mentions"`
	}
	decode(t, got, &m)
	if len(m.Embeds) != 1 || m.AllowedMentions.Parse == nil || len(m.AllowedMentions.Parse) != 0 {
		t.Fatalf("message %s", got.Body)
	}
	e := m.Embeds[0]
	if e.Title != "RolloutFailed in tenant shop, machine cp-1" || !strings.HasPrefix(e.Description, "@everyone the node") ||
		e.URL != "https://rezus.example.com/tenants/shop" || e.Color != 0xE01E5A || e.Timestamp != "2026-12-01T09:59:00Z" || len(e.Fields) != 3 {
		t.Errorf("embed %+v", e)
	}
	h.waitMetric(t, "p", resultSent, 1)
}

// TestGoogleChatPayload: a space's webhook gets the text.
func TestGoogleChatPayload(t *testing.T) {
	rcv := newReceiver(t)
	h := start(t, withProvider(t, "{name: p, type: googlechat, addressFile: url}",
		map[string]string{"url": rcv.srv.URL + "/v1/spaces/AAA/messages?key=k3y&token=t0k"}), true)
	h.n.Notify(event(Drifted, "shop"))
	got := rcv.next(t)
	wantRequest(t, got, "POST", "/v1/spaces/AAA/messages", "application/json; charset=UTF-8")
	var m map[string]string
	decode(t, got, &m)
	if got.Query != "key=k3y&token=t0k" || !strings.HasPrefix(m["text"], "Drifted in tenant shop\n") || len(m) != 1 {
		t.Errorf("query %q, body %s", got.Query, got.Body)
	}
}

// TestMatrixPayload: the client-server API's send, with the access token
// as Bearer, an m.notice in the room, and the same transaction ID when a
// message is retried.
func TestMatrixPayload(t *testing.T) {
	rcv := newReceiver(t, http.StatusBadGateway)
	rcv.body = `{"event_id":"$e"}`
	h := start(t, withProvider(t, `{name: p, type: matrix, address: "`+rcv.srv.URL+`", channel: "!ops:example.org", secretFile: token}`,
		map[string]string{"token": "syt_t0ken"}), true)
	h.n.Notify(event(BackupFailed, "shop"))
	first := rcv.next(t)
	h.clock.advanceToWait(t)
	second := rcv.next(t)
	prefix := "/_matrix/client/v3/rooms/%21ops:example.org/send/m.room.message/"
	if first.Method != "PUT" || !strings.HasPrefix(first.Path, prefix) || len(first.Path) == len(prefix) || first.Header.Get("Content-Type") != "application/json" {
		t.Errorf("request %s %s", first.Method, first.Path)
	}
	if second.Path != first.Path {
		t.Errorf("the retry has another transaction: %s, then %s", first.Path, second.Path)
	}
	if first.Header.Get("Authorization") != "Bearer syt_t0ken" {
		t.Errorf("authorization %q", first.Header.Get("Authorization"))
	}
	var m map[string]string
	decode(t, second, &m)
	if m["msgtype"] != "m.notice" || !strings.HasPrefix(m["body"], "BackupFailed in tenant shop\n") {
		t.Errorf("body %s", second.Body)
	}
	h.waitMetric(t, "p", resultSent, 1)
	h.n.Notify(event(BackupRecovered, "shop"))
	if third := rcv.next(t); third.Path == first.Path {
		t.Errorf("another message reuses the transaction %s", third.Path)
	}
}

// TestPagerDutyPayload: an error triggers an alert event with the routing
// key, a dedup_key and the required payload fields; the recovery resolves
// with the same dedup_key; an info event is a change event.
func TestPagerDutyPayload(t *testing.T) {
	rcv := newReceiver(t)
	rcv.ok, rcv.body = http.StatusAccepted, `{"status":"success","message":"Event processed","dedup_key":"x"}`
	h := start(t, withProvider(t, `{name: p, type: pagerduty, address: "`+rcv.srv.URL+`", secretFile: key}`,
		map[string]string{"key": "R0UT1NG0123456789abcdef012345678"}), true)
	h.n.Notify(event(Stalled, "shop"))
	type payload struct {
		Summary, Source, Severity, Timestamp, Component, Group, Class string
		CustomDetails                                                 map[string]string `json:"custom_details"`
	}
	type pdEvent struct {
		RoutingKey  string   `json:"routing_key"`
		EventAction string   `json:"event_action"`
		DedupKey    string   `json:"dedup_key"`
		Payload     *payload `json:"payload"`
		Links       []struct{ Href, Text string }
	}
	got := rcv.next(t)
	wantRequest(t, got, "POST", "/v2/enqueue", "application/json")
	var trig pdEvent
	decode(t, got, &trig)
	p := trig.Payload
	if trig.RoutingKey != "R0UT1NG0123456789abcdef012345678" || trig.EventAction != "trigger" || trig.DedupKey != "rezuscloud:reconcile:shop" || p == nil {
		t.Fatalf("trigger %s", got.Body)
	}
	if p.Summary != "Stalled in tenant shop: tofu apply failed: the sim cloud refused the instance" || p.Source != "rezuscloud tenant shop" ||
		p.Severity != "error" || p.Timestamp != "2026-12-01T09:59:00Z" || p.Component != "shop" || p.Class != "Stalled" ||
		!strings.HasPrefix(p.CustomDetails["message"], "tofu apply failed") || p.CustomDetails["commit"] != "0123456789ab raise the worker count" {
		t.Errorf("payload %+v", *p)
	}
	if len(trig.Links) != 1 || trig.Links[0].Href != "https://rezus.example.com/tenants/shop" {
		t.Errorf("links %+v", trig.Links)
	}

	h.n.Notify(event(Recovered, "shop"))
	got = rcv.next(t)
	wantRequest(t, got, "POST", "/v2/enqueue", "application/json")
	var res pdEvent
	decode(t, got, &res)
	if res.EventAction != "resolve" || res.DedupKey != trig.DedupKey || res.RoutingKey != trig.RoutingKey || res.Payload != nil {
		t.Errorf("resolve %s", got.Body)
	}

	h.n.Notify(event(RolloutStarted, "shop"))
	got = rcv.next(t)
	wantRequest(t, got, "POST", "/v2/change/enqueue", "application/json")
	var change pdEvent
	decode(t, got, &change)
	if change.EventAction != "" || change.RoutingKey != trig.RoutingKey || change.Payload == nil || change.Payload.Summary == "" ||
		change.Payload.Source == "" || change.Payload.Severity != "" || change.Payload.Timestamp == "" {
		t.Errorf("change %s", got.Body)
	}
	h.waitMetric(t, "p", resultSent, 3)
}

// TestOpsgeniePayload: an alert is created with the GenieKey, a message
// within 130 characters and an alias; the recovery closes the alert by
// that alias.
func TestOpsgeniePayload(t *testing.T) {
	rcv := newReceiver(t)
	rcv.ok, rcv.body = http.StatusAccepted, `{"result":"Request will be processed","took":0.1,"requestId":"r"}`
	h := start(t, withProvider(t, `{name: p, type: opsgenie, address: "`+rcv.srv.URL+`", secretFile: key}`,
		map[string]string{"key": "eb243592-faa2-4ba2-a551q-1afdf565c889"}), true)
	ev := event(MachineNotReady, "shop")
	ev.Machine = strings.Repeat("worker-", 30)
	h.n.Notify(ev)
	got := rcv.next(t)
	wantRequest(t, got, "POST", "/v2/alerts", "application/json")
	if got.Header.Get("Authorization") != "GenieKey eb243592-faa2-4ba2-a551q-1afdf565c889" {
		t.Errorf("authorization %q", got.Header.Get("Authorization"))
	}
	var a struct {
		Message, Alias, Description, Priority, Source, Entity string
		Details                                               map[string]string
		Tags                                                  []string
	}
	decode(t, got, &a)
	if n := len([]rune(a.Message)); n > 130 || !strings.HasPrefix(a.Message, "MachineNotReady in tenant shop, machine worker-") || !strings.HasSuffix(a.Message, "…") {
		t.Errorf("message %q (%d characters)", a.Message, n)
	}
	if a.Alias != "rezuscloud:machine:shop:"+ev.Machine || a.Priority != "P2" || a.Entity != "shop" || a.Details["tenant"] != "shop" ||
		!strings.HasPrefix(a.Description, "tofu apply failed") || len(a.Tags) != 2 {
		t.Errorf("alert %s", got.Body)
	}

	h.n.Notify(event(DriftResolved, "shop"))
	got = rcv.next(t)
	wantRequest(t, got, "POST", "/v2/alerts/rezuscloud:drift:shop/close", "application/json")
	if got.Query != "identifierType=alias" || got.Header.Get("Authorization") != "GenieKey eb243592-faa2-4ba2-a551q-1afdf565c889" {
		t.Errorf("close: query %q, authorization %q", got.Query, got.Header.Get("Authorization"))
	}
	var c map[string]string
	decode(t, got, &c)
	if c["source"] != "rezuscloud" || c["note"] == "" {
		t.Errorf("close %s", got.Body)
	}
}

// TestAlertmanagerPayload: an event fires an alert named after it; the
// recovery ends the alerts of its family with the very same labels and
// endsAt.
func TestAlertmanagerPayload(t *testing.T) {
	rcv := newReceiver(t)
	h := start(t, withProvider(t, `{name: p, type: alertmanager, address: "`+rcv.srv.URL+`/am/"}`, nil), true)
	type alert struct {
		Labels       map[string]string
		Annotations  map[string]string
		StartsAt     string
		EndsAt       string
		GeneratorURL string
	}
	h.n.Notify(event(ReconcileFailed, "shop"))
	got := rcv.next(t)
	wantRequest(t, got, "POST", "/am/api/v2/alerts", "application/json")
	var fired []alert
	decode(t, got, &fired)
	if len(fired) != 1 {
		t.Fatalf("alerts %s", got.Body)
	}
	f := fired[0]
	wantLabels := map[string]string{"alertname": "ReconcileFailed", "tenant": "shop", "severity": "error", "source": "rezuscloud"}
	if !maps.Equal(f.Labels, wantLabels) || f.StartsAt != "2026-12-01T09:59:00Z" || f.EndsAt != "" ||
		f.Annotations["summary"] != "ReconcileFailed in tenant shop" || !strings.HasPrefix(f.Annotations["description"], "tofu apply failed") ||
		f.GeneratorURL != "https://rezus.example.com/tenants/shop" {
		t.Errorf("fired %s", got.Body)
	}
	rec := event(Recovered, "shop")
	rec.Time = time.Date(2026, 12, 1, 10, 30, 0, 0, time.UTC)
	h.n.Notify(rec)
	got = rcv.next(t)
	var ended []alert
	decode(t, got, &ended)
	if len(ended) != 2 || !maps.Equal(ended[0].Labels, wantLabels) || ended[1].Labels["alertname"] != "Stalled" {
		t.Fatalf("ended %s", got.Body)
	}
	for _, e := range ended {
		if e.EndsAt != "2026-12-01T10:30:00Z" {
			t.Errorf("endsAt %q", e.EndsAt)
		}
	}
}

// TestAlertmanagerBearer: a secretFile is sent as a bearer token.
func TestAlertmanagerBearer(t *testing.T) {
	rcv := newReceiver(t)
	h := start(t, withProvider(t, `{name: p, type: alertmanager, address: "`+rcv.srv.URL+`", secretFile: token}`,
		map[string]string{"token": "am-t0ken"}), true)
	h.n.Notify(event(ReplicaLost, ""))
	got := rcv.next(t)
	var alerts []struct{ Labels map[string]string }
	decode(t, got, &alerts)
	if got.Header.Get("Authorization") != "Bearer am-t0ken" || len(alerts) != 1 || alerts[0].Labels["tenant"] != "" {
		t.Errorf("authorization %q, body %s", got.Header.Get("Authorization"), got.Body)
	}
}
