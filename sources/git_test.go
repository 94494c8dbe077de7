package sources

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/gittest"
)

// syncBuffer collects log output written from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testLogger(t *testing.T) (*slog.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("source log:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

func newTestGit(t *testing.T, opts GitOptions) *Git {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.Logger == nil {
		opts.Logger, _ = testLogger(t)
	}
	g, err := NewGit(opts)
	if err != nil {
		t.Fatalf("NewGit: %v", err)
	}
	return g
}

func mustFetch(t *testing.T, g *Git) (Snapshot, bool) {
	t.Helper()
	snap, changed, err := g.Fetch(context.Background())
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	return snap, changed
}

func readFile(t *testing.T, fsys fs.FS, name string) string {
	t.Helper()
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return string(b)
}

// seedRepo creates repo.git on d with one commit and returns the work tree
// and the commit's sha.
func seedRepo(t *testing.T, d *gittest.Daemon) (*gittest.Workdir, string) {
	t.Helper()
	d.CreateBare("repo.git")
	w := gittest.NewWorkdir(t, d.URL("repo.git"))
	w.Write("clusters/a/tenant.yaml", "kind: Tenant\nname: a\n")
	w.Write("README.md", "readme\n")
	sha := w.Commit("Add tenant a\n\nLonger body.\n\nSigned-off-by: Ann <ann@example.com>\n")
	w.Push()
	return w, sha
}

func TestGitFirstFetchAndNoChange(t *testing.T) {
	d := gittest.NewDaemon(t)
	_, sha := seedRepo(t, d)
	g := newTestGit(t, GitOptions{URL: d.URL("repo.git")})

	snap, changed := mustFetch(t, g)
	if !changed {
		t.Fatal("first Fetch: changed = false")
	}
	if snap.Revision != sha || snap.Ref != "refs/heads/main" || snap.Source != d.URL("repo.git") || snap.Root != "." {
		t.Fatalf("snapshot = %+v", snap)
	}
	if snap.Author != "Gittest Author <author@gittest.invalid>" {
		t.Fatalf("Author = %q", snap.Author)
	}
	wantMsg := "Add tenant a\n\nLonger body.\n\nSigned-off-by: Ann <ann@example.com>\n"
	if snap.Message != wantMsg {
		t.Fatalf("Message = %q, want %q", snap.Message, wantMsg)
	}
	if snap.Time.IsZero() || time.Since(snap.Time) > time.Hour {
		t.Fatalf("Time = %v", snap.Time)
	}
	if got := readFile(t, snap.FS, "clusters/a/tenant.yaml"); got != "kind: Tenant\nname: a\n" {
		t.Fatalf("tenant.yaml = %q", got)
	}
	st := g.Status()
	if st.Fetches != 1 || st.Polls != 1 || st.Revision != sha || st.LastError != "" || st.LastSuccess.IsZero() {
		t.Fatalf("status after first fetch = %+v", st)
	}

	// The clone lives under Dir/git with owner-only permissions.
	info, err := os.Stat(g.CloneDir())
	if err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("clone dir %s: %v, %v", g.CloneDir(), info.Mode(), err)
	}

	conns := d.Connections()
	for range 3 {
		again, changed := mustFetch(t, g)
		if changed {
			t.Fatal("Fetch without a new commit: changed = true")
		}
		if again.Revision != sha {
			t.Fatalf("unchanged Revision = %s, want %s", again.Revision, sha)
		}
	}
	st = g.Status()
	if st.Fetches != 1 || st.Polls != 4 {
		t.Fatalf("after three polls without change: Fetches = %d, Polls = %d; want 1 and 4", st.Fetches, st.Polls)
	}
	if got := d.Connections() - conns; got != 3 {
		t.Fatalf("three polls without change opened %d connections, want 3 (one ls-remote each)", got)
	}
}

