package report

import (
	"github.com/go-git/go-git/v5/plumbing/transport"

	"github.com/rezuscloud/rezuscloud/sources"
)

// gitRemote is a remote repository to push notes to: its URL without a
// password (safe to show) and the go-git credentials for it.
type gitRemote struct {
	url  string
	auth transport.AuthMethod
}

// newGitRemote parses a remote URL and its credentials exactly as the git
// source does.
func newGitRemote(raw string, a sources.Auth) (*gitRemote, error) {
	u, m, err := sources.Endpoint(raw, a)
	if err != nil {
		return nil, err
	}
	return &gitRemote{url: u, auth: m}, nil
}
