package sources

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/rezuscloud/rezuscloud/internal/backoff"
)

// Defaults of GitOptions.
const (
	DefaultBranch       = "main"
	DefaultPollInterval = 30 * time.Second
	DefaultTimeout      = 2 * time.Minute
	maxDefaultBackoff   = 5 * time.Minute
)

// GitOptions configures a Git source.
type GitOptions struct {
	// URL of the repository: https://, ssh://, scp-like git@host:path,
	// git:// or a local path. A password in an HTTPS URL is used as the
	// credentials and kept out of logs and the clone's config.
	URL string
	// Branch to follow; DefaultBranch when Tag and Commit are empty too.
	Branch string
	// Tag to follow instead of a branch. A moved tag is followed.
	Tag string
	// Ref is any other full ref name to follow, such as
	// refs/pull/12/head; previews use it.
	Ref string
	// Commit pins a full commit sha instead of following a ref.
	Commit string
	// Path is the directory inside the repository to load; the whole tree
	// when empty.
	Path string
	// Dir is the data directory. The clone lives in Dir/git/<hash of URL>,
	// a bare repository; it is created with mode 0700.
	Dir string
	// PollInterval between two polls of the remote head; DefaultPollInterval
	// when zero.
	PollInterval time.Duration
	// MaxBackoff caps the wait between polls after failures; when zero, ten
	// poll intervals but at most 5 minutes.
	MaxBackoff time.Duration
	// Timeout bounds one poll, ls-remote and fetch together;
	// DefaultTimeout when zero.
	Timeout time.Duration
	// Auth holds the credentials; zero for anonymous access.
	Auth Auth
	// Logger receives one line per new revision and per failed poll;
	// slog.Default() when nil.
	Logger *slog.Logger
	// Verifier, when set, checks each snapshot's commit signature; the
	// outcome is Snapshot.Signature.
	Verifier *Verifier
}

// Git is a Source that polls a remote repository. Each poll asks the
// remote for the head of the ref (an ls-remote) and fetches only when it
// has moved to a commit the clone does not hold. Snapshots read files
// straight from the clone's object storage.
type Git struct {
	remote     *remote
	ref        plumbing.ReferenceName // empty when pinned
	pinned     plumbing.Hash
	refLabel   string
	root       string
	dir        string
	clone      *cloneDir
	maxPacks   int
	interval   time.Duration
	maxBackoff time.Duration
	timeout    time.Duration
	log        *slog.Logger
	verifier   *Verifier
	trigger    chan struct{}
	running    atomic.Bool

	// Guarded by clone.mu.
	st  *filesystem.Storage
	gen uint64

	mu     sync.Mutex
	status Status
	last   Snapshot
	seen   bool
}

// cloneDir serializes the Git sources of one process that share a clone.
// gen counts the fetches into it, so that a source whose storage indexed
// the packs before another source's fetch knows to index them again.
type cloneDir struct {
	mu  sync.Mutex
	gen uint64
}

var cloneDirs sync.Map // clone path → *cloneDir

var shaPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)

