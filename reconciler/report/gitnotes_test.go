package report

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-git/go-git/v5"

	"github.com/rezuscloud/rezuscloud/internal/gittest"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
)

// notesRepo is a remote repository with one pushed commit, served by a
// real git daemon.
type notesRepo struct {
	d   *gittest.Daemon
	url string
	w   *gittest.Workdir
	sha string
}

func newNotesRepo(t testing.TB) *notesRepo {
	t.Helper()
	d := gittest.NewDaemon(t)
	d.CreateBare("infra.git")
	w := gittest.NewWorkdir(t, d.URL("infra.git"))
	w.Write("tenants/prod.yaml", "kind: Tenant\n")
	sha := w.Commit("prod")
	w.Push()
	return &notesRepo{d: d, url: d.URL("infra.git"), w: w, sha: sha}
}

// bareClone clones the remote bare with go-git, as the server keeps it.
func (r *notesRepo) bareClone(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "clone")
	if _, err := git.PlainClone(dir, true, &git.CloneOptions{URL: r.url}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// notes reads the note of sha as a fresh clone sees it with the git CLI.
func (r *notesRepo) notes(t *testing.T, sha string) string {
	t.Helper()
	w := gittest.NewWorkdir(t, r.url)
	w.Run("fetch", "--quiet", "origin", "refs/notes/rezuscloud:refs/notes/rezuscloud")
	return w.Run("log", "--notes=rezuscloud", "--format=%N", "-1", sha)
}

// notesCommits counts the commits of the remote's notes ref.
func (r *notesRepo) notesCommits(t *testing.T) string {
	t.Helper()
	return gittest.Git(t, r.d.Path("infra.git"), "rev-list", "--count", "refs/notes/rezuscloud")
}

func newTestNotes(t *testing.T, dir, url string) *GitNotes {
	t.Helper()
	n, err := NewGitNotes(GitNotesOptions{RepoDir: dir, RemoteURL: url})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestGitNotesTwoInstances(t *testing.T) {
	r := newNotesRepo(t)
	ctx := context.Background()
	a := newTestNotes(t, r.bareClone(t), r.url)
	// The second instance keeps a repository of its own, created on use.
	b := newTestNotes(t, filepath.Join(t.TempDir(), "notes"), r.url)
	if a.Name() != "git-notes:"+r.url {
		t.Errorf("Name = %q", a.Name())
	}

	c := commitAt(schema.CommitApplying, false, schema.TenantResult{Tenant: "prod", Phase: schema.CommitApplying})
	c.Spec.SHA = r.sha
	if err := a.ReportAll(ctx, StatusesFor("alpha", c, "")); err != nil {
		t.Fatalf("alpha: %v", err)
	}
	c.Status.Phase = schema.CommitFailed
	c.Status.Tenants = []schema.TenantResult{{Tenant: "prod", Phase: schema.CommitFailed, Error: "tofu apply: exit status 1\nError: quota"}}
	if err := b.ReportAll(ctx, StatusesFor("beta", c, "")); err != nil {
		t.Fatalf("beta: %v", err)
	}
	want := strings.Join([]string{
		"rezuscloud/alpha: running applying 1 tenant",
		"rezuscloud/alpha/prod: running applying",
		"rezuscloud/beta: failure failed: 1 of 1: prod: tofu apply: exit status 1",
		"rezuscloud/beta/prod: failure failed: tofu apply: exit status 1",
	}, "\n")
	if got := r.notes(t, r.sha); got != want {
		t.Fatalf("git log --notes=rezuscloud:\n%s\nwant:\n%s", got, want)
	}

	// alpha finishes: its lines change, beta's stay.
	c.Status.Phase = schema.CommitSucceeded
	c.Status.Tenants = []schema.TenantResult{{Tenant: "prod", Phase: schema.CommitSucceeded, Plan: schema.PlanSummary{Add: 3}}}
	if err := a.ReportAll(ctx, StatusesFor("alpha", c, "")); err != nil {
		t.Fatalf("alpha: %v", err)
	}
	want = strings.Join([]string{
		"rezuscloud/alpha: success applied 1 tenant: +3 ~0 -0",
		"rezuscloud/alpha/prod: success applied: +3 ~0 -0",
		"rezuscloud/beta: failure failed: 1 of 1: prod: tofu apply: exit status 1",
		"rezuscloud/beta/prod: failure failed: tofu apply: exit status 1",
	}, "\n")
	if got := r.notes(t, r.sha); got != want {
		t.Fatalf("git log --notes=rezuscloud:\n%s\nwant:\n%s", got, want)
	}
	if n := r.notesCommits(t); n != "3" {
		t.Fatalf("%s notes commits, want 3: one per report, each on the one before", n)
	}
	// The same report again changes nothing and pushes nothing.
	if err := a.ReportAll(ctx, StatusesFor("alpha", c, "")); err != nil {
		t.Fatal(err)
	}
	if n := r.notesCommits(t); n != "3" {
		t.Fatalf("%s notes commits after a report that changes nothing, want 3", n)
	}
	// The local repositories follow the remote's notes ref.
	head := gittest.Git(t, r.d.Path("infra.git"), "rev-parse", "refs/notes/rezuscloud")
	if got := gittest.Git(t, a.dir, "rev-parse", "refs/notes/rezuscloud"); got != head {
		t.Errorf("alpha's notes ref %s, the remote's %s", got, head)
	}
	if out := gittest.Git(t, a.dir, "for-each-ref", "refs/rezuscloud-push"); out != "" {
		t.Errorf("the push ref is left behind: %s", out)
	}
	author := gittest.Git(t, r.d.Path("infra.git"), "log", "-1", "--format=%an <%ae>|%s", "refs/notes/rezuscloud")
	if author != "RezusCloud <rezuscloud@localhost>|rezuscloud: statuses of "+r.sha[:12] {
		t.Errorf("notes commit %q", author)
	}
}

// Another writer moves the notes ref between this reporter's fetch and
// its push: the push is refused, and the reporter merges again.
func TestGitNotesConcurrentWriter(t *testing.T) {
	r := newNotesRepo(t)
	ctx := context.Background()
	a := newTestNotes(t, r.bareClone(t), r.url)
	b := newTestNotes(t, r.bareClone(t), r.url)
	pushes := 0
	a.beforePush = func() {
		pushes++
		if pushes == 1 {
			if err := b.Report(ctx, Status{SHA: r.sha, Context: "rezuscloud/beta/prod", State: StateSuccess, Description: "no changes"}); err != nil {
				t.Errorf("beta: %v", err)
			}
		}
	}
	if err := a.Report(ctx, Status{SHA: r.sha, Context: "rezuscloud/alpha/prod", State: StatePending, Description: "planning"}); err != nil {
		t.Fatalf("alpha: %v", err)
	}
	if pushes != 2 {
		t.Errorf("alpha pushed %d times, want 2", pushes)
	}
	want := "rezuscloud/alpha/prod: pending planning\nrezuscloud/beta/prod: success no changes"
	if got := r.notes(t, r.sha); got != want {
		t.Fatalf("notes:\n%s\nwant:\n%s", got, want)
	}
	if n := r.notesCommits(t); n != "2" {
		t.Errorf("%s notes commits, want 2", n)
	}
}

// Two servers report at the same time, many times: no line is lost.
func TestGitNotesRace(t *testing.T) {
	r := newNotesRepo(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for _, inst := range []string{"alpha", "beta"} {
		n := newTestNotes(t, r.bareClone(t), r.url)
		wg.Go(func() {
			for i := range 6 {
				s := Status{SHA: r.sha, Context: TenantContext(inst, fmt.Sprintf("t%d", i)), State: StateSuccess, Description: "no changes"}
				if err := n.Report(ctx, s); err != nil {
					errs <- fmt.Errorf("%s: %w", inst, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got := r.notes(t, r.sha)
	var want []string
	for _, inst := range []string{"alpha", "beta"} {
		for i := range 6 {
			want = append(want, fmt.Sprintf("rezuscloud/%s/t%d: success no changes", inst, i))
		}
	}
	if got != strings.Join(want, "\n") {
		t.Fatalf("notes:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

// Notes written by git in the fanned-out layout are read, other lines and
// other commits' notes are kept, and the note is written back flat.
func TestGitNotesFanout(t *testing.T) {
	r := newNotesRepo(t)
	r.w.Write("tenants/dev.yaml", "kind: Tenant\n")
	other := r.w.Commit("dev")
	for other[:2] == r.sha[:2] {
		other = r.w.Commit("dev again")
	}
	r.w.Push()
	// Build a fanned-out notes tree with plumbing: ab/cdef… for both.
	dir := r.w.Dir()
	blob1 := writeCLIBlob(t, dir, "reviewed by alice\nrezuscloud/gamma/prod: success applied: +1 ~0 -0\n")
	blob2 := writeCLIBlob(t, dir, "note on another commit\n")
	sub1 := mktree(t, dir, fmt.Sprintf("100644 blob %s\t%s\n", blob1, r.sha[2:]))
	sub2 := mktree(t, dir, fmt.Sprintf("100644 blob %s\t%s\n", blob2, other[2:]))
	root := mktree(t, dir, fmt.Sprintf("040000 tree %s\t%s\n040000 tree %s\t%s\n", sub1, r.sha[:2], sub2, other[:2]))
	commit := r.w.Run("commit-tree", "-m", "notes by git", root)
	r.w.Run("update-ref", "refs/notes/rezuscloud", commit)
	r.w.Run("push", "--quiet", "origin", "refs/notes/rezuscloud")
	if got := r.notes(t, r.sha); !strings.Contains(got, "reviewed by alice") {
		t.Fatalf("git does not read the fanned-out note: %q", got)
	}

	n := newTestNotes(t, r.bareClone(t), r.url)
	if err := n.Report(context.Background(), Status{SHA: r.sha, Context: "rezuscloud/alpha/prod", State: StateFailure, Description: "failed: x"}); err != nil {
		t.Fatal(err)
	}
	want := "reviewed by alice\nrezuscloud/alpha/prod: failure failed: x\nrezuscloud/gamma/prod: success applied: +1 ~0 -0"
	if got := r.notes(t, r.sha); got != want {
		t.Fatalf("notes:\n%s\nwant:\n%s", got, want)
	}
	if got := r.notes(t, other); got != "note on another commit" {
		t.Fatalf("the other commit's note: %q", got)
	}
	tree := gittest.Git(t, r.d.Path("infra.git"), "ls-tree", "-r", "--name-only", "refs/notes/rezuscloud")
	wantTree := []string{r.sha, other[:2] + "/" + other[2:]}
	if other[:2] < r.sha {
		wantTree = []string{other[:2] + "/" + other[2:], r.sha}
	}
	if tree != strings.Join(wantTree, "\n") {
		t.Fatalf("notes tree:\n%s\nwant:\n%s", tree, strings.Join(wantTree, "\n"))
	}
	if out := gittest.Git(t, r.d.Path("infra.git"), "fsck", "--no-dangling"); out != "" {
		t.Errorf("git fsck: %s", out)
	}
}

func writeCLIBlob(t *testing.T, dir, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return gittest.Git(t, dir, "hash-object", "-w", f)
}

// mktree runs `git mktree` with spec on its standard input.
func mktree(t *testing.T, dir, spec string) string {
	t.Helper()
	cmd := exec.Command("git", "mktree", "--missing")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull)
	cmd.Stdin = strings.NewReader(spec)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git mktree: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func TestGitNotesEmptyRemote(t *testing.T) {
	d := gittest.NewDaemon(t)
	d.CreateBare("empty.git")
	n := newTestNotes(t, t.TempDir(), d.URL("empty.git"))
	sha := strings.Repeat("ab", 20)
	if err := n.Report(context.Background(), Status{SHA: sha, Context: "rezuscloud/x", State: StateSuccess}); err != nil {
		t.Fatal(err)
	}
	note := gittest.Git(t, d.Path("empty.git"), "notes", "--ref=rezuscloud", "show", sha)
	if note != "rezuscloud/x: success" {
		t.Fatalf("note %q", note)
	}
}

func TestGitNotesErrors(t *testing.T) {
	d := gittest.NewDaemon(t)
	n := newTestNotes(t, t.TempDir(), d.URL("missing.git"))
	err := n.Report(context.Background(), Status{SHA: testSHA, Context: "rezuscloud/x", State: StateSuccess})
	if err == nil || !errors.Is(err, ErrPermanent) {
		t.Fatalf("missing repository: %v, want a permanent error", err)
	}
	if !strings.Contains(err.Error(), "git-notes:"+d.URL("missing.git")+": fetch refs/notes/rezuscloud") {
		t.Errorf("error %q does not say what failed", err)
	}

	notRepo := t.TempDir()
	if err := os.WriteFile(filepath.Join(notRepo, "file"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	n = newTestNotes(t, notRepo, d.URL("missing.git"))
	err = n.Report(context.Background(), Status{SHA: testSHA, Context: "rezuscloud/x", State: StateSuccess})
	if err == nil || !strings.Contains(err.Error(), "is neither a git repository nor empty") {
		t.Fatalf("a directory that is no repository: %v", err)
	}

	for _, opts := range []GitNotesOptions{
		{RemoteURL: "git://x/r"},
		{RepoDir: "d"},
		{RepoDir: "d", RemoteURL: "git://x/r", Ref: "refs/heads/main"},
		{RepoDir: "d", RemoteURL: "git://x/r", Ref: "refs/notes/a..b"},
		{RepoDir: "d", RemoteURL: "ssh://u:pw@x/r"},
		{RepoDir: "d", RemoteURL: "https://x/r", MaxPushes: -1},
		{RepoDir: "d", RemoteURL: "ssh://git@x/r", Auth: sources.Auth{SSHKey: []byte("not a key")}},
	} {
		if _, err := NewGitNotes(opts); err == nil {
			t.Errorf("NewGitNotes(%+v) accepted", opts)
		}
	}
	if err := newTestNotes(t, t.TempDir(), d.URL("x.git")).Report(context.Background(), Status{SHA: "HEAD", Context: "c", State: StateSuccess}); !errors.Is(err, ErrPermanent) {
		t.Errorf("malformed status: %v", err)
	}
}

// Over smart HTTP with basic auth, from sources.Auth and from the URL; a
// wrong password is permanent and never shown.
func TestGitNotesHTTPAuth(t *testing.T) {
	h := gittest.NewHTTP(t, "bot", "s3cret-pass")
	h.CreateBare("infra.git")
	w := gittest.NewWorkdir(t, h.AuthURL("infra.git"))
	sha := w.Commit("first")
	w.Push()
	ctx := context.Background()
	s := Status{SHA: sha, Context: "rezuscloud/alpha/prod", State: StateSuccess, Description: "no changes"}

	n, err := NewGitNotes(GitNotesOptions{RepoDir: t.TempDir(), RemoteURL: h.URL("infra.git"),
		Auth: sources.Auth{Username: "bot", Password: "s3cret-pass"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Report(ctx, s); err != nil {
		t.Fatalf("with sources.Auth: %v", err)
	}
	n, err = NewGitNotes(GitNotesOptions{RepoDir: t.TempDir(), RemoteURL: h.AuthURL("infra.git")})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(n.Name(), "s3cret") {
		t.Fatalf("Name shows the password: %s", n.Name())
	}
	s.Context = "rezuscloud/beta/prod"
	if err := n.Report(ctx, s); err != nil {
		t.Fatalf("with the password in the URL: %v", err)
	}
	note := gittest.Git(t, h.Path("infra.git"), "notes", "--ref=rezuscloud", "show", sha)
	if note != "rezuscloud/alpha/prod: success no changes\nrezuscloud/beta/prod: success no changes" {
		t.Fatalf("note %q", note)
	}

	n, err = NewGitNotes(GitNotesOptions{RepoDir: t.TempDir(), RemoteURL: h.URL("infra.git"),
		Auth: sources.Auth{Username: "bot", Password: "wrong-pass"}})
	if err != nil {
		t.Fatal(err)
	}
	err = n.Report(ctx, s)
	if !errors.Is(err, ErrPermanent) || strings.Contains(err.Error(), "wrong-pass") {
		t.Fatalf("wrong password: %v", err)
	}
}

func TestGitNotesSSH(t *testing.T) {
	srv := gittest.NewSSH(t)
	srv.CreateBare("infra.git")
	sshCmd := "ssh -i " + writeKey(t, srv.ClientKey()) + " -o IdentitiesOnly=yes -o UserKnownHostsFile=" + srv.KnownHostsFile() + " -o StrictHostKeyChecking=yes -o BatchMode=yes"
	w := gittest.NewWorkdir(t, "")
	w.Run("config", "core.sshCommand", sshCmd)
	w.Run("remote", "add", "origin", srv.URL("infra.git"))
	sha := w.Commit("first")
	w.Push()
	n, err := NewGitNotes(GitNotesOptions{RepoDir: t.TempDir(), RemoteURL: srv.URL("infra.git"),
		Auth: sources.Auth{SSHKey: srv.ClientKey(), KnownHostsFile: srv.KnownHostsFile()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Report(context.Background(), Status{SHA: sha, Context: "rezuscloud/alpha", State: StatePending, Description: "validating manifests"}); err != nil {
		t.Fatal(err)
	}
	note := gittest.Git(t, srv.Path("infra.git"), "notes", "--ref=rezuscloud", "show", sha)
	if note != "rezuscloud/alpha: pending validating manifests" {
		t.Fatalf("note %q", note)
	}
}

func writeKey(t *testing.T, key []byte) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "id")
	if err := os.WriteFile(f, key, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// The dispatcher hands a batch reporter everything that waits at once.
func TestDispatcherBatchesGitNotes(t *testing.T) {
	r := newNotesRepo(t)
	n := newTestNotes(t, r.bareClone(t), r.url)
	log, _ := testLogger()
	d := NewDispatcher([]Reporter{n}, fastOptions(log))
	c := commitAt(schema.CommitSucceeded, false,
		schema.TenantResult{Tenant: "a", Phase: schema.CommitSucceeded},
		schema.TenantResult{Tenant: "b", Phase: schema.CommitSucceeded},
		schema.TenantResult{Tenant: "c", Phase: schema.CommitSucceeded})
	c.Spec.SHA = r.sha
	// A first status keeps the reporter busy (it waits for the lock a
	// report holds) while the commit's four statuses arrive; those then
	// go out together.
	n.mu.Lock()
	d.Send(Status{SHA: strings.Repeat("cd", 20), Context: "rezuscloud/eu", State: StateSuccess})
	waitFor(t, "the first status taken", func() bool { return d.Stats().Pending == 0 })
	d.Send(StatusesFor("eu", c, "")...)
	n.mu.Unlock()
	closeNow(t, d)
	if s := d.Stats(); s.Delivered != 5 {
		t.Errorf("stats %+v", s)
	}
	if c := r.notesCommits(t); c != "2" {
		t.Errorf("%s notes commits, want 2: one for the first status, one for the batch", c)
	}
	if got := r.notes(t, r.sha); strings.Count(got, "\n") != 3 {
		t.Errorf("notes:\n%s", got)
	}
}

// A repository of the reporter's own is fetched into shallowly and renewed
// after renewAfter notes commits; a clone of the origin is never made
// shallow.
func TestGitNotesOwnRepositoryStaysSmall(t *testing.T) {
	r := newNotesRepo(t)
	ctx := context.Background()
	own := filepath.Join(t.TempDir(), "notes")
	n := newTestNotes(t, own, r.url)
	n.renewAfter = 3
	clone := r.bareClone(t)
	c := newTestNotes(t, clone, r.url)
	for i := range 7 {
		s := Status{SHA: r.sha, Context: "rezuscloud/alpha/prod", State: StateSuccess, Description: fmt.Sprintf("run %d", i)}
		if err := n.Report(ctx, s); err != nil {
			t.Fatalf("report %d: %v", i, err)
		}
		s.Context, s.Description = "rezuscloud/beta/prod", fmt.Sprintf("beta %d", i)
		if err := c.Report(ctx, s); err != nil {
			t.Fatalf("report %d in the clone: %v", i, err)
		}
	}
	if got := r.notes(t, r.sha); got != "rezuscloud/alpha/prod: success run 6\nrezuscloud/beta/prod: success beta 6" {
		t.Fatalf("notes %q", got)
	}
	if n := r.notesCommits(t); n != "14" {
		t.Fatalf("the remote holds %s notes commits, want 14", n)
	}
	// Renewed after the 3rd and 6th reports, the repository has seen one
	// report since, on a shallow fetch of the tip.
	if !n.ready || n.written != 1 || !n.own {
		t.Errorf("ready %v, written %d, own %v", n.ready, n.written, n.own)
	}
	if _, err := os.Stat(filepath.Join(own, "shallow")); err != nil {
		t.Errorf("the notes-only repository is not shallow: %v", err)
	}
	if c.own {
		t.Error("the clone of the origin counts as a notes-only repository")
	}
	if _, err := os.Stat(filepath.Join(clone, "shallow")); !os.IsNotExist(err) {
		t.Errorf("the clone of the origin was made shallow: %v", err)
	}
	if got := gittest.Git(t, clone, "rev-parse", "refs/heads/main"); got != r.sha {
		t.Errorf("the clone's main is %s, want %s", got, r.sha)
	}
}
