package report

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"

	"github.com/rezuscloud/rezuscloud/sources"
)

// gitRemote is a remote repository to push notes to: its URL without a
// password (safe to show) and the go-git credentials for it.
type gitRemote struct {
	url  string
	auth transport.AuthMethod
}

// newGitRemote parses a remote URL as sources does (https://, ssh://,
// scp-like, git://, a local path) and turns a into go-git credentials. A
// user and password in an HTTP(S) URL move into the credentials unless a
// has a password already.
func newGitRemote(raw string, a sources.Auth) (*gitRemote, error) {
	if raw == "" {
		return nil, errors.New("no remote URL")
	}
	clean := raw
	if strings.Contains(raw, "://") {
		u, err := url.Parse(raw)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return nil, fmt.Errorf("remote URL: %w", err)
		}
		if pass, ok := u.User.Password(); ok {
			if u.Scheme != "http" && u.Scheme != "https" {
				return nil, fmt.Errorf("remote URL %s: a password in a %s URL is not supported", u.Redacted(), u.Scheme)
			}
			if a.Password == "" {
				a.Username, a.Password = u.User.Username(), pass
			}
			u.User = nil
		}
		clean = u.String()
	}
	ep, err := transport.NewEndpoint(clean)
	if err != nil {
		return nil, fmt.Errorf("remote URL %s: %w", clean, err)
	}
	m, err := authMethod(a, ep)
	if err != nil {
		return nil, fmt.Errorf("credentials for %s: %w", clean, err)
	}
	return &gitRemote{url: clean, auth: m}, nil
}

// authMethod is the go-git auth method of a for the endpoint, or nil for
// anonymous access: basic auth for HTTP(S), a key (or the SSH agent) with
// known_hosts checking for SSH.
func authMethod(a sources.Auth, ep *transport.Endpoint) (transport.AuthMethod, error) {
	switch ep.Protocol {
	case "http", "https":
		if a.Username == "" && a.Password == "" {
			return nil, nil
		}
		return &githttp.BasicAuth{Username: cmp.Or(a.Username, "git"), Password: a.Password}, nil
	case "ssh":
		user := cmp.Or(ep.User, a.SSHUser, "git")
		var helper gitssh.HostKeyCallbackHelper
		if a.KnownHostsFile != "" {
			db, err := gitssh.NewKnownHostsDb(a.KnownHostsFile)
			if err != nil {
				return nil, fmt.Errorf("known_hosts %s: %w", a.KnownHostsFile, err)
			}
			port := ep.Port
			if port == 0 {
				port = 22
			}
			helper.HostKeyCallback = db.HostKeyCallback()
			helper.HostKeyAlgorithms = db.HostKeyAlgorithms(net.JoinHostPort(ep.Host, strconv.Itoa(port)))
		}
		if len(a.SSHKey) == 0 {
			agent, err := gitssh.NewSSHAgentAuth(user)
			if err != nil {
				return nil, fmt.Errorf("no SSH key set and no SSH agent: %w", err)
			}
			agent.HostKeyCallbackHelper = helper
			return agent, nil
		}
		signer, err := ssh.ParsePrivateKey(a.SSHKey)
		var missing *ssh.PassphraseMissingError
		if errors.As(err, &missing) {
			if a.SSHKeyPassphrase == "" {
				return nil, errors.New("the private key is encrypted and no passphrase is set")
			}
			signer, err = ssh.ParsePrivateKeyWithPassphrase(a.SSHKey, []byte(a.SSHKeyPassphrase))
		}
		if err != nil {
			return nil, fmt.Errorf("parse private key: %w", err)
		}
		return &gitssh.PublicKeys{User: user, Signer: signer, HostKeyCallbackHelper: helper}, nil
	}
	return nil, nil
}
