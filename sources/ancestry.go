package sources

import (
	"errors"
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// history answers whether a snapshot's commit descends from another, from
// the object storage its file system reads (and under that file system's
// lock: go-git's storage is not safe for concurrent use).
type history struct {
	tree   *gitTree
	commit plumbing.Hash
	clone  string // the clone's directory, for messages
}

// Descends reports whether the snapshot's commit is rev or has rev among
// its ancestors. It answers from the clone the commit was fetched into,
// without the network. A Git source fetches the whole history of what it
// follows, so every ancestor of the commit is in the clone, and a rev the
// clone does not hold (or no commit at all) is not one. The walk is
// breadth first from the commit and stops at rev: a fast-forward costs the
// commits it added, a commit that does not descend from rev its whole
// history, once per revision.
//
// A snapshot of a directory has no history: ErrNoHistory. In a shallow
// clone (made outside the server: a source never fetches shallow), a walk
// that reaches the cut without meeting rev cannot tell, and says so.
func (s Snapshot) Descends(rev string) (bool, error) {
	if s.history == nil {
		return false, fmt.Errorf("%w: %s is not a commit of a repository", ErrNoHistory, s.Revision)
	}
	if rev == s.Revision {
		return true, nil
	}
	if !shaPattern.MatchString(rev) {
		return false, nil
	}
	return s.history.descends(plumbing.NewHash(rev))
}

func (h *history) descends(target plumbing.Hash) (bool, error) {
	t := h.tree
	t.mu.Lock()
	defer t.mu.Unlock()
	var found bool
	var cut []plumbing.Hash
	err := t.retry(func() (err error) {
		found, cut, err = walkTo(t.s, h.commit, target)
		return err
	})
	switch {
	case err != nil:
		return false, fmt.Errorf("history of %s: %w", h.commit, err)
	case found:
		return true, nil
	case len(cut) > 0:
		return false, fmt.Errorf("%w: the clone in %s is shallow (its history stops at %s): cannot tell whether %s descends from %s; remove the clone, and the source fetches the whole history again",
			ErrShallow, h.clone, cut[0], h.commit, target)
	}
	return false, nil
}

// walkTo walks the history of from, breadth first, until it meets target.
// It returns whether it met it and, when it did not, the shallow commits
// whose parents the clone does not hold, where the walk had to stop.
func walkTo(s storer.EncodedObjectStorer, from, target plumbing.Hash) (bool, []plumbing.Hash, error) {
	shallow := map[plumbing.Hash]bool{}
	if ss, ok := s.(storer.ShallowStorer); ok {
		list, err := ss.Shallow()
		if err != nil {
			return false, nil, fmt.Errorf("read the shallow commits: %w", err)
		}
		for _, c := range list {
			shallow[c] = true
		}
	}
	seen := map[plumbing.Hash]bool{from: true}
	queue := []plumbing.Hash{from}
	var cut []plumbing.Hash
	for len(queue) > 0 {
		h := queue[0]
		queue = queue[1:]
		if h == target {
			return true, nil, nil
		}
		if shallow[h] {
			cut = append(cut, h)
			continue
		}
		c, err := object.GetCommit(s, h)
		if err != nil {
			if errors.Is(err, plumbing.ErrObjectNotFound) {
				return false, nil, fmt.Errorf("commit %s is not in the clone although a descendant is", h)
			}
			return false, nil, fmt.Errorf("commit %s: %w", h, err)
		}
		for _, p := range c.ParentHashes {
			if !seen[p] {
				seen[p] = true
				queue = append(queue, p)
			}
		}
	}
	return false, cut, nil
}
