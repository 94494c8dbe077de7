package sources

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"
)

// Auth holds the credentials for a repository: a username and a password
// or token for HTTPS, a private key and known_hosts for SSH. The zero Auth
// is anonymous. Which part is used depends on the URL's scheme.
//
// String, GoString, LogValue and MarshalJSON never show a secret, so an
// Auth may be printed, logged and encoded.
type Auth struct {
	// Username for HTTPS. With a Password and no Username, "git" is used.
	Username string
	// Password is the HTTPS password or access token.
	Password string
	// SSHUser is the SSH login when the URL names none; "git" by default.
	SSHUser string
	// SSHKey is a PEM private key. Without one, SSH uses the agent at
	// SSH_AUTH_SOCK.
	SSHKey []byte
	// SSHKeyPassphrase decrypts an encrypted SSHKey.
	SSHKeyPassphrase string
	// KnownHostsFile verifies the SSH server's host key. Without one,
	// $SSH_KNOWN_HOSTS or ~/.ssh/known_hosts is used. An unknown host is
	// always refused.
	KnownHostsFile string
}

// The environment variables AuthFromEnv reads. A variable ending in _FILE
// names a file that holds the value; setting both forms is an error.
const (
	EnvUsername         = "REZUSCLOUD_GIT_USERNAME"
	EnvPassword         = "REZUSCLOUD_GIT_PASSWORD"
	EnvToken            = "REZUSCLOUD_GIT_TOKEN"
	EnvSSHUser          = "REZUSCLOUD_GIT_SSH_USER"
	EnvSSHKey           = "REZUSCLOUD_GIT_SSH_KEY"
	EnvSSHKeyPassphrase = "REZUSCLOUD_GIT_SSH_KEY_PASSPHRASE"
	EnvKnownHostsFile   = "REZUSCLOUD_GIT_KNOWN_HOSTS_FILE"
)

// AuthFromEnv reads credentials from the environment:
// REZUSCLOUD_GIT_USERNAME, REZUSCLOUD_GIT_PASSWORD[_FILE] or
// REZUSCLOUD_GIT_TOKEN[_FILE] for HTTPS; REZUSCLOUD_GIT_SSH_KEY[_FILE],
// REZUSCLOUD_GIT_SSH_KEY_PASSPHRASE[_FILE], REZUSCLOUD_GIT_SSH_USER and
// REZUSCLOUD_GIT_KNOWN_HOSTS_FILE for SSH. Values read from files lose one
// trailing newline. A malformed or encrypted-without-passphrase key is an
// error here, not at the first fetch.
func AuthFromEnv() (Auth, error) {
	return AuthFrom(os.Getenv)
}

// AuthFrom is AuthFromEnv reading the variables through getenv.
func AuthFrom(getenv func(string) string) (Auth, error) {
	return authFromEnv(getenv)
}

func authFromEnv(getenv func(string) string) (Auth, error) {
	var a Auth
	var errs []error
	value := func(name string) string {
		v, err := envOrFile(getenv, name)
		if err != nil {
			errs = append(errs, err)
		}
		return v
	}
	a.Username = getenv(EnvUsername)
	a.Password = value(EnvPassword)
	if token := value(EnvToken); token != "" {
		if a.Password != "" {
			errs = append(errs, fmt.Errorf("%s and %s are both set: use one", EnvPassword, EnvToken))
		}
		a.Password = token
	}
	a.SSHUser = getenv(EnvSSHUser)
	a.SSHKey = []byte(value(EnvSSHKey))
	if len(a.SSHKey) == 0 {
		a.SSHKey = nil
	}
	a.SSHKeyPassphrase = value(EnvSSHKeyPassphrase)
	a.KnownHostsFile = getenv(EnvKnownHostsFile)
	if a.KnownHostsFile != "" {
		if _, err := os.Stat(a.KnownHostsFile); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", EnvKnownHostsFile, err))
		}
	}
	if a.SSHKey != nil {
		if _, err := a.signer(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", EnvSSHKey, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Auth{}, err
	}
	return a, nil
}

// envOrFile reads name or the file named by name_FILE. Errors name the
// variable and the file, never the value.
func envOrFile(getenv func(string) string, name string) (string, error) {
	v, file := getenv(name), getenv(name+"_FILE")
	switch {
	case v != "" && file != "":
		return "", fmt.Errorf("%s and %s_FILE are both set: use one", name, name)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%s_FILE: %w", name, err)
		}
		s := strings.TrimSuffix(string(b), "\n")
		s = strings.TrimSuffix(s, "\r")
		if s == "" {
			return "", fmt.Errorf("%s_FILE: %s is empty", name, file)
		}
		return s, nil
	}
	return v, nil
}

