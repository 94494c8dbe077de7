package report

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// DefaultGitHubAPI is the API of github.com.
const DefaultGitHubAPI = "https://api.github.com"

// GitHubOptions configures a GitHub reporter.
type GitHubOptions struct {
	// APIURL is the API base: DefaultGitHubAPI when empty;
	// https://HOST/api/v3 for GitHub Enterprise Server; https://HOST/api/v1
	// for Gitea and Forgejo, which speak the same statuses API.
	APIURL string
	// Owner and Repo name the repository. When both are empty they are
	// taken from RepoURL.
	Owner, Repo string
	// RepoURL is the repository's clone URL: https://host/owner/repo(.git),
	// ssh://git@host/owner/repo.git or git@host:owner/repo.git.
	RepoURL string
	// Token is sent as "Authorization: Bearer TOKEN". Required.
	Token Token
	// Client sends the requests; one with DefaultHTTPTimeout when nil.
	// Redirects are never followed.
	Client *http.Client
}

// GitHub reports commit statuses through the GitHub statuses API,
// POST {api}/repos/{owner}/{repo}/statuses/{sha}, which Gitea and Forgejo
// serve too.
type GitHub struct {
	p        *poster
	endpoint string // up to and including "/statuses/"
}

var _ Reporter = (*GitHub)(nil)

// NewGitHub checks the options. It does not touch the network.
func NewGitHub(opts GitHubOptions) (*GitHub, error) {
	api := opts.APIURL
	if api == "" {
		api = DefaultGitHubAPI
	}
	api, err := checkAPIURL("github", api)
	if err != nil {
		return nil, err
	}
	owner, repo := opts.Owner, opts.Repo
	if owner == "" && repo == "" {
		if opts.RepoURL == "" {
			return nil, fmt.Errorf("github reporter: set the owner and repository, or the repository URL to take them from")
		}
		p, err := repoPath(opts.RepoURL)
		if err != nil {
			return nil, fmt.Errorf("github reporter: %w", err)
		}
		var ok bool
		if owner, repo, ok = strings.Cut(p, "/"); !ok || strings.Contains(repo, "/") {
			return nil, fmt.Errorf("github reporter: repository path %q is not owner/repo", p)
		}
	}
	for _, f := range [][2]string{{"owner", owner}, {"repository", repo}} {
		what, v := f[0], f[1]
		if v == "" || strings.ContainsAny(v, "/ \t\r\n") || v == "." || v == ".." {
			return nil, fmt.Errorf("github reporter: %s %q is not a name", what, v)
		}
	}
	name := "github:" + owner + "/" + repo
	if opts.Token == "" {
		return nil, fmt.Errorf("%s: %w: set %s or %s_FILE, or a token file", name, ErrNoToken, EnvGitHubToken, EnvGitHubToken)
	}
	token := opts.Token
	return &GitHub{
		p: newPoster(name, opts.Client, token, func(h http.Header) {
			h.Set("Authorization", "Bearer "+string(token))
		}),
		endpoint: api + "/repos/" + url.PathEscape(owner) + "/" + url.PathEscape(repo) + "/statuses/",
	}, nil
}

// Name is "github:owner/repo".
func (g *GitHub) Name() string { return g.p.name }

// githubStatus is the request body of the statuses API.
type githubStatus struct {
	State       string `json:"state"`
	TargetURL   string `json:"target_url,omitempty"`
	Description string `json:"description,omitempty"`
	Context     string `json:"context"`
}

// githubState translates a State; GitHub has no running.
func githubState(s State) string {
	if s == StateRunning {
		return string(StatePending)
	}
	return string(s)
}

// Report posts one status.
func (g *GitHub) Report(ctx context.Context, s Status) error {
	if err := s.validate(); err != nil {
		return fmt.Errorf("%s: %w", g.Name(), err)
	}
	body := githubStatus{
		State:       githubState(s.State),
		TargetURL:   s.TargetURL,
		Description: truncate(s.Description, MaxDescription),
		Context:     s.Context,
	}
	return g.p.post(ctx, g.endpoint+s.SHA, body, http.Header{
		"Accept":               {"application/vnd.github+json"},
		"X-Github-Api-Version": {"2022-11-28"},
	})
}
