package sources

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
)

// OpenRevision reads a revision of a local repository, without the
// network: repoPath is a work tree (or any directory inside one) or a bare
// repository, rev anything go-git resolves: a sha or a prefix of one, a
// branch, a tag, HEAD~2. It returns the commit's tree as a read-only file
// system, as a Git source's snapshot has it, and the commit's full sha.
func OpenRevision(repoPath, rev string) (fs.FS, string, error) {
	repo, err := git.PlainOpen(repoPath)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		repo, err = git.PlainOpenWithOptions(repoPath, &git.PlainOpenOptions{DetectDotGit: true})
	}
	if err != nil {
		return nil, "", fmt.Errorf("open repository %s: %w", repoPath, err)
	}
	h, err := repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		if errors.Is(err, plumbing.ErrReferenceNotFound) {
			return nil, "", fmt.Errorf("%w: revision %q in %s", ErrRefNotFound, rev, repoPath)
		}
		return nil, "", fmt.Errorf("revision %q in %s: %w", rev, repoPath, err)
	}
	commit, err := repo.CommitObject(*h)
	if err != nil {
		return nil, "", fmt.Errorf("revision %q in %s: %w", rev, repoPath, err)
	}
	fsys, err := newTreeFS(repo.Storer, commit.TreeHash, commit.Committer.When)
	if err != nil {
		return nil, "", fmt.Errorf("revision %q in %s: %w", rev, repoPath, err)
	}
	return fsys, commit.Hash.String(), nil
}
