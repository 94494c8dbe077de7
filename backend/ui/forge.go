package ui

import (
	"net/url"
	"strconv"
	"strings"
)

// forge is the web side of the repository the manifests come from, when
// its URL tells which: GitHub, GitLab, or Gitea and Forgejo. The zero
// forge links nothing.
type forge struct {
	kind string // "github", "gitlab" or "gitea"
	base string // https://HOST/OWNER/REPO
}

// forgeOf recognises a repository URL (https://, ssh://, git:// or
// scp-like git@host:path) on a known forge: github.com, gitlab.com,
// codeberg.org, or a host whose name says github, gitlab, gitea or
// forgejo.
func forgeOf(repo string) forge {
	host, path, ok := splitRepoURL(repo)
	if !ok {
		return forge{}
	}
	h := strings.ToLower(host)
	var kind string
	switch {
	case h == "github.com" || strings.Contains(h, "github"):
		kind = "github"
	case h == "gitlab.com" || strings.Contains(h, "gitlab"):
		kind = "gitlab"
	case h == "codeberg.org" || strings.Contains(h, "gitea") || strings.Contains(h, "forgejo"):
		kind = "gitea"
	default:
		return forge{}
	}
	path = strings.TrimSuffix(strings.Trim(path, "/"), ".git")
	if strings.Count(path, "/") < 1 {
		return forge{}
	}
	return forge{kind: kind, base: "https://" + host + "/" + path}
}

// splitRepoURL returns the host (without user or port) and the path of a
// repository URL.
func splitRepoURL(repo string) (host, path string, ok bool) {
	if !strings.Contains(repo, "://") {
		// scp-like: [user@]host:path
		at := strings.LastIndexByte(repo, '@')
		h, p, found := strings.Cut(repo[at+1:], ":")
		if !found || h == "" || strings.ContainsAny(h, "/\\") {
			return "", "", false
		}
		return h, p, true
	}
	u, err := url.Parse(repo)
	if err != nil || u.Hostname() == "" {
		return "", "", false
	}
	switch u.Scheme {
	case "https", "http", "ssh", "git":
	default:
		return "", "", false
	}
	return u.Hostname(), u.Path, true
}

// fileLink links line of file (relative to the repository's top) at
// commit sha, or returns "" when the forge or the revision does not allow
// it (a directory source's content hash is no commit).
func (f forge) fileLink(sha, file string, line int) string {
	if f.kind == "" || !isCommitSHA(sha) || file == "" {
		return ""
	}
	var b strings.Builder
	b.WriteString(f.base)
	switch f.kind {
	case "github":
		b.WriteString("/blob/")
	case "gitlab":
		b.WriteString("/-/blob/")
	case "gitea":
		b.WriteString("/src/commit/")
	}
	b.WriteString(sha)
	for _, seg := range strings.Split(file, "/") {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(seg))
	}
	if line > 0 {
		b.WriteString("#L" + strconv.Itoa(line))
	}
	return b.String()
}

// commitLink links the commit sha on the forge, or returns "".
func (f forge) commitLink(sha string) string {
	if f.kind == "" || !isCommitSHA(sha) {
		return ""
	}
	if f.kind == "gitlab" {
		return f.base + "/-/commit/" + sha
	}
	return f.base + "/commit/" + sha
}

// isCommitSHA reports whether s is a full git object name (SHA-1 or
// SHA-256, in hex).
func isCommitSHA(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
