package report

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/rezuscloud/rezuscloud/sources"
)

// Defaults of GitNotesOptions.
const (
	DefaultNotesRef   = "refs/notes/rezuscloud"
	DefaultNotesName  = "RezusCloud"
	DefaultNotesEmail = "rezuscloud@localhost"
	DefaultMaxPushes  = 8
)

// GitNotesOptions configures a GitNotes reporter.
type GitNotesOptions struct {
	// RepoDir is the local repository the notes are built in: the
	// server's bare clone of the origin, or a directory of its own, which
	// is created as a bare repository (mode 0700) when missing or empty.
	// Only the notes ref and its objects are fetched into it; the
	// annotated commits need not be there.
	RepoDir string
	// RemoteURL is where the notes are fetched from and pushed to, in any
	// form sources accepts (https://, ssh://, git@host:path, git://, a
	// local path). A password in an HTTPS URL is used as the credentials
	// and kept out of names, logs and errors.
	RemoteURL string
	// Auth holds the credentials for RemoteURL; zero for anonymous.
	Auth sources.Auth
	// Ref is the notes ref; DefaultNotesRef when empty.
	Ref string
	// AuthorName and AuthorEmail sign the notes commits;
	// DefaultNotesName and DefaultNotesEmail when empty.
	AuthorName, AuthorEmail string
	// MaxPushes bounds the pushes one report makes when other writers
	// keep moving the notes ref; DefaultMaxPushes when zero.
	MaxPushes int
}

// GitNotes reports statuses as a git note on each commit, one line per
// context ("rezuscloud/<instance>/<tenant>: <state> <description>"),
// under refs/notes/rezuscloud of the origin, where `git log
// --notes=rezuscloud` shows them. A report fetches the notes ref, replaces
// the lines of its own contexts in each note and keeps every other line,
// commits the notes tree on top of the fetched one and pushes it; when
// another writer moved the ref in between, it fetches and merges again.
// So several servers, each with its own instance name, share one notes
// ref without losing each other's lines.
//
// Notes are read in both the flat ("abcdef…") and the fanned-out
// ("ab/cdef…") layouts of git notes, and written flat.
type GitNotes struct {
	dir       string
	remote    *gitRemote
	ref       plumbing.ReferenceName
	pushRef   plumbing.ReferenceName
	name      string
	email     string
	maxPushes int

	mu      sync.Mutex // one report at a time; guards the fields below
	ready   bool       // the repository exists and own is known
	own     bool       // the repository holds nothing but notes
	written int        // notes commits pushed since the repository was made

	// renewAfter is how many notes commits a notes-only repository takes
	// before it is emptied and fetched afresh; defaultRenewAfter but in
	// tests.
	renewAfter int

	// beforePush, when set, runs between the fetch and the push of every
	// attempt; tests move the ref there as another writer would.
	beforePush func()
}

var _ Reporter = (*GitNotes)(nil)

// defaultRenewAfter bounds the growth of a notes-only repository: every
// notes commit adds a few loose objects, and go-git never collects them.
const defaultRenewAfter = 500

// notesRemote names the remote a GitNotes uses; it is never saved in the
// repository's configuration.
const notesRemote = "rezuscloud-notes"

// NewGitNotes checks the options and prepares the credentials. It does not
// touch the network or the disk: the first report does.
func NewGitNotes(opts GitNotesOptions) (*GitNotes, error) {
	if opts.RepoDir == "" {
		return nil, errors.New("git notes reporter: no repository directory to build the notes in")
	}
	r, err := newGitRemote(opts.RemoteURL, opts.Auth)
	if err != nil {
		return nil, fmt.Errorf("git notes reporter: %w", err)
	}
	ref := plumbing.ReferenceName(cmp.Or(opts.Ref, DefaultNotesRef))
	if err := ref.Validate(); err != nil || !strings.HasPrefix(ref.String(), "refs/notes/") {
		return nil, fmt.Errorf("git notes reporter: notes ref %q: want a valid ref under refs/notes/", opts.Ref)
	}
	if opts.MaxPushes < 0 {
		return nil, fmt.Errorf("git notes reporter: negative MaxPushes %d", opts.MaxPushes)
	}
	return &GitNotes{
		dir:        opts.RepoDir,
		remote:     r,
		ref:        ref,
		pushRef:    plumbing.ReferenceName("refs/rezuscloud-push/" + strings.TrimPrefix(ref.String(), "refs/")),
		name:       cmp.Or(opts.AuthorName, DefaultNotesName),
		email:      cmp.Or(opts.AuthorEmail, DefaultNotesEmail),
		maxPushes:  cmp.Or(opts.MaxPushes, DefaultMaxPushes),
		renewAfter: defaultRenewAfter,
	}, nil
}

