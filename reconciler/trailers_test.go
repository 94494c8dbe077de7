package reconciler

import (
	"context"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/rezuscloud/rezuscloud/internal/commitmsg"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
)

// TestDeletionTrailerOnlyInTrailerBlock removes every tenant with commits
// whose messages name the Rezuscloud-Allow-Deletions trailer: as the subject
// line and inside the body it allows nothing; in the trailer block at the
// end of a message far longer than what is kept of it, it allows the
// deletion, and the Commit records the cut message.
func TestDeletionTrailerOnlyInTrailerBlock(t *testing.T) {
	r := newRig(t)
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	empty := fstest.MapFS{"README.md": {Data: []byte("nothing here")}}
	submit := func(rev, msg string) *schema.Commit {
		t.Helper()
		snap := sources.Snapshot{Revision: rev, Ref: "refs/heads/main", FS: empty, Root: "."}
		snap.SetMessage(msg)
		c, err := r.rec.Reconcile(context.Background(), snap)
		if err != nil {
			t.Fatalf("reconcile %s: %v", rev, err)
		}
		return c
	}

	for rev, msg := range map[string]string{
		"subject": TrailerAllowDeletions + ": 2",
		"body":    "Remove every tenant\n\n" + TrailerAllowDeletions + ": 2\nas agreed.\n",
	} {
		c := submit(rev, msg)
		if c.Status.Phase != schema.CommitFailed || !strings.Contains(c.Status.Message, "nothing was destroyed") {
			t.Fatalf("%s: phase %s message %q: want the deletion refused", rev, c.Status.Phase, c.Status.Message)
		}
		if n := len(r.machines()); n != 7 {
			t.Fatalf("%s: a trailer outside the trailer block destroyed machines: %d left, want 7", rev, n)
		}
	}

	long := "Remove every tenant\n\n" + strings.Repeat("Why we do this, at length.\n", 10_000) +
		"\n" + TrailerAllowDeletions + ": 2\n"
	c := submit("long", long)
	mustSucceed(t, c)
	if n := len(r.machines()); n != 0 {
		t.Errorf("%d machines left after an allowed deletion", n)
	}
	if !c.Spec.MessageTruncated || len(c.Spec.Message) > commitmsg.MaxSubject+1+commitmsg.MaxBody || strings.Contains(c.Spec.Message, TrailerAllowDeletions) {
		t.Errorf("commit message: %d bytes, truncated %v; want it cut before its trailer to at most %d bytes",
			len(c.Spec.Message), c.Spec.MessageTruncated, commitmsg.MaxSubject+1+commitmsg.MaxBody)
	}
}