// NewGit checks the options and returns a source. It does not touch the
// network or the disk: the first Fetch does.
func NewGit(opts GitOptions) (*Git, error) {
	r, err := newRemote(opts.URL, opts.Auth)
	if err != nil {
		return nil, err
	}
	g := &Git{
		remote:     r,
		interval:   opts.PollInterval,
		maxBackoff: opts.MaxBackoff,
		timeout:    opts.Timeout,
		log:        opts.Logger,
		verifier:   opts.Verifier,
		trigger:    make(chan struct{}, 1),
		maxPacks:   maxPacks,
	}
	set := 0
	for _, s := range []string{opts.Branch, opts.Tag, opts.Commit, opts.Ref} {
		if s != "" {
			set++
		}
	}
	if set > 1 {
		return nil, fmt.Errorf("repository %s: set only one of branch (%q), tag (%q), commit (%q) and ref (%q)",
			r.url, opts.Branch, opts.Tag, opts.Commit, opts.Ref)
	}
	switch {
	case opts.Commit != "":
		c := strings.ToLower(opts.Commit)
		if !shaPattern.MatchString(c) {
			return nil, fmt.Errorf("repository %s: commit %q is not a full 40-character sha", r.url, opts.Commit)
		}
		g.pinned = plumbing.NewHash(c)
		g.refLabel = c
	case opts.Tag != "":
		g.ref = plumbing.NewTagReferenceName(opts.Tag)
	case opts.Ref != "":
		if !strings.HasPrefix(opts.Ref, "refs/") {
			return nil, fmt.Errorf("repository %s: ref %q is not a full ref name (refs/...)", r.url, opts.Ref)
		}
		g.ref = plumbing.ReferenceName(opts.Ref)
	default:
		b := opts.Branch
		if b == "" {
			b = DefaultBranch
		}
		g.ref = plumbing.NewBranchReferenceName(b)
	}
	if g.ref != "" {
		if err := g.ref.Validate(); err != nil {
			return nil, fmt.Errorf("repository %s: %s: %w", r.url, g.ref, err)
		}
		g.refLabel = g.ref.String()
	}
	if g.root, err = cleanPath(opts.Path); err != nil {
		return nil, fmt.Errorf("repository %s: %w", r.url, err)
	}
	if opts.Dir == "" {
		return nil, fmt.Errorf("repository %s: no data directory to keep the clone in", r.url)
	}
	sum := sha256.Sum256([]byte(r.url))
	g.dir = filepath.Join(opts.Dir, "git", hex.EncodeToString(sum[:8]))
	if abs, err := filepath.Abs(g.dir); err == nil {
		g.dir = abs
	}
	v, _ := cloneDirs.LoadOrStore(g.dir, &cloneDir{})
	g.clone = v.(*cloneDir)

	if g.interval < 0 || g.maxBackoff < 0 || g.timeout < 0 {
		return nil, fmt.Errorf("repository %s: negative poll interval, backoff or timeout", r.url)
	}
	if g.interval == 0 {
		g.interval = DefaultPollInterval
	}
	if g.maxBackoff == 0 {
		g.maxBackoff = min(10*g.interval, max(maxDefaultBackoff, g.interval))
	}
	g.maxBackoff = max(g.maxBackoff, g.interval)
	if g.timeout == 0 {
		g.timeout = DefaultTimeout
	}
	if g.log == nil {
		g.log = slog.Default()
	}
	g.log = g.log.With("source", r.url, "ref", g.refLabel)
	g.status = Status{URL: r.url, Ref: g.refLabel}
	return g, nil
}

// cleanPath turns the path option, relative to the repository's top with
// or without a leading slash, into a Snapshot.Root.
func cleanPath(p string) (string, error) {
	if p == "" {
		return ".", nil
	}
	c := path.Clean(strings.Trim(filepath.ToSlash(p), "/"))
	if !fs.ValidPath(c) {
		return "", fmt.Errorf("path %q must stay inside the repository", p)
	}
	return c, nil
}

// CloneDir returns where the clone is kept.
func (g *Git) CloneDir() string { return g.dir }

// Trigger asks Run to poll now. Triggers that arrive before that poll
// starts coalesce into it.
func (g *Git) Trigger() {
	select {
	case g.trigger <- struct{}{}:
	default:
	}
}

// Status reports the last poll.
func (g *Git) Status() Status {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.status
}

// Run polls until ctx is done; see Source. It waits PollInterval between
// polls, and after failures twice as long each time up to MaxBackoff; a
// Trigger cuts a wait short. After a poll that no retry can mend (a
// SHA-256 repository), it waits for a Trigger alone.
func (g *Git) Run(ctx context.Context, out chan<- Snapshot) error {
	if !g.running.CompareAndSwap(false, true) {
		return fmt.Errorf("repository %s: Run is already running", g.remote.url)
	}
	defer g.running.Store(false)
	for {
		snap, changed, err := g.fetchOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil && changed {
			select {
			case out <- snap:
			case <-ctx.Done():
				return nil
			}
		}
		// A merge rewrites every object of the clone, which takes
		// seconds in a large repository: the revision is on its way
		// first.
		if err == nil {
			g.compactDue()
		}
		if !g.wait(ctx, err) {
			return nil
		}
	}
}

// wait waits after a poll that returned err until the next poll is due or
// triggered; false when ctx ended first.
func (g *Git) wait(ctx context.Context, err error) bool {
	var next <-chan time.Time
	if errors.Is(err, ErrSHA256) {
		g.log.Error("the repository cannot be read: polls stop until a trigger (a push webhook, rezusctl reconcile) or a restart", "err", err)
		g.mu.Lock()
		g.status.NextPoll = time.Time{}
		g.mu.Unlock()
	} else {
		delay := g.delay(err)
		g.mu.Lock()
		g.status.NextPoll = time.Now().Add(delay)
		g.mu.Unlock()
		if err != nil {
			g.log.Warn("poll failed", "err", err, "failures", g.Status().Failures, "retry_in", delay)
		}
		t := time.NewTimer(delay)
		defer t.Stop()
		next = t.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-next:
	case <-g.trigger:
	}
	return true
}

