package reconciler

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/gittest"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
)

// gitRepo is a repository on a git daemon, a work tree that pushes to it
// (signing each commit with an SSH key when signed) and the source that
// follows its main branch, checking signatures against that key when
// signed. Its commits hold no manifests: the tests here need no tofu.
type gitRepo struct {
	t        *testing.T
	url, dir string
	work     *gittest.Workdir
	verifier *sources.Verifier
	src      *sources.Git
}

func newGitRepo(t *testing.T, signed bool) *gitRepo {
	t.Helper()
	d := gittest.NewDaemon(t)
	d.CreateBare("repo.git")
	g := &gitRepo{t: t, url: d.URL("repo.git"), dir: t.TempDir()}
	g.work = gittest.NewWorkdir(t, g.url)
	if signed {
		keys := t.TempDir()
		key := filepath.Join(keys, "ann")
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ann", "-f", key).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v\n%s", err, out)
		}
		pub, err := os.ReadFile(key + ".pub")
		if err != nil {
			t.Fatal(err)
		}
		signers := filepath.Join(keys, "allowed_signers")
		if err := os.WriteFile(signers, []byte("ann@example.com "+string(pub)), 0o600); err != nil {
			t.Fatal(err)
		}
		if g.verifier, err = sources.NewVerifier(signers, ""); err != nil {
			t.Fatal(err)
		}
		g.work.Run("config", "gpg.format", "ssh")
		g.work.Run("config", "user.signingkey", key)
		g.work.Run("config", "commit.gpgsign", "true")
	}
	g.restart()
	return g
}

// restart starts a new source on the same clone, as a new process does.
func (g *gitRepo) restart() {
	g.t.Helper()
	src, err := sources.NewGit(sources.GitOptions{URL: g.url, Dir: g.dir, Verifier: g.verifier, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		g.t.Fatal(err)
	}
	g.src = src
}

// push commits a change of README.md and pushes it.
func (g *gitRepo) push(msg string) string {
	g.t.Helper()
	g.work.Write("README.md", msg+"\n")
	sha := g.work.Commit(msg)
	g.work.Push()
	return sha
}

// forcePush moves main back to rev.
func (g *gitRepo) forcePush(rev string) {
	g.t.Helper()
	g.work.Reset(rev)
	g.work.ForcePush("main")
}

// reconcile has the rig's reconciler reconcile what the source yields now.
func (g *gitRepo) reconcile(r *rig, want string) *schema.Commit {
	g.t.Helper()
	snap, _, err := g.src.Fetch(context.Background())
	if err != nil {
		g.t.Fatal(err)
	}
	if snap.Revision != want {
		g.t.Fatalf("the source yields %s, want %s", snap.Revision, want)
	}
	c, err := r.rec.Reconcile(context.Background(), snap)
	if err != nil {
		g.t.Fatal(err)
	}
	return c
}

// wantFastForward checks that c applied as a fast-forward.
func wantFastForward(t *testing.T, c *schema.Commit) {
	t.Helper()
	mustSucceed(t, c)
	if c.Status.NonFastForward || c.Status.Ancestry != nil {
		t.Errorf("commit %s: nonFastForward %v, ancestry %+v; want a fast-forward", c.Spec.SHA[:12], c.Status.NonFastForward, c.Status.Ancestry)
	}
}

// wantApplied checks that c applied although it does not descend from
// lastApplied, and says why in a message that contains why.
func wantApplied(t *testing.T, c *schema.Commit, lastApplied, why string) {
	t.Helper()
	mustSucceed(t, c)
	a := c.Status.Ancestry
	if !c.Status.NonFastForward || a == nil || a.LastApplied != lastApplied || a.Refused || !strings.Contains(a.Message, why) {
		t.Errorf("commit %s: nonFastForward %v, ancestry %+v; want applied over %s: %s", c.Spec.SHA[:12], c.Status.NonFastForward, a, lastApplied[:12], why)
	}
	if s := c.Status.Conditions.Get(schema.ConditionStalled); s == nil || s.Status != schema.ConditionFalse {
		t.Errorf("commit %s: Stalled %+v, want False", c.Spec.SHA[:12], s)
	}
}

// wantRefusedNonFastForward checks that c was refused, nothing of it run,
// for not descending from lastApplied.
func wantRefusedNonFastForward(t *testing.T, c *schema.Commit, lastApplied string) {
	t.Helper()
	a := c.Status.Ancestry
	if c.Status.Phase != schema.CommitFailed || len(c.Status.Tenants) != 0 || !c.Status.NonFastForward ||
		a == nil || !a.Refused || a.LastApplied != lastApplied {
		t.Fatalf("commit %s: phase %s, %d tenants, nonFastForward %v, ancestry %+v; want refused for not descending from %s",
			c.Spec.SHA[:12], c.Status.Phase, len(c.Status.Tenants), c.Status.NonFastForward, a, lastApplied[:12])
	}
	for _, want := range []string{"does not descend from " + lastApplied[:12], "--verify-signatures refuses it", "--allow-non-fast-forward"} {
		if !strings.Contains(c.Status.Message, want) {
			t.Errorf("commit %s: message %q does not say %q", c.Spec.SHA[:12], c.Status.Message, want)
		}
	}
	for _, ct := range []string{schema.ConditionStalled, schema.ConditionReady} {
		s := c.Status.Conditions.Get(ct)
		wantStatus := schema.ConditionTrue
		if ct == schema.ConditionReady {
			wantStatus = schema.ConditionFalse
		}
		if s == nil || s.Status != wantStatus || s.Reason != schema.ReasonNonFastForward {
			t.Errorf("commit %s: %s %+v, want %s NonFastForward", c.Spec.SHA[:12], ct, s, wantStatus)
		}
	}
}

// TestNonFastForwardRefusedWithSignatures: with signatures verified, a
// force push back to an older signed commit is refused, also by a
// restarted server; a signed commit on top of the refused one is applied,
// and so is a refused one once the operator allows non-fast-forwards.
func TestNonFastForwardRefusedWithSignatures(t *testing.T) {
	r := newRig(t)
	g := newGitRepo(t, true)
	a := g.push("A")
	wantFastForward(t, g.reconcile(r, a))
	b := g.push("B")
	wantFastForward(t, g.reconcile(r, b))

	g.forcePush(a)
	wantRefusedNonFastForward(t, g.reconcile(r, a), b)
	r.restart()
	g.restart()
	wantRefusedNonFastForward(t, g.reconcile(r, a), b)

	onTop := g.push("C, signed on top of A")
	wantApplied(t, g.reconcile(r, onTop), b, "on top of "+a[:12])
	d := g.push("D")
	wantFastForward(t, g.reconcile(r, d))

	g.forcePush(b)
	wantRefusedNonFastForward(t, g.reconcile(r, b), d)
	r.rec.opts.AllowNonFastForward = true
	r.restart()
	g.restart()
	wantApplied(t, g.reconcile(r, b), d, "--allow-non-fast-forward")
}

// TestNonFastForwardWithoutSignatures: without signature checks, a force
// push back to an older commit is applied, and its Commit names the
// commit applied before that it does not descend from.
func TestNonFastForwardWithoutSignatures(t *testing.T) {
	r := newRig(t)
	g := newGitRepo(t, false)
	a := g.push("A")
	wantFastForward(t, g.reconcile(r, a))
	b := g.push("B")
	wantFastForward(t, g.reconcile(r, b))
	g.forcePush(a)
	wantApplied(t, g.reconcile(r, a), b, "signatures are not verified")
	wantFastForward(t, g.reconcile(r, g.push("C")))
}
