package webhook

import (
	"net"
	"net/url"
	"path"
	"strings"
)

// defaultPorts are dropped from normalised URLs, so that the same server
// reached with or without its default port compares equal.
var defaultPorts = map[string]string{
	"http":    "80",
	"https":   "443",
	"ssh":     "22",
	"git+ssh": "22",
	"ssh+git": "22",
	"git":     "9418",
}

// NormalizeRepoURL reduces a repository URL to host/path so that the
// forms one repository goes by compare equal:
//
//	https://GitHub.com/acme/infra.git  → github.com/acme/infra
//	ssh://git@github.com:22/acme/infra → github.com/acme/infra
//	git@github.com:acme/infra.git      → github.com/acme/infra
//	https://user:pw@github.com/acme/infra/ → github.com/acme/infra
//
// It drops the scheme, credentials, default ports, query and fragment,
// one ".git" suffix and trailing slashes, lowercases the host and keeps a
// non-default port (host:port). The path keeps its case, since servers
// differ on whether paths are case-sensitive. A local path or file:// URL
// becomes its cleaned absolute or relative path, "/srv/git/infra" for
// both "/srv/git/infra.git/" and "file:///srv/git/infra.git". An empty
// string stays empty. It never fails: input it cannot make sense of is
// returned trimmed.
func NormalizeRepoURL(u string) string {
	s := strings.TrimSpace(u)
	if s == "" {
		return ""
	}
	if scheme, rest, ok := strings.Cut(s, "://"); ok && isScheme(scheme) {
		scheme = strings.ToLower(scheme)
		rest = cutQuery(rest)
		authority, p, _ := strings.Cut(rest, "/")
		if scheme == "file" {
			return cleanRepoPath("/" + p)
		}
		return hostPath(hostOf(authority, defaultPorts[scheme]), p)
	}
	if host, p, ok := scpLike(s); ok {
		return hostPath(hostOf(host, ""), cutQuery(p))
	}
	return cleanRepoPath(s)
}

// isScheme reports whether s is a URL scheme: a letter, then letters,
// digits, '+', '-' or '.'.
func isScheme(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// scpLike splits git's scp-like syntax, [user@]host:path, which git
// recognises when a colon comes before any slash.
func scpLike(s string) (host, p string, ok bool) {
	i := strings.IndexByte(s, ':')
	if i <= 0 || strings.Contains(s[:i], "/") {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

func cutQuery(s string) string {
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		return s[:i]
	}
	return s
}

// hostOf returns the lowercased host of an authority, without user info
// and without the port when it is the scheme's default.
func hostOf(authority, defaultPort string) string {
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		authority = authority[i+1:]
	}
	host, port, err := net.SplitHostPort(authority)
	if err != nil {
		host, port = strings.Trim(authority, "[]"), ""
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if port != "" && port != defaultPort {
		return net.JoinHostPort(host, port)
	}
	if strings.Contains(host, ":") {
		return "[" + host + "]"
	}
	return host
}

func hostPath(host, p string) string {
	p = strings.TrimPrefix(cleanRepoPath("/"+p), "/")
	if p == "" {
		return host
	}
	return host + "/" + p
}

// cleanRepoPath unescapes p where it is valid percent-encoding, cleans it
// and drops trailing slashes and one ".git" suffix.
func cleanRepoPath(p string) string {
	if unescaped, err := url.PathUnescape(p); err == nil {
		p = unescaped
	}
	p = path.Clean(p)
	p = strings.TrimSuffix(p, ".git")
	if len(p) > 1 {
		p = strings.TrimRight(p, "/")
	}
	if p == "." || p == "" {
		return ""
	}
	return p
}
