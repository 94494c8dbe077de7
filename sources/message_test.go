package sources

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/commitmsg"
	"github.com/rezuscloud/rezuscloud/internal/gittest"
)

// TestGitSnapshotBoundsCommit fetches a commit whose message is 20 MB and
// whose author name is 100 KB from a git daemon: the snapshot keeps the
// subject and 64 KiB of the message and 1 KiB of the author, and still has
// the trailer at the message's end.
func TestGitSnapshotBoundsCommit(t *testing.T) {
	d := gittest.NewDaemon(t)
	d.CreateBare("big.git")
	w := gittest.NewWorkdir(t, d.URL("big.git"))
	w.Write("a.yaml", "apiVersion: v1\nkind: ConfigMap\n")
	msg := "Huge message\n\n" + strings.Repeat("0123456789abcdef spam spam spam\n", 20<<20/32) +
		"\nRezuscloud-Allow-Deletions: 2\n"
	file := filepath.Join(t.TempDir(), "msg")
	if err := os.WriteFile(file, []byte(msg), 0o600); err != nil {
		t.Fatal(err)
	}
	w.Run("add", "--all")
	w.Run("commit", "--quiet", "--cleanup=verbatim", "--author="+strings.Repeat("N", 100<<10)+" <n@example.com>", "-F", file)
	w.Push()

	g := newTestGit(t, GitOptions{URL: d.URL("big.git")})
	snap, _ := mustFetch(t, g)
	if !snap.MessageTruncated || !strings.HasPrefix(snap.Message, "Huge message\n\n") || len(snap.Message) > commitmsg.MaxSubject+1+commitmsg.MaxBody {
		t.Errorf("message: %d bytes, truncated %v; want the subject and at most %d bytes of body, marked truncated",
			len(snap.Message), snap.MessageTruncated, commitmsg.MaxBody)
	}
	if v, ok := snap.Trailers.Get("Rezuscloud-Allow-Deletions"); !ok || v != "2" {
		t.Errorf("trailers %q: want Rezuscloud-Allow-Deletions: 2 from the end of the full message", snap.Trailers)
	}
	if len(snap.Author) > commitmsg.MaxLine || !strings.HasSuffix(snap.Author, commitmsg.Ellipsis) {
		t.Errorf("author: %d bytes, want at most %d ending in %q", len(snap.Author), commitmsg.MaxLine, commitmsg.Ellipsis)
	}
}