// delay is the wait before the next poll after a poll that returned err.
func (g *Git) delay(err error) time.Duration {
	if err == nil || errors.Is(err, ErrPathNotFound) {
		return g.interval
	}
	p := backoff.Policy{Base: g.interval, Max: g.maxBackoff}
	return p.Delay(g.Status().Failures + 1) // the first failure waits twice the interval
}

// Fetch polls once: it compares the remote head with what the clone holds,
// fetches when it moved, and returns the snapshot of the ref's commit and
// whether it differs from the one returned before (the first is always
// new). A pinned commit is fetched once and never polled again. Errors are
// recorded in Status as well as returned.
//
// Fetch is safe to call concurrently with Run, but then one of them sees a
// change first and the other does not. Before it returns, it merges the
// clone's packs when there are too many (see compact); Run merges them
// after it has handed the snapshot out.
func (g *Git) Fetch(ctx context.Context) (Snapshot, bool, error) {
	snap, changed, err := g.fetchOnce(ctx)
	if err == nil {
		g.compactDue()
	}
	return snap, changed, err
}

// compactDue merges the clone's packs when there are too many (see
// compact).
func (g *Git) compactDue() {
	g.clone.mu.Lock()
	defer g.clone.mu.Unlock()
	st, err := g.storage()
	if err == nil {
		err = g.compact(st)
	}
	if err != nil {
		g.log.Warn("merge packs", "err", err)
	}
}

// fetchOnce is Fetch without the merge of the clone's packs.
func (g *Git) fetchOnce(ctx context.Context) (Snapshot, bool, error) {
	g.clone.mu.Lock()
	defer g.clone.mu.Unlock()
	start := time.Now()
	snap, changed, err := g.poll(ctx)

	g.mu.Lock()
	defer g.mu.Unlock()
	g.status.Polls++
	g.status.LastFetch = start
	if err != nil && ctx.Err() != nil {
		// The caller gave up (shutdown): not a failure of the repository.
		return Snapshot{}, false, err
	}
	if err != nil {
		g.status.Failures++
		g.status.Errors++
		g.status.LastError = err.Error()
		return Snapshot{}, false, err
	}
	g.status.Failures = 0
	g.status.LastError = ""
	g.status.LastSuccess = start
	if changed {
		g.last, g.seen = snap, true
		g.status.Revision = snap.Revision
		g.log.Info("new revision", "revision", snap.Revision, "took", time.Since(start).Round(time.Millisecond))
	}
	return g.last, changed, nil
}

func (g *Git) poll(ctx context.Context) (Snapshot, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	st, err := g.storage()
	if err != nil {
		return Snapshot{}, false, err
	}
	g.mu.Lock()
	seen, last := g.seen, g.last
	g.mu.Unlock()

	var target plumbing.Hash
	if g.ref == "" {
		if seen {
			return last, false, nil
		}
		target = g.pinned
		if !hasObject(st, target) {
			if err := g.fetch(ctx, st, allRefSpecs); err != nil {
				return Snapshot{}, false, err
			}
			if !hasObject(st, target) {
				return Snapshot{}, false, fmt.Errorf("%w: commit %s is not in any branch or tag of %s",
					ErrRefNotFound, target, g.remote.url)
			}
		}
	} else {
		if target, err = g.lsRemote(ctx); err != nil {
			return Snapshot{}, false, err
		}
		if !hasObject(st, target) {
			spec := config.RefSpec("+" + g.ref.String() + ":" + g.localRef().String())
			if err := g.fetch(ctx, st, []config.RefSpec{spec}); err != nil {
				return Snapshot{}, false, err
			}
			if !hasObject(st, target) {
				// The ref moved again between ls-remote and fetch: take
				// what the fetch brought.
				ref, err := st.Reference(g.localRef())
				if err != nil {
					return Snapshot{}, false, fmt.Errorf("fetch %s %s: %w", g.remote.url, g.ref, err)
				}
				target = ref.Hash()
			}
		}
	}

	commit, err := peel(st, target)
	if err != nil {
		return Snapshot{}, false, fmt.Errorf("%s %s at %s: %w", g.remote.url, g.refLabel, target, err)
	}
	if seen && commit.Hash.String() == last.Revision {
		return last, false, nil
	}
	snap, err := g.snapshot(commit)
	if err != nil {
		return Snapshot{}, false, err
	}
	return snap, true, nil
}

var allRefSpecs = []config.RefSpec{
	"+refs/heads/*:refs/remotes/origin/*",
	"+refs/tags/*:refs/tags/*",
}

