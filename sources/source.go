package sources

import (
	"context"
	"fmt"
	"io/fs"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/commitmsg"
)

// Snapshot is one immutable revision of the manifests.
type Snapshot struct {
	// Source is the repository URL, without credentials, or the directory.
	Source string
	// Ref is what was asked for: refs/heads/main, refs/tags/v1 or a pinned
	// sha. It is "" for a directory.
	Ref string
	// Revision is the commit sha, or "sha256:<hex>" of a directory's content.
	Revision string
	// Author is "Name <email>" of the commit's author, cut to
	// commitmsg.MaxLine bytes; "" for a directory.
	Author string
	// Message is what is kept of the commit message (see SetMessage): its
	// first line and at most commitmsg.MaxBody bytes of the rest.
	Message string
	// MessageTruncated is true when the commit message was longer than
	// Message.
	MessageTruncated bool
	// Trailers are the trailers of the full commit message, read before
	// it was cut: whatever reads a trailer reads it here, never from
	// Message.
	Trailers commitmsg.Trailers
	// Time is the commit (committer) time, or when a directory was read.
	Time time.Time
	// FS is the read-only tree of the commit (or a copy of the directory).
	// Symbolic links appear with fs.ModeSymlink and submodules with
	// fs.ModeIrregular; neither is ever followed.
	FS fs.FS
	// Root is the path inside FS to load, "." for the whole tree.
	Root string
	// Signature is the outcome of the commit's signature check; nil when
	// the source checks none (no Verifier, or a directory).
	Signature *Signature

	// history answers Descends; nil for a directory.
	history *history
}

// SetMessage sets Message, MessageTruncated and Trailers from a commit's
// full message.
func (s *Snapshot) SetMessage(full string) {
	s.Trailers = commitmsg.ParseTrailers(full)
	s.Message, s.MessageTruncated = commitmsg.Bound(full)
}

// Status is what a source last observed, for the API and for operators.
type Status struct {
	// URL is the repository URL without credentials, or the directory.
	URL string `json:"url"`
	// Ref is the ref the source follows ("" for a directory).
	Ref string `json:"ref"`
	// Revision is the last revision the source yielded.
	Revision string `json:"revision"`
	// LastFetch is when the source last polled (or read the directory),
	// successfully or not.
	LastFetch time.Time `json:"lastFetch,omitzero"`
	// LastSuccess is when a poll last succeeded.
	LastSuccess time.Time `json:"lastSuccess,omitzero"`
	// LastError is the error of the last poll, "" after a success.
	LastError string `json:"lastError,omitempty"`
	// Failures counts the polls that failed in a row.
	Failures int `json:"failures"`
	// Errors counts every poll that failed since the source started.
	Errors int `json:"errors"`
	// NextPoll is when Run polls next, unless triggered earlier; zero when
	// it waits for a trigger alone, after a failure that polling again
	// cannot mend (ErrSHA256).
	NextPoll time.Time `json:"nextPoll,omitzero"`
	// Polls counts the polls so far, failed ones included.
	Polls int `json:"polls"`
	// Fetches counts the fetches (downloads of objects) so far. A poll
	// whose remote head has not moved does not fetch.
	Fetches int `json:"fetches"`
}

// Ready reports whether the source has fetched (or read) its manifests
// successfully at least once: nil after that, and before it an error that
// says why not, with the last failure.
func (s Status) Ready() error {
	switch {
	case !s.LastSuccess.IsZero():
		return nil
	case s.LastError != "":
		return fmt.Errorf("%s has never been fetched successfully (failed polls: %d); the last error: %s", s.URL, s.Failures, s.LastError)
	}
	return fmt.Errorf("%s has not been fetched yet", s.URL)
}

// Source yields snapshots of the manifests.
type Source interface {
	// Run polls or watches until ctx is done, sending each new snapshot to
	// out: the first one always, later ones only when the revision changed.
	// A failed poll is recorded in Status and retried; it sends nothing.
	// Run returns nil when ctx is done.
	Run(ctx context.Context, out chan<- Snapshot) error
	// Trigger asks for a poll now. It never blocks; many triggers in a row
	// coalesce into one poll.
	Trigger()
	// Status reports what the source last observed.
	Status() Status
}

var (
	_ Source = (*Git)(nil)
	_ Source = (*Dir)(nil)
)