func TestGitNewCommit(t *testing.T) {
	d := gittest.NewDaemon(t)
	w, first := seedRepo(t, d)
	g := newTestGit(t, GitOptions{URL: d.URL("repo.git")})
	mustFetch(t, g)

	w.Write("clusters/b/tenant.yaml", "kind: Tenant\nname: b\n")
	w.Remove("README.md")
	second := w.Commit("Add tenant b")
	w.Push()

	snap, changed := mustFetch(t, g)
	if !changed || snap.Revision != second {
		t.Fatalf("after a push: changed = %v, Revision = %s, want true, %s", changed, snap.Revision, second)
	}
	if got := readFile(t, snap.FS, "clusters/b/tenant.yaml"); got != "kind: Tenant\nname: b\n" {
		t.Fatalf("new file = %q", got)
	}
	if _, err := fs.Stat(snap.FS, "README.md"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("removed file: Stat error = %v, want ErrNotExist", err)
	}
	if g.Status().Fetches != 2 {
		t.Fatalf("Fetches = %d, want 2", g.Status().Fetches)
	}

	// The old snapshot's file system still reads the old tree.
	old, _, err := OpenRevision(d.Path("repo.git"), first)
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, old, "README.md"); got != "readme\n" {
		t.Fatalf("old README = %q", got)
	}
}

func TestGitSnapshotSurvivesLaterFetch(t *testing.T) {
	d := gittest.NewDaemon(t)
	w, first := seedRepo(t, d)
	g := newTestGit(t, GitOptions{URL: d.URL("repo.git")})
	snap1, _ := mustFetch(t, g)

	// Read the first snapshot concurrently with fetches of new commits
	// into the same clone.
	done := make(chan error)
	go func() {
		for range 50 {
			if b, err := fs.ReadFile(snap1.FS, "README.md"); err != nil || string(b) != "readme\n" {
				done <- errors.Join(err, errors.New("README changed: "+string(b)))
				return
			}
			if _, err := fs.ReadDir(snap1.FS, "clusters/a"); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i := range 3 {
		w.Write("README.md", strings.Repeat("x", i+1))
		w.Commit("edit")
		w.Push()
		mustFetch(t, g)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if snap1.Revision != first {
		t.Fatalf("Revision = %s", snap1.Revision)
	}
}

func TestGitTag(t *testing.T) {
	d := gittest.NewDaemon(t)
	w, first := seedRepo(t, d)
	w.Tag("v1", "release 1")
	w.Tag("light", "")
	second := w.Commit("after the tag")
	w.Push()

	for _, tag := range []string{"v1", "light"} {
		g := newTestGit(t, GitOptions{URL: d.URL("repo.git"), Tag: tag})
		snap, _ := mustFetch(t, g)
		if snap.Revision != first || snap.Ref != "refs/tags/"+tag {
			t.Fatalf("tag %s: Revision = %s, Ref = %s; want %s", tag, snap.Revision, snap.Ref, first)
		}
	}

	// A moved tag is followed.
	g := newTestGit(t, GitOptions{URL: d.URL("repo.git"), Tag: "v1"})
	mustFetch(t, g)
	w.Tag("v1", "release 1, again")
	snap, changed := mustFetch(t, g)
	if !changed || snap.Revision != second {
		t.Fatalf("moved tag: changed = %v, Revision = %s; want true, %s", changed, snap.Revision, second)
	}

	g = newTestGit(t, GitOptions{URL: d.URL("repo.git"), Tag: "nope"})
	if _, _, err := g.Fetch(context.Background()); !errors.Is(err, ErrRefNotFound) || !strings.Contains(err.Error(), "tag nope") {
		t.Fatalf("missing tag: err = %v", err)
	}
	d.CreateBare("empty.git")
	g = newTestGit(t, GitOptions{URL: d.URL("empty.git")})
	if _, _, err := g.Fetch(context.Background()); !errors.Is(err, ErrRefNotFound) || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty repository: err = %v", err)
	}
	g = newTestGit(t, GitOptions{URL: d.URL("missing.git")})
	if _, _, err := g.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "missing.git") {
		t.Fatalf("missing repository: err = %v", err)
	}
	g = newTestGit(t, GitOptions{URL: d.URL("repo.git"), Branch: "dev"})
	if _, _, err := g.Fetch(context.Background()); !errors.Is(err, ErrRefNotFound) || !strings.Contains(err.Error(), "branch dev") {
		t.Fatalf("missing branch: err = %v", err)
	}
}

func TestGitPinnedCommit(t *testing.T) {
	d := gittest.NewDaemon(t)
	w, first := seedRepo(t, d)
	w.Commit("second")
	w.Push()

	g := newTestGit(t, GitOptions{URL: d.URL("repo.git"), Commit: strings.ToUpper(first)})
	snap, changed := mustFetch(t, g)
	if !changed || snap.Revision != first || snap.Ref != first {
		t.Fatalf("pinned: changed = %v, Revision = %s, Ref = %s", changed, snap.Revision, snap.Ref)
	}
	conns := d.Connections()
	if _, changed := mustFetch(t, g); changed {
		t.Fatal("pinned commit changed")
	}
	if d.Connections() != conns {
		t.Fatal("a pinned commit polled the remote again")
	}

	missing := strings.Repeat("ab", 20)
	g = newTestGit(t, GitOptions{URL: d.URL("repo.git"), Commit: missing})
	if _, _, err := g.Fetch(context.Background()); !errors.Is(err, ErrRefNotFound) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("unknown commit: err = %v", err)
	}
}