// Name is "git-notes:<remote URL>".
func (n *GitNotes) Name() string { return "git-notes:" + n.remote.url }

// Report writes one status into the note of its commit.
func (n *GitNotes) Report(ctx context.Context, s Status) error {
	return n.ReportAll(ctx, []Status{s})
}

// ReportAll writes statuses, of one commit or several, with one notes
// commit and one push. Of two statuses with the same commit and context
// the later one counts.
func (n *GitNotes) ReportAll(ctx context.Context, ss []Status) error {
	if len(ss) == 0 {
		return nil
	}
	for _, s := range ss {
		if err := s.validate(); err != nil {
			return fmt.Errorf("%s: %w", n.Name(), err)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	st, err := n.storage()
	if err != nil {
		return fmt.Errorf("%s: %w", n.Name(), err)
	}
	defer st.Close()
	rem := git.NewRemote(st, &config.RemoteConfig{Name: notesRemote, URLs: []string{n.remote.url}})

	var lastBase plumbing.Hash
	var lastErr error
	for attempt := 1; ; attempt++ {
		base, err := n.fetch(ctx, st, rem)
		if err != nil {
			return fmt.Errorf("%s: fetch %s: %w", n.Name(), n.ref, err)
		}
		if lastErr != nil && base == lastBase {
			// The push failed, and not because another writer got there
			// first: the ref has not moved.
			return fmt.Errorf("%s: push %s: %w", n.Name(), n.ref, lastErr)
		}
		commit, changed, err := n.commit(st, base, ss)
		if err != nil {
			return fmt.Errorf("%s: write notes: %w", n.Name(), err)
		}
		if !changed {
			return nil
		}
		if n.beforePush != nil {
			n.beforePush()
		}
		err = n.push(ctx, st, rem, commit)
		if err == nil {
			n.written++
			n.renew()
			return nil
		}
		if ctx.Err() != nil || errors.Is(err, ErrPermanent) {
			return fmt.Errorf("%s: push %s: %w", n.Name(), n.ref, err)
		}
		if attempt >= n.maxPushes {
			return fmt.Errorf("%s: push %s: gave up after %d attempts, the ref moving under each: %w",
				n.Name(), n.ref, attempt, err)
		}
		lastBase, lastErr = base, err
		// Two writers that collided should not collide again in step.
		wait := time.Duration(attempt) * (20*time.Millisecond + rand.N(30*time.Millisecond))
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return fmt.Errorf("%s: push %s: %w", n.Name(), n.ref, ctx.Err())
		}
	}
}

// storage opens the local repository, creating it when the directory is
// missing or empty. A repository that holds no refs but notes (one this
// reporter made) is fetched into shallowly and renewed now and then; a
// clone of the origin is left as it is, but for the notes ref.
func (n *GitNotes) storage() (*filesystem.Storage, error) {
	st := filesystem.NewStorage(osfs.New(n.dir), cache.NewObjectLRU(cache.MiByte))
	if n.ready {
		return st, nil
	}
	_, err := git.Open(st, nil)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		entries, rerr := os.ReadDir(n.dir)
		switch {
		case errors.Is(rerr, os.ErrNotExist):
			if err := os.MkdirAll(n.dir, 0o700); err != nil {
				return nil, err
			}
		case rerr != nil:
			return nil, rerr
		case len(entries) > 0:
			return nil, fmt.Errorf("%s is neither a git repository nor empty", n.dir)
		}
		_, err = git.Init(st, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("repository %s: %w", n.dir, err)
	}
	refs, err := st.IterReferences()
	if err != nil {
		return nil, fmt.Errorf("repository %s: %w", n.dir, err)
	}
	n.own = true
	refs.ForEach(func(r *plumbing.Reference) error {
		name := r.Name().String()
		if r.Type() == plumbing.HashReference && !strings.HasPrefix(name, "refs/notes/") &&
			!strings.HasPrefix(name, "refs/rezuscloud-push/") {
			n.own = false
		}
		return nil
	})
	refs.Close()
	n.ready, n.written = true, 0
	return st, nil
}

// renew empties a notes-only repository that has taken renewAfter notes
// commits; the next report makes it again. The remote keeps the history.
func (n *GitNotes) renew() {
	if !n.own || n.written < n.renewAfter {
		return
	}
	entries, err := os.ReadDir(n.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(n.dir, e.Name())); err != nil {
			return
		}
	}
	n.ready = false
}

