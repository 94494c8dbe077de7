package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/gittest"
	"github.com/rezuscloud/rezuscloud/schema"
)

// forgeInstance is the --instance of the servers that report to a forge.
const forgeInstance = "e2e"

// newE2EAt is newE2E with the bare repository at repoName, a path such as
// "acme/infra.git" that makes the git:// URL look like a forge's, so that
// reporters derive owner and repository from it.
func newE2EAt(t *testing.T, repoName string, opts e2eOptions) *e2e {
	t.Helper()
	e := &e2e{t: t, daemon: gittest.NewDaemon(t), data: filepath.Join(t.TempDir(), "data")}
	e.daemon.CreateBare(repoName)
	e.repo = e.daemon.URL(repoName)
	e.work = gittest.NewWorkdir(t, e.repo)
	e.copyExamples()
	e.work.Write("README.md", "# Clusters\n\nManifests live under clusters/.\n")
	e.first = e.push("Example tenants production and staging")
	e.srv = newE2EServer(t, e.options(opts))
	e.srv.Start()
	if !opts.noWait {
		if c := e.srv.waitApplied(e.first); c.Status.Phase != schema.CommitSucceeded {
			t.Fatalf("first commit: phase %s, want Succeeded", c.Status.Phase)
		}
	}
	return e
}

// forgeStatus is one commit status the fake forge accepted.
type forgeStatus struct {
	SHA         string
	State       string `json:"state"`
	TargetURL   string `json:"target_url"`
	Description string `json:"description"`
	Context     string `json:"context"`
}

// fakeForge is the statuses API of GitHub (POST
// /repos/OWNER/REPO/statuses/SHA) as an httptest server: it checks every
// request the way GitHub would, records the statuses it accepts, and can be
// told to fail with 500s.
type fakeForge struct {
	t     *testing.T
	srv   *httptest.Server
	token string
	path  *regexp.Regexp

	mu       sync.Mutex
	statuses []forgeStatus
	failing  bool
	failed   map[string]int // sha -> requests answered 500
}

func newFakeForge(t *testing.T, owner, repo, token string) *fakeForge {
	t.Helper()
	f := &fakeForge{
		t:      t,
		token:  token,
		path:   regexp.MustCompile(`^/repos/` + regexp.QuoteMeta(owner) + `/` + regexp.QuoteMeta(repo) + `/statuses/([0-9a-f]{40})$`),
		failed: map[string]int{},
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeForge) serve(w http.ResponseWriter, r *http.Request) {
	fail := func(code int, format string, args ...any) {
		f.t.Errorf("fake forge: %s %s: %s", r.Method, r.URL.Path, fmt.Sprintf(format, args...))
		http.Error(w, `{"message":"bad request"}`, code)
	}
	m := f.path.FindStringSubmatch(r.URL.Path)
	switch {
	case r.Method != http.MethodPost:
		fail(http.StatusMethodNotAllowed, "want POST")
		return
	case m == nil:
		fail(http.StatusNotFound, "want /repos/OWNER/REPO/statuses/SHA")
		return
	case r.Header.Get("Authorization") != "Bearer "+f.token:
		fail(http.StatusUnauthorized, "Authorization %q, want the Bearer token", r.Header.Get("Authorization"))
		return
	case !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json"):
		fail(http.StatusUnsupportedMediaType, "Content-Type %q", r.Header.Get("Content-Type"))
		return
	}
	s := forgeStatus{SHA: m[1]}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		fail(http.StatusUnprocessableEntity, "body: %v", err)
		return
	}
	switch {
	case s.State != "pending" && s.State != "success" && s.State != "failure" && s.State != "error":
		fail(http.StatusUnprocessableEntity, "state %q", s.State)
		return
	case !strings.HasPrefix(s.Context, "rezuscloud/"+forgeInstance):
		fail(http.StatusUnprocessableEntity, "context %q", s.Context)
		return
	case len([]rune(s.Description)) > 140 || strings.ContainsAny(s.Description, "\n\r"):
		fail(http.StatusUnprocessableEntity, "description %q is not one line of at most 140 characters", s.Description)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing {
		f.failed[s.SHA]++
		http.Error(w, `{"message":"Server Error"}`, http.StatusInternalServerError)
		return
	}
	f.statuses = append(f.statuses, s)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":%d,"state":%q,"context":%q}`, len(f.statuses), s.State, s.Context)
}

// setFailing makes the forge answer every status with 500, or stop doing so.
func (f *fakeForge) setFailing(b bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing = b
}

// failures returns how many statuses of sha the forge refused with 500.
func (f *fakeForge) failures(sha string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed[sha]
}

// history returns the states accepted for sha under context, in order.
func (f *fakeForge) history(sha, context string) []forgeStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []forgeStatus
	for _, s := range f.statuses {
		if s.SHA == sha && s.Context == context {
			out = append(out, s)
		}
	}
	return out
}