func TestGitPath(t *testing.T) {
	d := gittest.NewDaemon(t)
	w, _ := seedRepo(t, d)
	g := newTestGit(t, GitOptions{URL: d.URL("repo.git"), Path: "/clusters/"})
	snap, _ := mustFetch(t, g)
	if snap.Root != "clusters" {
		t.Fatalf("Root = %q, want clusters", snap.Root)
	}
	sub, err := fs.Sub(snap.FS, snap.Root)
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, sub, "a/tenant.yaml"); got != "kind: Tenant\nname: a\n" {
		t.Fatalf("a/tenant.yaml = %q", got)
	}

	// A commit without the path is an error, not an empty snapshot.
	w.Remove("clusters")
	bad := w.Commit("remove clusters")
	w.Push()
	_, _, err = g.Fetch(context.Background())
	if !errors.Is(err, ErrPathNotFound) || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "clusters") {
		t.Fatalf("missing path: err = %v", err)
	}
	if st := g.Status(); st.Revision != snap.Revision || st.Failures != 1 {
		t.Fatalf("status after a commit without the path = %+v", st)
	}
	if g.delay(err) != g.interval {
		t.Fatalf("a missing path backs off (%v): it needs a new commit, not a retry", g.delay(err))
	}

	w.Write("clusters", "a file now\n")
	w.Commit("clusters is a file")
	w.Push()
	if _, _, err := g.Fetch(context.Background()); !errors.Is(err, ErrPathNotFound) || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("path is a file: err = %v", err)
	}

	for _, p := range []string{"../x", "a/../../b"} {
		if _, err := NewGit(GitOptions{URL: d.URL("repo.git"), Dir: t.TempDir(), Path: p}); err == nil {
			t.Fatalf("NewGit accepted path %q", p)
		}
	}
}

