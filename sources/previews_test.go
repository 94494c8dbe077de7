package sources

import (
	"context"
	"io/fs"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/gittest"
)

func TestPreviewsFollowMatchingRefs(t *testing.T) {
	d := gittest.NewDaemon(t)
	url := d.CreateBare("repo.git")
	w := gittest.NewWorkdir(t, url)
	w.Write("clusters/a.yaml", "main\n")
	w.Commit("main")
	w.Push()
	w.Run("checkout", "-q", "-b", "feature")
	w.Write("clusters/a.yaml", "feature\n")
	featureSHA := w.Commit("feature change")
	w.Run("push", "-q", "origin", "feature")
	w.Run("push", "-q", "origin", "HEAD:refs/pull/7/head")
	w.Run("push", "-q", "origin", "HEAD:refs/other/x")

	p, err := NewPreviews(PreviewOptions{
		Git:      GitOptions{URL: url, Path: "clusters", Dir: t.TempDir()},
		Patterns: []string{"refs/heads/*", "refs/pull/*/head"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	up, err := p.Poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(up.Snapshots) != 2 || up.Snapshots[0].Ref != "refs/heads/feature" || up.Snapshots[1].Ref != "refs/pull/7/head" {
		t.Fatalf("snapshots %+v, want refs/heads/feature and refs/pull/7/head (main and refs/other excluded)", refsOf(up.Snapshots))
	}
	for _, s := range up.Snapshots {
		if s.Revision != featureSHA || s.Root != "clusters" {
			t.Errorf("%s: revision %s root %q", s.Ref, s.Revision, s.Root)
		}
		b, err := fs.ReadFile(s.FS, "clusters/a.yaml")
		if err != nil || string(b) != "feature\n" {
			t.Errorf("%s: file %q, %v", s.Ref, b, err)
		}
	}

	// Nothing moved: nothing to preview.
	if up, err = p.Poll(ctx); err != nil || len(up.Snapshots) != 0 || len(up.Gone) != 0 {
		t.Fatalf("second poll: %+v, %v", up, err)
	}

	// The branch moves; the pull ref is deleted.
	w.Write("clusters/a.yaml", "feature 2\n")
	second := w.Commit("feature change 2")
	w.Run("push", "-q", "origin", "feature")
	w.Run("push", "-q", "origin", ":refs/pull/7/head")
	up, err = p.Poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(up.Snapshots) != 1 || up.Snapshots[0].Ref != "refs/heads/feature" || up.Snapshots[0].Revision != second {
		t.Errorf("after a push: snapshots %v", refsOf(up.Snapshots))
	}
	if len(up.Gone) != 1 || up.Gone[0] != "refs/pull/7/head" {
		t.Errorf("gone %v, want refs/pull/7/head", up.Gone)
	}
}

func TestPreviewPatternErrors(t *testing.T) {
	for _, pat := range []string{"heads/*", "refs/[", ""} {
		if _, err := NewPreviews(PreviewOptions{Git: GitOptions{URL: "git://127.0.0.1/x"}, Patterns: []string{pat}}); err == nil {
			t.Errorf("pattern %q accepted", pat)
		}
	}
}

func refsOf(snaps []Snapshot) []string {
	var out []string
	for _, s := range snaps {
		out = append(out, s.Ref+"@"+s.Revision)
	}
	return out
}
