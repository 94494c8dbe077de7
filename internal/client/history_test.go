package client_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/history"
	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// TestHistory: the history endpoints answer a machine's and a tenant's
// history through the client: by default the last 24 hours at the stored
// resolution, or the window and step asked for; a machine removed from
// the tenant still answers its history.
func TestHistory(t *testing.T) {
	s := startServer(t, backend.Config{}, true)
	now := time.Now().UTC().Truncate(time.Minute)
	m := &schema.Machine{APIVersion: schema.APIVersion, Kind: schema.KindMachine,
		Metadata: schema.ObjectMeta{Name: "alpha-w-0", Labels: map[string]string{schema.LabelTenant: "alpha"}},
		Spec:     schema.MachineSpec{Tenant: "alpha", NodeGroup: "w"}}
	s.put(t, tenant("alpha", nil, schema.TenantActive), tenant("beta", nil, schema.TenantActive), m)
	err := s.Store().Update(func(tx store.Tx) error {
		for i := range 120 {
			at := now.Add(time.Duration(i-119) * time.Minute)
			if err := history.RecordSamples(tx, "alpha", at, map[string]schema.MachineSample{"alpha-w-0": {Load1: 0.5, MemoryTotalBytes: 4 << 30}, "alpha-w-gone": {Load1: 1}}); err != nil {
				return err
			}
		}
		for i, stage := range []schema.MachineStage{schema.StageInstalling, schema.StageReady} {
			tr := schema.MachineTransition{At: now.Add(time.Duration(28*i-30) * time.Hour), Stage: stage, Connected: true, Ready: stage == schema.StageReady}
			if err := history.RecordTransition(tx, "alpha", "alpha-w-0", tr); err != nil {
				return err
			}
		}
		return history.RecordMark(tx, "alpha", schema.HistoryMark{At: now.Add(-time.Hour), Kind: schema.MarkReboot, Machine: "alpha-w-0"})
	})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, s.URL(), s.tokens["viewer"], nil)
	h, err := c.MachineHistory(ctx(t), "alpha", "alpha-w-0", client.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h.Step != 60 || len(h.Samples) != 120 || h.Samples[0].Load1 != 0.5 {
		t.Errorf("default machine history: step %d, %d samples; want 60 and 120", h.Step, len(h.Samples))
	}
	if len(h.Transitions) != 2 || h.Transitions[0].Stage != schema.StageInstalling {
		t.Errorf("default machine history's transitions %+v, want installing (before the window) then ready", h.Transitions)
	}
	h, err = c.MachineHistory(ctx(t), "alpha", "alpha-w-0", client.HistoryOptions{Since: now.Add(-time.Hour), Until: now, Step: 30 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if h.Step != 1800 || len(h.Samples) != 3 || len(h.Transitions) != 1 || h.Transitions[0].Stage != schema.StageReady {
		t.Errorf("last hour by 30m: step %d, %d samples, transitions %+v; want 1800, 3 and ready", h.Step, len(h.Samples), h.Transitions)
	}
	if h, err := c.MachineHistory(ctx(t), "alpha", "alpha-w-gone", client.HistoryOptions{}); err != nil || len(h.Samples) != 120 {
		t.Errorf("history of a removed machine: %v, %+v", err, h)
	}
	th, err := c.TenantHistory(ctx(t), "alpha", client.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(th.Machines) != 1 || th.Machines[0].Machine != "alpha-w-0" || len(th.Marks) != 1 || th.Marks[0].Kind != schema.MarkReboot {
		t.Errorf("tenant history: %+v", th)
	}
	if th, err := c.TenantHistory(ctx(t), "beta", client.HistoryOptions{}); err != nil || th.Availability == nil || len(th.Machines) != 0 {
		t.Errorf("history of a tenant with none: %v, %+v; want empty lists", err, th)
	}
}

// TestHistoryErrors: an unknown tenant or machine answers 404, a bad
// parameter 400 with a message that says what is wanted, and history
// needs a token like the rest of the API.
func TestHistoryErrors(t *testing.T) {
	s := startServer(t, backend.Config{}, true)
	s.put(t, tenant("alpha", nil, schema.TenantActive))
	for _, e := range []struct {
		path, query string
		code        int
		message     string
	}{
		{client.TenantHistoryPath("ghost"), "", 404, `tenant "ghost" not found`},
		{client.MachineHistoryPath("ghost", "m"), "", 404, `tenant "ghost" not found`},
		{client.MachineHistoryPath("alpha", "nobody"), "", 404, `machine "nobody" not found in tenant "alpha"`},
		{client.TenantHistoryPath("alpha"), "since=yesterday", 400, `since "yesterday": want an RFC 3339 time`},
		{client.TenantHistoryPath("alpha"), "until=-5m", 400, `until "-5m": want`},
		{client.TenantHistoryPath("alpha"), "since=1h&until=2h", 400, "is not before until"},
		{client.TenantHistoryPath("alpha"), "step=5m", 400, "step applies to a machine's"},
		{client.MachineHistoryPath("alpha", "nobody"), "step=10s", 400, `step "10s": want a duration of at least a minute`},
	} {
		code, body := getRaw(t, s.URL()+e.path+"?"+e.query, s.tokens["viewer"])
		var answer struct{ Message string }
		_ = json.Unmarshal([]byte(body), &answer)
		if code != e.code || !strings.Contains(answer.Message, e.message) {
			t.Errorf("GET %s?%s: %d %s; want %d saying %q", e.path, e.query, code, body, e.code, e.message)
		}
	}
	anon := newClient(t, s.URL(), "", nil)
	_, err := anon.TenantHistory(ctx(t), "alpha", client.HistoryOptions{})
	var se *client.StatusError
	if !errors.As(err, &se) || se.Code != http.StatusUnauthorized {
		t.Errorf("history without a token: %v, want 401", err)
	}
}

// getRaw sends a GET of url with token and returns the answer's status
// and body.
func getRaw(t *testing.T, url, token string) (int, string) {
	t.Helper()
	r, err := http.NewRequestWithContext(ctx(t), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