// TestGitForcePush: the source follows a force push to an older commit and
// a rewrite, and each snapshot tells from the clone alone which commits it
// descends from.
func TestGitForcePush(t *testing.T) {
	d := gittest.NewDaemon(t)
	w, first := seedRepo(t, d)
	w.Commit("second")
	second := w.Commit("third")
	w.Push()

	g := newTestGit(t, GitOptions{URL: d.URL("repo.git")})
	snap, _ := mustFetch(t, g)
	if snap.Revision != second {
		t.Fatalf("Revision = %s, want %s", snap.Revision, second)
	}
	wantDescends(t, snap, first, true)
	wantDescends(t, snap, second, true)

	w.Reset(first)
	w.ForcePush("main")
	snap, changed := mustFetch(t, g)
	if !changed || snap.Revision != first {
		t.Fatalf("force push to an older commit: changed = %v, Revision = %s", changed, snap.Revision)
	}
	wantDescends(t, snap, second, false)
	// Going back to the old commit is not a fetch: the clone holds it.
	if g.Status().Fetches != 1 {
		t.Fatalf("Fetches = %d, want 1", g.Status().Fetches)
	}

	// A rewrite onto a new branch of history.
	w.Write("rewritten.yaml", "x: 1\n")
	w.Run("commit", "--quiet", "--amend", "-m", "rewritten")
	sha := w.Rev("HEAD")
	w.ForcePush("main")
	snap, changed = mustFetch(t, g)
	if !changed || snap.Revision != sha {
		t.Fatalf("amend + force push: changed = %v, Revision = %s", changed, snap.Revision)
	}
	wantDescends(t, snap, first, false)
	wantDescends(t, snap, second, false)

	// A normal push after that is a fast-forward again.
	next := w.Commit("next")
	w.Push()
	snap, _ = mustFetch(t, g)
	if snap.Revision != next {
		t.Fatalf("fast-forward after a rewrite: Revision = %s, want %s", snap.Revision, next)
	}
	wantDescends(t, snap, sha, true)
	wantDescends(t, snap, first, false)
	// What the clone never held is no ancestor: a sha of no commit, a
	// revision of a directory.
	wantDescends(t, snap, strings.Repeat("0", 40), false)
	wantDescends(t, snap, "sha256:"+strings.Repeat("a", 64), false)
}

// TestGitDescendsAfterRestart: a source started anew on the data directory
// (a server restart) answers from the clone it finds, which still holds
// the commit the ref was force-pushed away from while it was stopped; one
// on a new data directory, whose clone never held that commit, gives the
// same answer.
func TestGitDescendsAfterRestart(t *testing.T) {
	d := gittest.NewDaemon(t)
	w, first := seedRepo(t, d)
	second := w.Commit("second")
	w.Push()
	dir := t.TempDir()
	snap, _ := mustFetch(t, newTestGit(t, GitOptions{URL: d.URL("repo.git"), Dir: dir}))
	wantDescends(t, snap, first, true)

	w.Reset(first)
	w.ForcePush("main")
	for _, dir := range []string{dir, t.TempDir()} {
		snap, _ := mustFetch(t, newTestGit(t, GitOptions{URL: d.URL("repo.git"), Dir: dir}))
		if snap.Revision != first {
			t.Fatalf("after the force push: Revision = %s, want %s", snap.Revision, first)
		}
		wantDescends(t, snap, second, false)
	}
}

// wantDescends checks snap.Descends(rev).
func wantDescends(t *testing.T, snap Snapshot, rev string, want bool) {
	t.Helper()
	got, err := snap.Descends(rev)
	if err != nil || got != want {
		t.Fatalf("%s descends from %s: %v, %v; want %v", snap.Revision[:12], rev, got, err, want)
	}
}

// A second source on the same URL and data directory shares the clone: it
// needs no fetch for what the first already has.
func TestGitSharedClone(t *testing.T) {
	d := gittest.NewDaemon(t)
	w, _ := seedRepo(t, d)
	dir := t.TempDir()
	a := newTestGit(t, GitOptions{URL: d.URL("repo.git"), Dir: dir})
	b := newTestGit(t, GitOptions{URL: d.URL("repo.git"), Dir: dir})
	mustFetch(t, a)
	mustFetch(t, b)
	if b.Status().Fetches != 0 {
		t.Fatalf("second source fetched %d times, want 0", b.Status().Fetches)
	}
	next := w.Commit("next")
	w.Push()
	mustFetch(t, a)
	if snap, changed := mustFetch(t, b); !changed || snap.Revision != next || b.Status().Fetches != 0 {
		t.Fatalf("second source after the first fetched: changed = %v, Revision = %s, Fetches = %d",
			changed, snap.Revision, b.Status().Fetches)
	}
}