// contexts returns the contexts with statuses for sha.
func (f *fakeForge) contexts(sha string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := map[string]bool{}
	for _, s := range f.statuses {
		if s.SHA == sha {
			seen[s.Context] = true
		}
	}
	return e2eKeys(seen)
}

// waitFinal waits until the last status of sha under context has state,
// and returns it.
func (f *fakeForge) waitFinal(sha, context, state string) forgeStatus {
	f.t.Helper()
	deadline := time.Now().Add(e2eTimeout)
	for {
		if h := f.history(sha, context); len(h) > 0 && h[len(h)-1].State == state {
			return h[len(h)-1]
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("the forge has no %s status %s on %s after %v; it has %+v", state, context, sha[:12], e2eTimeout, f.history(sha, context))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkFinal checks that a context's statuses end in success and that
// nothing but pending came before it.
func (f *fakeForge) checkFinal(sha, context, url string) forgeStatus {
	f.t.Helper()
	last := f.waitFinal(sha, context, "success")
	for _, s := range f.history(sha, context) {
		if s.TargetURL != url {
			f.t.Errorf("%s on %s: target_url %q, want %q", context, sha[:12], s.TargetURL, url)
		}
	}
	h := f.history(sha, context)
	for _, s := range h[:len(h)-1] {
		if s.State != "pending" {
			f.t.Errorf("%s on %s: %s before the final success: %+v", context, sha[:12], s.State, h)
		}
	}
	return last
}

// notesOf clones the repository afresh, fetches refs/notes/rezuscloud and
// returns `git log --notes=rezuscloud -1 SHA`, or "" while there is no
// notes ref.
func notesOf(t *testing.T, repo, sha string) string {
	t.Helper()
	w := gittest.NewWorkdir(t, repo)
	if out := w.Run("ls-remote", "origin", "refs/notes/rezuscloud"); out == "" {
		return ""
	}
	w.Run("fetch", "--quiet", "origin", "refs/notes/rezuscloud:refs/notes/rezuscloud")
	return w.Run("log", "--notes=rezuscloud", "-1", sha)
}

// waitNotes waits until the notes of sha hold every line of want.
func waitNotes(t *testing.T, repo, sha string, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(e2eTimeout)
	for {
		log := notesOf(t, repo, sha)
		missing := ""
		for _, w := range want {
			if !strings.Contains(log, "\n    "+w+"\n") && !strings.HasSuffix(log, "\n    "+w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return log
		}
		if time.Now().After(deadline) {
			t.Fatalf("git notes of %s lack %q after %v:\n%s", sha[:12], missing, e2eTimeout, log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestReports runs the server with --report github,git-notes against a
// fake GitHub and the git daemon, following git://…/acme/infra.git. Every
// applied commit gets statuses rezuscloud/e2e and rezuscloud/e2e/TENANT
// that end in success, on the forge and as git notes under
// refs/notes/rezuscloud. While the forge answers 500, commits still apply
// and the notes still arrive; once it recovers, the final statuses are
// delivered.
func TestReports(t *testing.T) {
	const token = "ghp_e2eForgeToken0123456789abcdef"
	forge := newFakeForge(t, "acme", "infra", token)
	e := newE2EAt(t, "acme/infra.git", e2eOptions{
		args: []string{"--report", "github,git-notes", "--github-api-url", forge.srv.URL, "--instance", forgeInstance,
			"--external-url", "https://rezus.example/"},
		env: []string{"REZUSCLOUD_GITHUB_TOKEN=" + token},
	})
	s := e.srv
	commitCtx := "rezuscloud/" + forgeInstance
	tenantCtx := func(tenant string) string { return commitCtx + "/" + tenant }
	// Statuses link to the commit's dashboard page at --external-url.
	target := func(sha string) string { return "https://rezus.example/commits/" + sha }

	t.Run("first commit", func(t *testing.T) {
		for _, ctx := range []string{commitCtx, tenantCtx("production"), tenantCtx("staging")} {
			forge.checkFinal(e.first, ctx, target(e.first))
		}
		if got, want := forge.contexts(e.first), []string{commitCtx, tenantCtx("production"), tenantCtx("staging")}; strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("contexts on the first commit %v, want %v", got, want)
		}
		waitNotes(t, e.repo, e.first, commitCtx+": success applied 2 tenants: machines +7, other +2",
			tenantCtx("production")+": success applied: machines +5, other +1",
			tenantCtx("staging")+": success applied: machines +2, other +1")
	})

	e.setCount("production", "workers", 3)
	up := e.push("Scale production workers to 3")
	t.Run("scale up", func(t *testing.T) {
		c := s.waitApplied(up)
		if r := e2eResult(t, c, "production"); r.Plan != (schema.PlanSummary{Add: 1, Machines: schema.PlanCounts{Add: 1}}) {
			t.Fatalf("production plan %s, want +1 ~0 -0", r.Plan)
		}
		got := forge.checkFinal(up, tenantCtx("production"), target(up))
		if got.Description != "applied: machines +1" {
			t.Errorf("production status %q, want \"applied: machines +1\"", got.Description)
		}
		if got := forge.checkFinal(up, commitCtx, target(up)); !strings.Contains(got.Description, "machines +1") {
			t.Errorf("commit status %q does not show the plan, machines +1", got.Description)
		}
		log := waitNotes(t, e.repo, up, tenantCtx("production")+": success applied: machines +1")
		if !strings.Contains(log, "Scale production workers to 3") {
			t.Errorf("git log of %s does not show the commit:\n%s", up[:12], log)
		}
	})

	forge.setFailing(true)
	e.setCount("production", "workers", 2)
	down := e.push("Scale production workers back to 2")
	t.Run("failing forge", func(t *testing.T) {
		c := s.waitApplied(down)
		if r := e2eResult(t, c, "production"); r.Plan != (schema.PlanSummary{Destroy: 1, Machines: schema.PlanCounts{Destroy: 1}}) {
			t.Fatalf("production plan %s while the forge fails, want +0 ~0 -1", r.Plan)
		}
		// The notes do not wait for the forge.
		waitNotes(t, e.repo, down, tenantCtx("production")+": success applied: machines -1")
		s.WaitFor("the forge to have refused a status of "+down[:12], func() bool { return forge.failures(down) > 0 })
		if h := forge.history(down, commitCtx); len(h) != 0 {
			t.Fatalf("the failing forge accepted %+v", h)
		}
		forge.setFailing(false)
		got := forge.checkFinal(down, tenantCtx("production"), target(down))
		if got.Description != "applied: machines -1" {
			t.Errorf("production status after the forge recovered %q, want \"applied: machines -1\"", got.Description)
		}
		forge.checkFinal(down, commitCtx, target(down))
		t.Logf("the forge refused %d statuses of %s before it recovered", forge.failures(down), down[:12])
	})

	if strings.Contains(s.Log(), token) {
		t.Error("the server log holds the forge token")
	}
}
