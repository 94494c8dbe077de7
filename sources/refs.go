package sources

import (
	"context"
	"fmt"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"
)

// ListRefs asks the repository at url for its refs (an ls-remote) and
// returns them by name, e.g. "refs/heads/main" or "refs/tags/v1", each with
// the sha it points at (an annotated tag's own sha, not its commit's).
// Symbolic refs such as HEAD are left out. Nothing is fetched or stored.
func ListRefs(ctx context.Context, url string, auth Auth) (map[string]string, error) {
	r, err := newRemote(url, auth)
	if err != nil {
		return nil, err
	}
	return listRefs(ctx, r)
}

func listRefs(ctx context.Context, r *remote) (map[string]string, error) {
	rem := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{r.url}})
	refs, err := rem.ListContext(ctx, &git.ListOptions{Auth: r.auth, PeelingOption: git.IgnorePeeled})
	if err != nil {
		return nil, fmt.Errorf("ls-remote %s: %w", r.url, remoteError(err, r))
	}
	out := make(map[string]string, len(refs))
	for _, ref := range refs {
		if ref.Type() != plumbing.HashReference {
			continue
		}
		out[ref.Name().String()] = ref.Hash().String()
	}
	return out, nil
}
