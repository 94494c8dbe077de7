package report

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// repoPath returns the repository path of a clone URL without ".git" and
// surrounding slashes: "owner/repo" for https://host/owner/repo.git,
// ssh://git@host/owner/repo.git and git@host:owner/repo.git, and
// "group/sub/project" for a nested GitLab project. Errors never show a
// password the URL holds.
func repoPath(raw string) (string, error) {
	var p, shown string
	if strings.Contains(raw, "://") {
		u, err := url.Parse(raw)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return "", fmt.Errorf("repository URL: %w", err)
		}
		p, shown = u.Path, u.Redacted()
	} else {
		// scp-like: [user@]host:path
		shown = raw
		at := strings.LastIndex(raw, "@")
		rest := raw[at+1:]
		colon := strings.Index(rest, ":")
		if colon <= 0 || strings.Contains(rest[:colon], "/") {
			return "", fmt.Errorf("repository URL %q: want https://host/owner/repo, ssh://git@host/owner/repo.git or git@host:owner/repo.git", shown)
		}
		p = rest[colon+1:]
	}
	p = strings.Trim(p, "/")
	p = strings.TrimSuffix(p, ".git")
	p = strings.Trim(p, "/")
	if p == "" || strings.Contains(p, "//") {
		return "", fmt.Errorf("repository URL %s: no owner/repository path in it", shown)
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "." || seg == ".." {
			return "", fmt.Errorf("repository URL %s: path segment %q is not allowed", shown, seg)
		}
	}
	return p, nil
}
