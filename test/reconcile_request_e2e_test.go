package test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/sim"
	"github.com/rezuscloud/rezuscloud/schema"
)

// TestReconcileRequestRetriesAtOnce, through the real server binary: with
// a backoff of ten minutes, a scale of staging that the simulated cloud
// fails waits for its retry; `rezusctl reconcile staging` runs it at once
// and reports its outcome: a failure again while the cloud still fails
// (exit 1), then the applied change. A view token gets 403, --no-wait
// returns before the run.
func TestReconcileRequestRetriesAtOnce(t *testing.T) {
	tokens := crashTokens(t)
	view := appendToken(t, tokens, "viewer", backend.RoleView)
	edit := appendToken(t, tokens, "ci", backend.RoleEdit)
	e := newE2E(t, e2eOptions{args: []string{"--tokens-file", tokens, "--retry-base", "10m", "--retry-max", "1h"}})
	s := e.srv
	cloud, err := sim.Open(e.data + "-sim")
	if err != nil {
		t.Fatal(err)
	}
	failNext := func() {
		t.Helper()
		if err := cloud.FailNext(1); err != nil {
			t.Fatal(err)
		}
	}
	failNext()
	e.setCount("staging", "workers", 2)
	sha := e.push("Scale staging workers to 2")
	c := s.WaitCommit(sha)
	if r := e2eResult(t, c, "staging"); r.Phase != schema.CommitFailed || time.Until(r.NextAttemptAt) < 5*time.Minute {
		t.Fatalf("staging under a failing cloud: %s, next attempt %v", r.Phase, r.NextAttemptAt)
	}
	ctl := rezusctl(t)
	if out := ctl.run("get", "tenants", "--server", s.URL()); !regexp.MustCompile(`(?m)^staging .* Retrying: attempt 1 failed \(TofuFailed\), next in [5-9]m`).MatchString(out) {
		t.Errorf("rezusctl get tenants does not show staging retrying:\n%s", out)
	}

	checkReconcileAPI(t, s, view, edit)
	if code, out := ctlRun(t, ctl, view, "reconcile", "staging", "--server", s.URL()); code != 2 || !strings.Contains(out, "needs edit") {
		t.Errorf("rezusctl reconcile as viewer: exit %d, want 2 and the role:\n%s", code, out)
	}

	failNext()
	start := time.Now()
	code, out := ctlRun(t, ctl, edit, "reconcile", "staging", "--server", s.URL(), "--timeout", "3m")
	if code != 1 || !strings.Contains(out, "staging: Queued") || !regexp.MustCompile(`✗ staging: failed again \(attempt 2, `).MatchString(out) {
		t.Fatalf("rezusctl reconcile staging while the cloud fails: exit %d, want 1 and the second failure:\n%s", code, out)
	}
	code, out = ctlRun(t, ctl, edit, "reconcile", "staging", "--server", s.URL(), "--timeout", "3m")
	if code != 0 || !strings.Contains(out, "✔ staging: applied "+sha[:7]) {
		t.Fatalf("rezusctl reconcile staging: exit %d, want 0 and the applied commit:\n%s", code, out)
	}
	if n := e2eCounts(s.machines(""))["staging/workers"]; n != 2 {
		t.Errorf("staging workers after the reconcile: %d, want 2", n)
	}
	if took := time.Since(start); took > 3*time.Minute {
		t.Errorf("two requested retries took %v; the backoff alone is 10m", took)
	}
	t.Logf("two requested retries took %v (the backoff: 10m)", time.Since(start).Round(time.Millisecond))
	// The run reports its tofu apply before the Talos plane has rolled the
	// new worker's config; a request meanwhile finds the run in progress.
	var code2 int
	var out2 string
	s.WaitFor("staging's run to end", func() bool {
		code2, out2 = ctlRun(t, ctl, edit, "reconcile", "staging", "--server", s.URL())
		return !strings.Contains(out2, "staging: Running")
	})
	t.Logf("staging's run ended %v after the retries began", time.Since(start).Round(time.Millisecond))
	if code2 != 0 || !strings.Contains(out2, "staging: UpToDate") {
		t.Errorf("rezusctl reconcile of a tenant with nothing pending: exit %d:\n%s", code2, out2)
	}

	failNext()
	e.setCount("staging", "workers", 3)
	sha = e.push("Scale staging workers to 3")
	s.WaitCommit(sha)
	code, out = ctlRun(t, ctl, edit, "reconcile", "--no-wait", "--server", s.URL())
	if code != 0 || !strings.Contains(out, "► staging: Queued") || strings.Contains(out, "✔") {
		t.Fatalf("rezusctl reconcile --no-wait: exit %d, want 0 and staging queued, no outcome:\n%s", code, out)
	}
	s.WaitFor("staging's third worker", func() bool { return e2eCounts(s.machines(""))["staging/workers"] == 3 })
}

// checkReconcileAPI checks POST /api/v1/reconcile itself: roles, methods,
// bodies and unknown tenants. Nothing is pending for production.
func checkReconcileAPI(t *testing.T, s *e2eServer, view, edit string) {
	t.Helper()
	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }
	if code, body := s.Request(http.MethodPost, "/api/v1/reconcile", nil, bearer(view)); code != http.StatusForbidden {
		t.Errorf("POST as viewer: %d %s, want 403", code, body)
	}
	code, body := s.Request(http.MethodPost, "/api/v1/reconcile", []byte(`{"tenant":"production"}`), bearer(edit))
	var res api.ReconcileResponse
	if code != http.StatusAccepted || json.Unmarshal(body, &res) != nil || !res.SourceFetch || len(res.Tenants) != 1 ||
		res.Tenants[0].Action != api.ReconcileUpToDate {
		t.Errorf("POST production as ci: %d %s, want 202 with the fetch and production up to date", code, body)
	}
	for _, bad := range []struct {
		body string
		code int
	}{
		{`{"tenant":"nosuch"}`, http.StatusNotFound},
		{`{"tenant":"production","force":true}`, http.StatusBadRequest},
		{`{"tenant":"production"} {}`, http.StatusBadRequest},
		{`[]`, http.StatusBadRequest},
		{`{"tenant":"` + strings.Repeat("a", 8<<10) + `"}`, http.StatusRequestEntityTooLarge},
	} {
		if code, body := s.Request(http.MethodPost, "/api/v1/reconcile", []byte(bad.body), bearer(edit)); code != bad.code {
			t.Errorf("POST %.40s: %d %s, want %d", bad.body, code, body, bad.code)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, s.URL()+"/api/v1/reconcile", nil)
	req.Header.Set("Authorization", "Bearer "+edit)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET /api/v1/reconcile: %d Allow %q, want 405 Allow POST", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

// appendToken adds a token of role to the tokens file and returns its
// secret.
func appendToken(t *testing.T, tokens, name string, role backend.Role) string {
	t.Helper()
	secret, line, err := backend.NewToken(name, role)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(tokens, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line + "\n"); err != nil {
		t.Fatal(err)
	}
	return secret
}

// ctlRun runs rezusctl with token and returns its exit code and output.
func ctlRun(t *testing.T, c ctlBinary, token string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(c.path, args...)
	cmd.Env = []string{"HOME=" + t.TempDir(), "REZUSCLOUD_TOKEN=" + token, "NO_COLOR=1"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("rezusctl %s: %v", strings.Join(args, " "), err)
	}
	return cmd.ProcessState.ExitCode(), out.String()
}
