package test

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/schema"
)

// TestReconcileRetriesAfterForeignLock, tried as a new user would: a tofu
// stuck elsewhere holds the lock of staging's state (a LOCK with another
// edit token, as such a tofu leaves it). A push that scales staging fails
// on the lock, and the tenant and the commit say when it runs again, as
// `rezusctl describe` shows; once the lock is released the change arrives
// by itself, within a minute, with nobody touching git.
func TestReconcileRetriesAfterForeignLock(t *testing.T) {
	tokens := crashTokens(t) // the test's requests go as admin
	ci, line, err := backend.NewToken("ci", backend.RoleEdit)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(tokens, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(line + "\n")
	f.Close()
	e := newE2E(t, e2eOptions{args: []string{"--tokens-file", tokens, "--retry-base", "1s", "--retry-max", "5s"}})
	s := e.srv

	ciAuth := http.Header{"Authorization": {"Bearer " + ci}}
	lock := []byte(`{"ID":"stuck-tofu","Operation":"OperationTypeApply","Who":"ci@elsewhere","Version":"1.10.10"}`)
	if code, body := s.Request("LOCK", "/tfstate/staging", lock, ciAuth); code != http.StatusOK {
		t.Fatalf("LOCK as ci: %d %s", code, body)
	}

	e.setCount("staging", "workers", 2)
	sha := e.push("Scale staging workers to 2")
	c := s.WaitCommit(sha)
	r := e2eResult(t, c, "staging")
	if c.Status.Phase != schema.CommitPartiallyFailed || r.Reason != schema.ReasonStateLocked || r.NextAttemptAt.IsZero() ||
		!strings.Contains(r.Error, "ci@elsewhere") {
		t.Fatalf("under ci's lock: commit %s, staging %s %q next %v: %s", c.Status.Phase, r.Phase, r.Reason, r.NextAttemptAt, r.Error)
	}
	var tn schema.Tenant
	s.mustGet("/api/v1/tenants/staging", &tn)
	if rt := tn.Status.Retry; rt == nil || rt.LastReason != schema.ReasonStateLocked || rt.NextAttemptAt.IsZero() {
		t.Fatalf("staging's retry: %+v", rt)
	}
	if rc := tn.Status.Conditions.Get(schema.ConditionReconciling); rc == nil || rc.Reason != schema.ReasonRetryScheduled {
		t.Errorf("staging Reconciling %+v, want RetryScheduled", rc)
	}
	ctl := rezusctl(t)
	out := ctl.run("describe", "tenant", "staging", "--server", s.URL())
	if !regexp.MustCompile(`(?m)^  Retry: +attempt \d+ failed \(StateLocked\); next attempt \S+`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^  Reconciling +True +RetryScheduled `).MatchString(out) {
		t.Errorf("rezusctl describe tenant staging shows no retry:\n%s", out)
	}
	if out := ctl.run("get", "tenants", "--server", s.URL()); !regexp.MustCompile(`(?m)^staging .* False +no etcd backup +Retrying: attempt \d+ failed \(StateLocked\), next `).MatchString(out) {
		t.Errorf("rezusctl get tenants does not show staging not ready:\n%s", out)
	}

	released := time.Now()
	if code, body := s.Request("UNLOCK", "/tfstate/staging", lock, ciAuth); code != http.StatusOK {
		t.Fatalf("UNLOCK as ci: %d %s", code, body)
	}
	s.WaitFor("staging's third machine", func() bool { return e2eCounts(s.machines(""))["staging/workers"] == 2 })
	if took := time.Since(released); took > time.Minute {
		t.Errorf("the change arrived %v after the lock was released, want within a minute", took)
	}
	t.Logf("the change arrived %v after the lock was released", time.Since(released).Round(time.Millisecond))
	s.WaitFor("the commit to succeed", func() bool { c, _ = s.Commit(sha); return c.Status.Phase == schema.CommitSucceeded })
	if r := e2eResult(t, c, "staging"); r.Plan.Add != 1 || !r.NextAttemptAt.IsZero() {
		t.Errorf("staging after the retry: %+v", r)
	}
	var after schema.Tenant
	s.mustGet("/api/v1/tenants/staging", &after)
	if after.Status.Retry != nil || after.Status.ObservedCommit != sha {
		t.Errorf("staging after the retry: retry %+v, observed %s", after.Status.Retry, after.Status.ObservedCommit)
	}
	if st := s.status(); st.Source.Revision != sha || st.Reconciler.LastAppliedCommit != sha {
		t.Errorf("status: source at %s, last applied %s; want both %s and no other commit", st.Source.Revision, st.Reconciler.LastAppliedCommit, sha)
	}
	_, metrics := s.Request(http.MethodGet, "/metrics", nil, nil)
	if !regexp.MustCompile(`rezuscloud_tenant_retries_total\{reason="StateLocked",tenant="staging"\} [1-9]`).Match(metrics) {
		t.Errorf("/metrics counts no retry of staging:\n%s", grepLines(metrics, "retries"))
	}
}

// grepLines returns the lines of b that contain s.
func grepLines(b []byte, s string) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// ctlBinary is the rezusctl binary of the tests, with the admin token the
// test's client uses.
type ctlBinary struct {
	t     *testing.T
	path  string
	token string
}

// rezusctl builds rezusctl (with rezuscloud, once per test) and returns it.
func rezusctl(t *testing.T) ctlBinary {
	t.Helper()
	c, ok := http.DefaultClient.Transport.(crashAuth)
	if !ok {
		t.Fatal("rezusctl: the test's client carries no token")
	}
	return ctlBinary{t: t, path: filepath.Join(cliBinaries(t), "rezusctl"), token: c.token}
}

func (c ctlBinary) run(args ...string) string {
	c.t.Helper()
	cmd := exec.Command(c.path, args...)
	cmd.Env = []string{"HOME=" + c.t.TempDir(), "REZUSCLOUD_TOKEN=" + c.token, "NO_COLOR=1"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		c.t.Fatalf("rezusctl %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}