// localRef is where the clone keeps the followed ref.
func (g *Git) localRef() plumbing.ReferenceName {
	switch {
	case g.ref.IsBranch():
		return plumbing.NewRemoteReferenceName("origin", g.ref.Short())
	case g.ref.IsTag():
		return g.ref
	}
	// Other refs, such as refs/pull/1/head, are kept apart from branches.
	return plumbing.ReferenceName("refs/rezuscloud/" + strings.TrimPrefix(g.ref.String(), "refs/"))
}

func (g *Git) newRemote(st *filesystem.Storage) *git.Remote {
	return git.NewRemote(st, &config.RemoteConfig{Name: "origin", URLs: []string{g.remote.url}})
}

// lsRemote returns what the followed ref points at on the remote.
func (g *Git) lsRemote(ctx context.Context) (plumbing.Hash, error) {
	refs, err := listRefs(ctx, g.remote)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	h, ok := refs[g.ref.String()]
	if !ok {
		what := "branch"
		if g.ref.IsTag() {
			what = "tag"
		}
		return plumbing.ZeroHash, fmt.Errorf("%w: %s %s does not exist in %s", ErrRefNotFound, what, g.ref.Short(), g.remote.url)
	}
	return plumbing.NewHash(h), nil
}

func (g *Git) fetch(ctx context.Context, st *filesystem.Storage, specs []config.RefSpec) error {
	err := g.newRemote(st).FetchContext(ctx, &git.FetchOptions{
		RemoteName: "origin",
		RefSpecs:   specs,
		Auth:       g.remote.auth,
		Tags:       git.NoTags,
		Force:      true,
	})
	g.clone.gen++
	g.gen = g.clone.gen
	g.mu.Lock()
	g.status.Fetches++
	g.mu.Unlock()
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return fmt.Errorf("fetch %s %s: %w", g.remote.url, g.refLabel, remoteError(err, g.remote))
	}
	return nil
}

// isSHA256 reports whether err is go-git failing to read the references
// of a repository in the SHA-256 object format: their hashes are longer
// than it expects, and the capabilities the server sends with the first
// one say object-format=sha256.
func isSHA256(err error) bool {
	var data *packp.ErrUnexpectedData
	return errors.As(err, &data) && bytes.Contains(data.Data, []byte("object-format=sha256"))
}

func checkRoot(fsys fs.FS, root string) error {
	if root == "." {
		return nil
	}
	info, err := fs.Stat(fsys, root)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s does not exist", ErrPathNotFound, root)
	}
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrPathNotFound, root)
	}
	return nil
}

func hasObject(st storer.EncodedObjectStorer, h plumbing.Hash) bool {
	return st.HasEncodedObject(h) == nil
}

// peel follows annotated tags to the commit they name.
func peel(s storer.EncodedObjectStorer, h plumbing.Hash) (*object.Commit, error) {
	for range 16 {
		obj, err := s.EncodedObject(plumbing.AnyObject, h)
		if err != nil {
			return nil, err
		}
		switch obj.Type() {
		case plumbing.CommitObject:
			return object.DecodeCommit(s, obj)
		case plumbing.TagObject:
			tag, err := object.DecodeTag(s, obj)
			if err != nil {
				return nil, err
			}
			h = tag.Target
		default:
			return nil, fmt.Errorf("%s is a %s, not a commit", h, obj.Type())
		}
	}
	return nil, fmt.Errorf("%s: too many nested tags", h)
}

// remoteError makes transport errors say what the operator must fix.
func remoteError(err error, r *remote) error {
	if isSHA256(err) {
		return ErrSHA256
	}
	if errors.Is(err, transport.ErrAuthenticationRequired) || errors.Is(err, transport.ErrAuthorizationFailed) {
		who := "anonymously"
		if r.user != "" {
			who = fmt.Sprintf("as %q", r.user)
		}
		return fmt.Errorf("%w %s: %w", ErrAuth, who, err)
	}
	if strings.Contains(err.Error(), "ssh: unable to authenticate") {
		return fmt.Errorf("%w as %q with the SSH key: %w", ErrAuth, r.user, err)
	}
	var keyErr *knownhosts.KeyError
	if errors.As(err, &keyErr) {
		if len(keyErr.Want) == 0 {
			return fmt.Errorf("the SSH host key of %s is not in known_hosts: %w", r.ep.Host, err)
		}
		return fmt.Errorf("the SSH host key of %s does not match known_hosts: %w", r.ep.Host, err)
	}
	if errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return fmt.Errorf("%w: the repository is empty", ErrRefNotFound)
	}
	return err
}
