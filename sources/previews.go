package sources

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"sort"
	"strings"
	"sync"
	"time"
)

// PreviewOptions configure a Previews watcher.
type PreviewOptions struct {
	// Git is the repository and settings of the main source; its Branch,
	// Tag and Commit name the main ref, which is never previewed.
	Git GitOptions
	// Patterns select the refs to preview, such as "refs/heads/*" or
	// "refs/pull/*/head"; "*" matches within one path segment.
	Patterns []string
}

// PreviewUpdate is what one poll of the preview refs found.
type PreviewUpdate struct {
	// Snapshots are the new heads of preview refs, each with Ref set.
	Snapshots []Snapshot
	// Gone are the preview refs that no longer exist.
	Gone []string
}

// Previews follows every ref of a repository that matches its patterns,
// except the main one, and yields a snapshot for each new head. It shares
// the main source's clone.
type Previews struct {
	opts    PreviewOptions
	mainRef string
	log     *slog.Logger

	mu      sync.Mutex
	refs    map[string]*Git
	trigger chan struct{}
}

// Trigger makes Run poll now; triggers that arrive while one is pending
// coalesce.
func (p *Previews) Trigger() {
	select {
	case p.trigger <- struct{}{}:
	default:
	}
}

// NewPreviews checks the patterns and returns a watcher.
func NewPreviews(opts PreviewOptions) (*Previews, error) {
	if len(opts.Patterns) == 0 {
		return nil, fmt.Errorf("previews: no ref patterns")
	}
	for _, p := range opts.Patterns {
		if !strings.HasPrefix(p, "refs/") {
			return nil, fmt.Errorf("preview ref pattern %q: want a full ref pattern such as refs/heads/* or refs/pull/*/head", p)
		}
		if _, err := path.Match(p, "refs/x"); err != nil {
			return nil, fmt.Errorf("preview ref pattern %q: %w", p, err)
		}
	}
	main := "refs/heads/" + DefaultBranch
	switch {
	case opts.Git.Branch != "":
		main = "refs/heads/" + opts.Git.Branch
	case opts.Git.Tag != "":
		main = "refs/tags/" + opts.Git.Tag
	case opts.Git.Ref != "":
		main = opts.Git.Ref
	}
	log := opts.Git.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Previews{opts: opts, mainRef: main, log: log.With("component", "previews"), refs: map[string]*Git{}, trigger: make(chan struct{}, 1)}, nil
}

// Matches reports whether ref is previewed.
func (p *Previews) Matches(ref string) bool {
	if ref == p.mainRef {
		return false
	}
	for _, pat := range p.opts.Patterns {
		if ok, _ := path.Match(pat, ref); ok {
			return true
		}
	}
	return false
}

// Poll lists the repository's refs once and fetches the preview refs whose
// head moved. A ref that fails to fetch is reported in the log and tried
// again next poll; it does not stop the others.
func (p *Previews) Poll(ctx context.Context) (PreviewUpdate, error) {
	refs, err := ListRefs(ctx, p.opts.Git.URL, p.opts.Git.Auth)
	if err != nil {
		return PreviewUpdate{}, err
	}
	var names []string
	for name := range refs {
		if p.Matches(name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var up PreviewUpdate
	p.mu.Lock()
	defer p.mu.Unlock()
	for ref := range p.refs {
		if _, ok := refs[ref]; !ok || !p.Matches(ref) {
			delete(p.refs, ref)
			up.Gone = append(up.Gone, ref)
		}
	}
	sort.Strings(up.Gone)
	for _, ref := range names {
		g := p.refs[ref]
		if g == nil {
			o := p.opts.Git
			o.Branch, o.Tag, o.Commit, o.Ref = "", "", "", ref
			if g, err = NewGit(o); err != nil {
				p.log.Warn("preview ref", "ref", ref, "err", err)
				continue
			}
			p.refs[ref] = g
		}
		snap, changed, err := g.Fetch(ctx)
		if err != nil {
			p.log.Warn("fetch preview ref", "ref", ref, "err", err)
			continue
		}
		if changed {
			snap.Ref = ref
			up.Snapshots = append(up.Snapshots, snap)
		}
	}
	return up, nil
}

// Run polls every interval, and when triggered, until ctx ends, sending
// each update that found something. After a poll that no retry can mend
// (a SHA-256 repository), it waits for a trigger alone.
func (p *Previews) Run(ctx context.Context, interval time.Duration, out chan<- PreviewUpdate) {
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		up, err := p.Poll(ctx)
		if err != nil && ctx.Err() == nil {
			p.log.Warn("list preview refs", "err", err)
		}
		tick := t.C
		if errors.Is(err, ErrSHA256) {
			tick = nil
		}
		if len(up.Snapshots) > 0 || len(up.Gone) > 0 {
			select {
			case out <- up:
			case <-ctx.Done():
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick:
		case <-p.trigger:
		}
	}
}