func TestGitOutageAndRecovery(t *testing.T) {
	d := gittest.NewDaemon(t)
	w, first := seedRepo(t, d)
	interval := 50 * time.Millisecond
	g := newTestGit(t, GitOptions{URL: d.URL("repo.git"), PollInterval: interval, MaxBackoff: 8 * interval, Timeout: 5 * time.Second})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan Snapshot, 10)
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx, out) }()

	if snap := receive(t, out); snap.Revision != first {
		t.Fatalf("first snapshot %s, want %s", snap.Revision, first)
	}

	// The wait before the next poll doubles with every failure, up to
	// MaxBackoff.
	d.Stop()
	want := []time.Duration{2 * interval, 4 * interval, 8 * interval, 8 * interval}
	for i, w := range want {
		var st Status
		waitFor(t, "failure and next poll", func() bool {
			st = g.Status()
			return st.Failures == i+1 && st.NextPoll.After(st.LastFetch)
		})
		got := st.NextPoll.Sub(st.LastFetch)
		if got < w || got > w+3*interval {
			t.Fatalf("wait after %d failures = %v, want %v", i+1, got, w)
		}
		if st.LastError == "" || !strings.Contains(st.LastError, d.URL("repo.git")) {
			t.Fatalf("LastError = %q", st.LastError)
		}
		if st.Revision != first || !st.LastSuccess.Before(st.LastFetch) {
			t.Fatalf("status during the outage = %+v", st)
		}
	}
	select {
	case s := <-out:
		t.Fatalf("a snapshot during the outage: %+v", s)
	default:
	}

	// The repository comes back with a new commit: the source recovers by
	// itself.
	d.Start()
	second := w.Commit("while it was down")
	w.Push()
	if snap := receive(t, out); snap.Revision != second {
		t.Fatalf("after recovery: %s, want %s", snap.Revision, second)
	}
	waitFor(t, "failures reset", func() bool { return g.Status().Failures == 0 })
	if st := g.Status(); st.LastError != "" || st.Revision != second {
		t.Fatalf("status after recovery = %+v", st)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v", err)
	}
}

func TestGitBackoffDelays(t *testing.T) {
	g, err := NewGit(GitOptions{URL: "git://127.0.0.1:1/x", Dir: t.TempDir(), PollInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fail := errors.New("unreachable")
	want := []time.Duration{2, 4, 8, 10, 10}
	for i, w := range want {
		g.status.Failures = i + 1
		if got := g.delay(fail); got != w*time.Second {
			t.Fatalf("delay after %d failures = %v, want %v", i+1, got, w*time.Second)
		}
	}
	g.status.Failures = 0
	if got := g.delay(nil); got != time.Second {
		t.Fatalf("delay after success = %v", got)
	}
	g, _ = NewGit(GitOptions{URL: "git://127.0.0.1:1/x", Dir: t.TempDir()})
	g.status.Failures = 100
	if got := g.delay(fail); got != 5*time.Minute {
		t.Fatalf("default cap = %v, want 5m", got)
	}
}

func TestGitTriggerCoalesces(t *testing.T) {
	d := gittest.NewDaemon(t)
	w, _ := seedRepo(t, d)
	g := newTestGit(t, GitOptions{URL: d.URL("repo.git"), PollInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan Snapshot, 10)
	go g.Run(ctx, out)
	receive(t, out)
	waitFor(t, "Run waiting", func() bool { return !g.Status().NextPoll.IsZero() })

	second := w.Commit("second")
	w.Push()
	polls := g.Status().Polls
	for range 1000 {
		g.Trigger()
	}
	if snap := receive(t, out); snap.Revision != second {
		t.Fatalf("after Trigger: %s, want %s", snap.Revision, second)
	}
	time.Sleep(200 * time.Millisecond)
	if n := g.Status().Polls - polls; n < 1 || n > 2 {
		t.Fatalf("1000 triggers made %d polls, want 1 or 2", n)
	}
}

func TestGitOptionsErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		opts GitOptions
		want string
	}{
		{GitOptions{Dir: dir}, "no repository URL"},
		{GitOptions{URL: "git://h/r", Dir: dir, Branch: "a", Tag: "b"}, "only one of"},
		{GitOptions{URL: "git://h/r", Dir: dir, Commit: "abc"}, "full 40-character sha"},
		{GitOptions{URL: "git://h/r", Dir: dir, Branch: "a..b"}, "refs/heads/a..b"},
		{GitOptions{URL: "git://h/r"}, "no data directory"},
		{GitOptions{URL: "ftp://h/r", Dir: dir}, "unsupported scheme"},
		{GitOptions{URL: "git://h/r", Dir: dir, PollInterval: -1}, "negative"},
		{GitOptions{URL: "ssh://git:pw@h/r", Dir: dir}, "password in a ssh URL"},
	}
	for _, c := range cases {
		_, err := NewGit(c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewGit(%+v) = %v, want an error containing %q", c.opts, err, c.want)
		}
	}
}

func TestGitRunTwice(t *testing.T) {
	d := gittest.NewDaemon(t)
	seedRepo(t, d)
	g := newTestGit(t, GitOptions{URL: d.URL("repo.git")})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan Snapshot, 1)
	go g.Run(ctx, out)
	receive(t, out)
	if err := g.Run(ctx, out); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("second Run = %v", err)
	}
}