// IsZero reports whether a holds no credentials at all.
func (a Auth) IsZero() bool {
	return a.Username == "" && a.Password == "" && a.SSHUser == "" && len(a.SSHKey) == 0 &&
		a.SSHKeyPassphrase == "" && a.KnownHostsFile == ""
}

// String describes a without its secrets.
func (a Auth) String() string {
	var parts []string
	if a.Username != "" {
		parts = append(parts, "username="+strconv.Quote(a.Username))
	}
	if a.Password != "" {
		parts = append(parts, "password=[redacted]")
	}
	if a.SSHUser != "" {
		parts = append(parts, "ssh_user="+strconv.Quote(a.SSHUser))
	}
	if len(a.SSHKey) > 0 {
		parts = append(parts, "ssh_key=[redacted]")
	}
	if a.SSHKeyPassphrase != "" {
		parts = append(parts, "ssh_key_passphrase=[redacted]")
	}
	if a.KnownHostsFile != "" {
		parts = append(parts, "known_hosts="+strconv.Quote(a.KnownHostsFile))
	}
	if len(parts) == 0 {
		return "Auth{anonymous}"
	}
	return "Auth{" + strings.Join(parts, " ") + "}"
}

// GoString is String, so that %#v hides the secrets too.
func (a Auth) GoString() string { return a.String() }

// LogValue logs a without its secrets.
func (a Auth) LogValue() slog.Value {
	var attrs []slog.Attr
	if a.Username != "" {
		attrs = append(attrs, slog.String("username", a.Username))
	}
	if a.Password != "" {
		attrs = append(attrs, slog.String("password", "[redacted]"))
	}
	if a.SSHUser != "" {
		attrs = append(attrs, slog.String("ssh_user", a.SSHUser))
	}
	if len(a.SSHKey) > 0 {
		attrs = append(attrs, slog.String("ssh_key", "[redacted]"))
	}
	if a.KnownHostsFile != "" {
		attrs = append(attrs, slog.String("known_hosts", a.KnownHostsFile))
	}
	if len(attrs) == 0 {
		return slog.StringValue("anonymous")
	}
	return slog.GroupValue(attrs...)
}

// MarshalJSON encodes a without its secrets, so that a configuration dump
// never carries them.
func (a Auth) MarshalJSON() ([]byte, error) {
	redact := func(set bool) string {
		if set {
			return "[redacted]"
		}
		return ""
	}
	return json.Marshal(struct {
		Username         string `json:"username,omitempty"`
		Password         string `json:"password,omitempty"`
		SSHUser          string `json:"sshUser,omitempty"`
		SSHKey           string `json:"sshKey,omitempty"`
		SSHKeyPassphrase string `json:"sshKeyPassphrase,omitempty"`
		KnownHostsFile   string `json:"knownHostsFile,omitempty"`
	}{a.Username, redact(a.Password != ""), a.SSHUser, redact(len(a.SSHKey) > 0),
		redact(a.SSHKeyPassphrase != ""), a.KnownHostsFile})
}

func (a Auth) signer() (ssh.Signer, error) {
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
	return signer, nil
}

// method returns the go-git auth method for the endpoint, or nil for
// anonymous access.
func (a Auth) method(ep *transport.Endpoint) (transport.AuthMethod, error) {
	switch ep.Protocol {
	case "http", "https":
		if a.Username == "" && a.Password == "" {
			return nil, nil
		}
		user := a.Username
		if user == "" {
			user = "git"
		}
		return &githttp.BasicAuth{Username: user, Password: a.Password}, nil
	case "ssh":
		user := ep.User
		if user == "" {
			user = a.SSHUser
		}
		if user == "" {
			user = "git"
		}
		var helper gitssh.HostKeyCallbackHelper
		if a.KnownHostsFile != "" {
			db, err := gitssh.NewKnownHostsDb(a.KnownHostsFile)
			if err != nil {
				return nil, fmt.Errorf("known_hosts %s: %w", a.KnownHostsFile, err)
			}
			helper.HostKeyCallback = db.HostKeyCallback()
			helper.HostKeyAlgorithms = db.HostKeyAlgorithms(net.JoinHostPort(ep.Host, strconv.Itoa(sshPort(ep))))
		}
		if len(a.SSHKey) == 0 {
			agent, err := gitssh.NewSSHAgentAuth(user)
			if err != nil {
				return nil, fmt.Errorf("no SSH key set and no SSH agent: %w", err)
			}
			agent.HostKeyCallbackHelper = helper
			return agent, nil
		}
		signer, err := a.signer()
		if err != nil {
			return nil, err
		}
		return &gitssh.PublicKeys{User: user, Signer: signer, HostKeyCallbackHelper: helper}, nil
	}
	return nil, nil
}

func sshPort(ep *transport.Endpoint) int {
	if ep.Port != 0 {
		return ep.Port
	}
	return 22
}
