package sources

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
)

// remote is a repository URL split from the credentials it may carry.
type remote struct {
	url  string // without a password: safe to log, store and show
	ep   *transport.Endpoint
	user string // the HTTPS user, for error messages
	auth transport.AuthMethod
}

// newRemote parses a repository URL, https://host/org/repo.git,
// ssh://git@host/repo, git@host:org/repo.git, git://host/repo or a local
// path, and prepares its authentication. A user and password in an HTTP(S)
// URL move into the credentials (unless auth already has a password) and
// out of the URL, so that they are never logged or written to disk.
func newRemote(raw string, auth Auth) (*remote, error) {
	if raw == "" {
		return nil, errors.New("no repository URL")
	}
	clean := raw
	if strings.Contains(raw, "://") {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("repository URL: %w", redactURLError(err))
		}
		if pass, ok := u.User.Password(); ok {
			switch u.Scheme {
			case "http", "https":
				if auth.Password == "" {
					auth.Username, auth.Password = u.User.Username(), pass
				}
				u.User = nil
			default:
				return nil, fmt.Errorf("repository URL %s: a password in a %s URL is not supported", u.Redacted(), u.Scheme)
			}
		}
		clean = u.String()
	}
	ep, err := transport.NewEndpoint(clean)
	if err != nil {
		return nil, fmt.Errorf("repository URL %s: %w", clean, err)
	}
	switch ep.Protocol {
	case "http", "https", "ssh", "git", "file":
	default:
		return nil, fmt.Errorf("repository URL %s: unsupported scheme %q", clean, ep.Protocol)
	}
	m, err := auth.method(ep)
	if err != nil {
		return nil, fmt.Errorf("credentials for %s: %w", clean, err)
	}
	user := auth.Username
	if ep.Protocol == "ssh" {
		user = ep.User
	}
	return &remote{url: clean, ep: ep, user: user, auth: m}, nil
}

// redactURLError drops the URL that url.Parse puts in its errors, which may
// hold a password.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// Endpoint parses a repository URL the way the git source does and returns
// it without credentials, safe to show, together with the go-git
// authentication for it (nil for anonymous access). Other git clients of
// the project, such as the git-notes reporter, use it so that credentials
// are handled in one place.
func Endpoint(raw string, auth Auth) (string, transport.AuthMethod, error) {
	r, err := newRemote(raw, auth)
	if err != nil {
		return "", nil, err
	}
	return r.url, r.auth, nil
}