func receive(t *testing.T, out <-chan Snapshot) Snapshot {
	t.Helper()
	select {
	case s := <-out:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no snapshot within 10s")
		return Snapshot{}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Every fetch adds a pack; past maxPacks they are merged into one, and
// snapshots taken before still read their files.
func TestGitCompaction(t *testing.T) {
	d := gittest.NewDaemon(t)
	w, _ := seedRepo(t, d)
	g := newTestGit(t, GitOptions{URL: d.URL("repo.git")})
	g.maxPacks = 4
	var snaps []Snapshot
	var contents []string
	packs := func() int {
		m, err := filepath.Glob(filepath.Join(g.CloneDir(), "objects", "pack", "*.pack"))
		if err != nil {
			t.Fatal(err)
		}
		return len(m)
	}
	maxSeen, merges := 0, 0
	for i := range g.maxPacks + 4 {
		content := fmt.Sprintf("rev: %d\n", i)
		w.Write("clusters/a/tenant.yaml", content)
		w.Commit("edit")
		w.Push()
		snap, changed := mustFetch(t, g)
		if !changed {
			t.Fatal("no change")
		}
		snaps, contents = append(snaps, snap), append(contents, content)
		n := packs()
		maxSeen = max(maxSeen, n)
		if n == 1 {
			merges++
		}
	}
	if maxSeen > g.maxPacks || merges == 0 {
		t.Fatalf("the clone held up to %d packs and was merged %d times; want at most %d packs", maxSeen, merges, g.maxPacks)
	}
	for i, snap := range snaps {
		if got := readFile(t, snap.FS, "clusters/a/tenant.yaml"); got != contents[i] {
			t.Fatalf("snapshot %d after the merge reads %q, want %q", i, got, contents[i])
		}
		if got := readFile(t, snap.FS, "README.md"); got != "readme\n" {
			t.Fatalf("snapshot %d README = %q", i, got)
		}
	}
	// A source started later on the same clone reads it as well.
	g2 := newTestGit(t, GitOptions{URL: d.URL("repo.git"), Dir: filepath.Dir(filepath.Dir(g.CloneDir()))})
	snap, _ := mustFetch(t, g2)
	if got := readFile(t, snap.FS, "clusters/a/tenant.yaml"); got != contents[len(contents)-1] || g2.Status().Fetches != 0 {
		t.Fatalf("new source on the merged clone: %q, %d fetches", got, g2.Status().Fetches)
	}
}

// A merge leaves the largest pack alone while it holds at least twice as
// many objects as the others together: it merges what was fetched since,
// and the snapshots taken before still read their files.
func TestGitCompactionKeepsTheLargestPack(t *testing.T) {
	d := gittest.NewDaemon(t)
	w, _ := seedRepo(t, d)
	for i := range 40 {
		w.Write(fmt.Sprintf("clusters/t%02d/tenant.yaml", i), fmt.Sprintf("kind: Tenant\nname: t%02d\n", i))
	}
	w.Commit("forty tenants")
	w.Push()
	g := newTestGit(t, GitOptions{URL: d.URL("repo.git")})
	g.maxPacks = 4
	packs := func() []string {
		m, err := filepath.Glob(filepath.Join(g.CloneDir(), "objects", "pack", "*.pack"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	first, _ := mustFetch(t, g)
	clone := packs()
	var snaps []Snapshot
	for i := range g.maxPacks {
		w.Write("clusters/a/tenant.yaml", fmt.Sprintf("rev: %d\n", i))
		w.Commit("edit")
		w.Push()
		snap, _ := mustFetch(t, g)
		snaps = append(snaps, snap)
	}
	if got := packs(); len(got) != 2 || !slices.Contains(got, clone[0]) {
		t.Fatalf("packs after the merge: %v; want the clone's %v and one more", got, clone)
	}
	for i, snap := range snaps {
		if got := readFile(t, snap.FS, "clusters/a/tenant.yaml"); got != fmt.Sprintf("rev: %d\n", i) {
			t.Fatalf("snapshot %d after the merge reads %q", i, got)
		}
		if got := readFile(t, snap.FS, "clusters/t07/tenant.yaml"); got != "kind: Tenant\nname: t07\n" {
			t.Fatalf("snapshot %d after the merge reads %q", i, got)
		}
	}
	if got := readFile(t, first.FS, "clusters/a/tenant.yaml"); got != "kind: Tenant\nname: a\n" {
		t.Fatalf("the first snapshot after the merge reads %q", got)
	}
}

// Run hands a new revision out before it merges the packs its fetch left
// too many of: the merge rewrites every object of the clone, which takes
// seconds in a large repository, and the revision does not wait for it.
// The snapshot reads its files during and after the merge.
func TestGitRunMergesPacksAfterHandingOut(t *testing.T) {
	d := gittest.NewDaemon(t)
	w, _ := seedRepo(t, d)
	g := newTestGit(t, GitOptions{URL: d.URL("repo.git"), PollInterval: time.Hour})
	g.maxPacks = 2
	packs := func() int {
		m, err := filepath.Glob(filepath.Join(g.CloneDir(), "objects", "pack", "*.pack"))
		if err != nil {
			t.Fatal(err)
		}
		return len(m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan Snapshot) // Run waits in the send until the test receives
	go g.Run(ctx, out)
	receive(t, out)
	for i := 1; i <= g.maxPacks; i++ {
		waitFor(t, "Run waiting", func() bool { return !g.Status().NextPoll.IsZero() })
		content := fmt.Sprintf("rev: %d\n", i)
		w.Write("clusters/a/tenant.yaml", content)
		sha := w.Commit("edit")
		w.Push()
		g.Trigger()
		waitFor(t, "the fetch of "+sha, func() bool { return g.Status().Revision == sha })
		if n := packs(); i == g.maxPacks && n <= g.maxPacks {
			t.Fatalf("the clone holds %d packs while the revision waits to be handed out: its packs were merged first", n)
		}
		snap := receive(t, out)
		if got := readFile(t, snap.FS, "clusters/a/tenant.yaml"); got != content {
			t.Fatalf("revision %d reads %q, want %q", i, got, content)
		}
	}
	waitFor(t, "the packs merged", func() bool { return packs() == 1 })
}
