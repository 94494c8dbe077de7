package sources

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/gittest"
)

const sha256Refusal = "SHA-256 repositories are not supported yet"

// TestGitSHA256Refused: a repository in the SHA-256 object format, served
// by git daemon, by smart HTTP and from a local path, is refused at the
// first poll with an error that says so and names the repository, in the
// poll's error, in Status and in Ready; not with go-git's parse error.
func TestGitSHA256Refused(t *testing.T) {
	d := gittest.NewDaemon(t)
	d.CreateSHA256("sha.git", map[string]string{"clusters/a.yaml": "kind: Tenant\n"})
	h := gittest.NewHTTP(t, httpUser, httpPass)
	h.CreateSHA256("sha.git", nil)
	for _, o := range []GitOptions{
		{URL: d.URL("sha.git")},
		{URL: h.URL("sha.git"), Auth: Auth{Username: httpUser, Password: httpPass}},
		{URL: d.Path("sha.git")},
	} {
		g := newTestGit(t, o)
		_, _, err := g.Fetch(context.Background())
		if !errors.Is(err, ErrSHA256) || !strings.Contains(err.Error(), sha256Refusal) || !strings.Contains(err.Error(), o.URL) ||
			strings.Contains(err.Error(), "pkt-line") {
			t.Fatalf("%s: %v; want %q naming the repository", o.URL, err, sha256Refusal)
		}
		st := g.Status()
		if st.LastError != err.Error() || st.Failures != 1 {
			t.Errorf("%s: status %+v, want the error once", o.URL, st)
		}
		if err := st.Ready(); err == nil || !strings.Contains(err.Error(), sha256Refusal) {
			t.Errorf("%s: Ready: %v, want it to say %q", o.URL, err, sha256Refusal)
		}
	}
}

// TestGitSHA256StopsPolling: Run does not poll a SHA-256 repository again,
// nor log it again, on its own: while a source of a SHA-1 repository with
// the same interval polls ten times, it polls once and schedules nothing;
// a trigger polls it again.
func TestGitSHA256StopsPolling(t *testing.T) {
	d := gittest.NewDaemon(t)
	d.CreateSHA256("sha.git", nil)
	seedRepo(t, d)
	log, buf := testLogger(t)
	sha := newTestGit(t, GitOptions{URL: d.URL("sha.git"), PollInterval: 5 * time.Millisecond, Logger: log})
	ok := newTestGit(t, GitOptions{URL: d.URL("repo.git"), PollInterval: 5 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	t.Cleanup(func() { cancel(); <-done; <-done })
	for _, g := range []*Git{sha, ok} {
		go func() { g.Run(ctx, make(chan Snapshot, 1)); done <- struct{}{} }()
	}
	waitFor(t, "ten polls of the SHA-1 repository", func() bool { return ok.Status().Polls >= 10 })
	st := sha.Status()
	if st.Polls != 1 || !st.NextPoll.IsZero() || !strings.Contains(st.LastError, sha256Refusal) {
		t.Fatalf("SHA-256 repository after ten polls of another: polls %d, next poll %v, last error %q; want 1, none, %q",
			st.Polls, st.NextPoll, st.LastError, sha256Refusal)
	}
	if n := strings.Count(buf.String(), sha256Refusal); n != 1 {
		t.Errorf("the refusal is logged %d times, want once:\n%s", n, buf)
	}
	sha.Trigger()
	waitFor(t, "the triggered poll", func() bool { return sha.Status().Polls == 2 })
}
