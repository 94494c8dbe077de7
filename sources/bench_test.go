package sources

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os/exec"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/gittest"
	"github.com/rezuscloud/rezuscloud/internal/manifestfleet"
)

var quiet = slog.New(slog.DiscardHandler)

// benchFleet is the manifests of the benchmarks: n tenants, each a Tenant
// alone in clusters/NAME/tenant.yaml (t000, t001, …).
func benchFleet(n int) manifestfleet.Options {
	return manifestfleet.Options{Tenants: n, Digits: 3, Dir: "clusters", Edit: func(t *manifestfleet.Tenant) { t.Groups = nil }}
}

// manifestRepo pushes a repository of n small manifests to d.
func manifestRepo(b *testing.B, d *gittest.Daemon, n int) *gittest.Workdir {
	b.Helper()
	d.CreateBare("bench.git")
	w := gittest.NewWorkdir(b, d.URL("bench.git"))
	if err := benchFleet(n).WriteDir(w.Dir()); err != nil {
		b.Fatal(err)
	}
	w.Commit("manifests")
	w.Push()
	return w
}

// A poll whose remote head has not moved: one ls-remote, no fetch.
func BenchmarkGitPollNoChange(b *testing.B) {
	d := gittest.NewDaemon(b)
	manifestRepo(b, d, 100)
	g, err := NewGit(GitOptions{URL: d.URL("bench.git"), Dir: b.TempDir(), Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := g.Fetch(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, changed, err := g.Fetch(context.Background()); err != nil || changed {
			b.Fatal(changed, err)
		}
	}
	if g.Status().Fetches != 1 {
		b.Fatalf("Fetches = %d", g.Status().Fetches)
	}
}

// A poll that finds a new commit: ls-remote, fetch, snapshot.
func BenchmarkGitPollNewCommit(b *testing.B) {
	d := gittest.NewDaemon(b)
	w := manifestRepo(b, d, 100)
	g, err := NewGit(GitOptions{URL: d.URL("bench.git"), Dir: b.TempDir(), Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := g.Fetch(context.Background()); err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		w.Write("clusters/t000/tenant.yaml", fmt.Sprintf("kind: Tenant\nrev: %d\n", i))
		w.Commit("edit")
		w.Push()
		b.StartTimer()
		if _, changed, err := g.Fetch(context.Background()); err != nil || !changed {
			b.Fatal(changed, err)
		}
	}
}

// Reading every file of a snapshot of 100 manifests from the tree.
func BenchmarkTreeFSReadAll(b *testing.B) {
	d := gittest.NewDaemon(b)
	manifestRepo(b, d, 100)
	g, err := NewGit(GitOptions{URL: d.URL("bench.git"), Dir: b.TempDir(), Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	snap, _, err := g.Fetch(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		n := 0
		err := fs.WalkDir(snap.FS, ".", func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() {
				return err
			}
			_, err = fs.ReadFile(snap.FS, p)
			n++
			return err
		})
		if err != nil || n != 100 {
			b.Fatal(n, err)
		}
	}
}

// Reading a directory of 100 manifests into a snapshot.
func BenchmarkDirSnapshot(b *testing.B) {
	dir := b.TempDir()
	if err := benchFleet(100).WriteDir(dir); err != nil {
		b.Fatal(err)
	}
	d, err := NewDir(DirOptions{Path: dir, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := d.Snapshot(); err != nil {
			b.Fatal(err)
		}
	}
}

// Descends on a linear history of 10,000 commits: a fast-forward walks
// the commits it added (here one), a commit that does not descend from
// the one asked about walks the whole history. The reconciler asks once
// per new revision, never on a poll of an unchanged head.
func BenchmarkDescends(b *testing.B) {
	const n = 10000
	d := gittest.NewDaemon(b)
	bare := d.CreateBare("history.git")
	var in strings.Builder
	for i := range n {
		fmt.Fprintf(&in, "commit refs/heads/main\ncommitter A <a@example.com> %d +0000\ndata <<EOM\ncommit %d\nEOM\n\n", 1700000000+i, i)
	}
	cmd := exec.Command("git", "fast-import", "--quiet")
	cmd.Dir, cmd.Stdin = bare, strings.NewReader(in.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("git fast-import: %v\n%s", err, out)
	}
	g, err := NewGit(GitOptions{URL: d.URL("history.git"), Dir: b.TempDir(), Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	snap, _, err := g.Fetch(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	parent := gittest.Git(b, bare, "rev-parse", "main~1")
	for _, c := range []struct {
		name, rev string
		want      bool
	}{
		{"fast-forward", parent, true},
		{"not-descendant", strings.Repeat("0", 40), false},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if ok, err := snap.Descends(c.rev); ok != c.want || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}
