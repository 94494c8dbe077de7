package sources

import "errors"

// Errors a source wraps, for callers that decide what to do with errors.Is.
var (
	// ErrAuth means the repository refused the credentials, or needs some.
	ErrAuth = errors.New("authentication failed")
	// ErrRefNotFound means the branch, tag or commit does not exist in the
	// repository.
	ErrRefNotFound = errors.New("ref not found")
	// ErrPathNotFound means the configured path is not a directory in the
	// commit. It needs a new commit (or new options), not a retry.
	ErrPathNotFound = errors.New("path not found")
	// ErrTooLarge means a directory or a file exceeds a size limit.
	ErrTooLarge = errors.New("too large")
	// ErrSHA256 means the repository uses the SHA-256 object format, which
	// the source cannot read. Retrying does not help: a Git source stops
	// polling such a repository until it is triggered.
	ErrSHA256 = errors.New("SHA-256 repositories are not supported yet")
	// ErrNoHistory means a snapshot has no commit history to tell
	// ancestry from: it is a copy of a directory.
	ErrNoHistory = errors.New("no commit history")
	// ErrShallow means the clone's history is cut, so that it cannot tell
	// whether a commit descends from another.
	ErrShallow = errors.New("shallow clone")
)
