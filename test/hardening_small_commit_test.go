package test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

// TestHardeningSubjectTrailerKeepsTenants pushes a commit that removes
// every tenant and whose subject line is "Rezuscloud-Allow-Deletions: 2".
// A subject is never a trailer, as `git interpret-trailers` says too: the
// deletion is refused and every machine stays.
func TestHardeningSubjectTrailerKeepsTenants(t *testing.T) {
	e := newE2E(t, e2eOptions{})
	s := e.srv
	before := e2eMachineIDs(s.machines(""))
	if trailers := e.work.Run("log", "-1", "--format=%(trailers)", "HEAD"); trailers != "" {
		t.Fatalf("the first commit has trailers %q", trailers)
	}

	e.work.Remove("clusters/production")
	e.work.Remove("clusters/staging")
	sha := e.push("Rezuscloud-Allow-Deletions: 2")
	if out := e.work.Run("log", "-1", "--format=%B", "HEAD"); out != "Rezuscloud-Allow-Deletions: 2" {
		t.Fatalf("pushed message %q", out)
	}
	c := s.WaitCommit(sha)
	if c.Status.Phase != schema.CommitFailed || !strings.Contains(c.Status.Message, "nothing was destroyed") {
		t.Fatalf("phase %s, message %q: want the deletion refused", c.Status.Phase, c.Status.Message)
	}
	if diff := cmp.Diff(before, e2eMachineIDs(s.machines(""))); diff != "" {
		t.Errorf("a subject line unlocked the deletion (-before +after):\n%s", diff)
	}
}

// TestHardeningHugeCommitMessages pushes four commits with a 20 MB
// message each, then a fifth that removes every tenant and carries the
// trailer that allows it at the end of its 20 MB message. The server keeps
// a bounded message of each, serves a small list of commits, keeps its
// database and memory small, and still reads the trailer.
func TestHardeningHugeCommitMessages(t *testing.T) {
	e := newE2E(t, e2eOptions{})
	s := e.srv
	const size = 20 << 20
	huge := func(i int, trailer string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "Commit %d with a long message\n\n", i)
		for n := 0; b.Len() < size; n++ {
			fmt.Fprintf(&b, "line %d of commit %d, written to take up room\n", n, i)
		}
		if trailer != "" {
			b.WriteString("\n" + trailer + "\n")
		}
		return b.String()
	}
	commit := func(msg string) string {
		t.Helper()
		file := filepath.Join(t.TempDir(), "message")
		if err := os.WriteFile(file, []byte(msg), 0o600); err != nil {
			t.Fatal(err)
		}
		e.work.Run("add", "--all")
		e.work.Run("commit", "--quiet", "--allow-empty", "--cleanup=verbatim", "-F", file)
		e.work.Push()
		return e.work.Rev("HEAD")
	}

	var shas []string
	for i := range 4 {
		e.work.Write("README.md", fmt.Sprintf("# Clusters\n\nRevision %d.\n", i))
		sha := commit(huge(i, ""))
		shas = append(shas, sha)
		if c := s.WaitCommit(sha); c.Status.Phase != schema.CommitSucceeded {
			t.Fatalf("commit %d: phase %s: %s", i, c.Status.Phase, e2eBrief(c.Status))
		}
	}
	e.work.Remove("clusters/production")
	e.work.Remove("clusters/staging")
	last := commit(huge(4, "Rezuscloud-Allow-Deletions: 2"))
	shas = append(shas, last)
	c := s.waitApplied(last)
	if ms := s.machines(""); len(ms) != 0 {
		t.Errorf("%d machines left: the trailer at the end of the long message was not read", len(ms))
	}

	maxMessage := 1<<10 + 1 + 64<<10
	for _, sha := range shas {
		c, _ = s.Commit(sha)
		if !c.Spec.MessageTruncated || len(c.Spec.Message) > maxMessage || !strings.HasPrefix(c.Spec.Message, "Commit ") {
			t.Errorf("commit %s: message of %d bytes, truncated %v; want the subject and at most 64 KiB, marked truncated",
				sha[:12], len(c.Spec.Message), c.Spec.MessageTruncated)
		}
	}
	code, body := s.Request(http.MethodGet, "/api/v1/commits", nil, nil)
	if code != http.StatusOK || len(body) > 1<<20 {
		t.Errorf("GET /api/v1/commits: %d, %d bytes; want 200 and at most 1 MiB for 6 commits", code, len(body))
	}
	db, err := os.Stat(filepath.Join(e.data, bolt.DBFile))
	if err != nil {
		t.Fatal(err)
	}
	rss := s.Memory("VmHWM")
	t.Logf("after 5 commits of %d MB messages: database %d bytes, /api/v1/commits %d bytes, peak RSS %d MB",
		size>>20, db.Size(), len(body), rss>>20)
	if db.Size() > 64<<20 {
		t.Errorf("database is %d bytes, want at most 64 MiB", db.Size())
	}
	if rss > 400<<20 {
		t.Errorf("peak RSS %d MB, want at most 400 MB", rss>>20)
	}
}