// fetch brings the notes ref of the remote into the local repository and
// returns its commit, or the zero hash when the remote has no notes yet.
func (n *GitNotes) fetch(ctx context.Context, st *filesystem.Storage, rem *git.Remote) (plumbing.Hash, error) {
	spec := config.RefSpec("+" + n.ref.String() + ":" + n.ref.String())
	depth := 0
	if n.own {
		// Only the tip is needed to write on top of it.
		depth = 1
	}
	err := rem.FetchContext(ctx, &git.FetchOptions{
		RemoteName: notesRemote,
		RefSpecs:   []config.RefSpec{spec},
		Auth:       n.remote.auth,
		Tags:       git.NoTags,
		Depth:      depth,
	})
	switch {
	case err == nil, errors.Is(err, git.NoErrAlreadyUpToDate):
	case errors.Is(err, git.NoMatchingRefSpecError{}), errors.Is(err, transport.ErrEmptyRemoteRepository):
		if err := st.RemoveReference(n.ref); err != nil {
			return plumbing.ZeroHash, err
		}
		return plumbing.ZeroHash, nil
	default:
		return plumbing.ZeroHash, classifyGitError(err)
	}
	ref, err := st.Reference(n.ref)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	return ref.Hash(), nil
}

// commit writes the notes commit that merges ss into the notes of base.
// changed is false when every note already says what ss say.
func (n *GitNotes) commit(st *filesystem.Storage, base plumbing.Hash, ss []Status) (plumbing.Hash, bool, error) {
	var tree *object.Tree
	var parents []plumbing.Hash
	if !base.IsZero() {
		c, err := object.GetCommit(st, base)
		if err != nil {
			return plumbing.ZeroHash, false, err
		}
		if tree, err = c.Tree(); err != nil {
			return plumbing.ZeroHash, false, err
		}
		parents = []plumbing.Hash{base}
	}
	var shas []string
	bySHA := map[string][]Status{}
	for _, s := range ss {
		if bySHA[s.SHA] == nil {
			shas = append(shas, s.SHA)
		}
		bySHA[s.SHA] = append(bySHA[s.SHA], s)
	}
	changed := false
	for _, sha := range shas {
		var old string
		if tree != nil {
			h, err := findNote(st, tree, sha)
			if err != nil {
				return plumbing.ZeroHash, false, err
			}
			if !h.IsZero() {
				if old, err = readBlob(st, h); err != nil {
					return plumbing.ZeroHash, false, err
				}
			}
		}
		text := mergeNote(old, bySHA[sha])
		if text == old {
			continue
		}
		blob, err := writeBlob(st, text)
		if err != nil {
			return plumbing.ZeroHash, false, err
		}
		th, err := putNote(st, tree, sha, blob)
		if err != nil {
			return plumbing.ZeroHash, false, err
		}
		if tree, err = object.GetTree(st, th); err != nil {
			return plumbing.ZeroHash, false, err
		}
		changed = true
	}
	if !changed {
		return base, false, nil
	}
	sig := object.Signature{Name: n.name, Email: n.email, When: time.Now()}
	short := make([]string, len(shas))
	for i, sha := range shas {
		short[i] = sha[:12]
	}
	c := &object.Commit{
		Author:       sig,
		Committer:    sig,
		Message:      "rezuscloud: statuses of " + strings.Join(short, ", ") + "\n",
		TreeHash:     tree.Hash,
		ParentHashes: parents,
	}
	obj := st.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		return plumbing.ZeroHash, false, err
	}
	h, err := st.SetEncodedObject(obj)
	return h, true, err
}

// push sends commit to the remote's notes ref. It fails when the ref has
// moved since the fetch.
func (n *GitNotes) push(ctx context.Context, st *filesystem.Storage, rem *git.Remote, commit plumbing.Hash) error {
	if err := st.SetReference(plumbing.NewHashReference(n.pushRef, commit)); err != nil {
		return err
	}
	defer st.RemoveReference(n.pushRef)
	err := rem.PushContext(ctx, &git.PushOptions{
		RemoteName: notesRemote,
		RefSpecs:   []config.RefSpec{config.RefSpec(n.pushRef.String() + ":" + n.ref.String())},
		Auth:       n.remote.auth,
	})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return classifyGitError(err)
	}
	return st.SetReference(plumbing.NewHashReference(n.ref, commit))
}

// classifyGitError marks the errors that retrying cannot fix: refused
// credentials and a missing repository.
func classifyGitError(err error) error {
	if errors.Is(err, transport.ErrAuthenticationRequired) || errors.Is(err, transport.ErrAuthorizationFailed) ||
		errors.Is(err, transport.ErrRepositoryNotFound) || errors.Is(err, transport.ErrInvalidAuthMethod) {
		return permanent{err}
	}
	return err
}
