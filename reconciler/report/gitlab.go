package report

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// DefaultGitLabAPI is the API of gitlab.com.
const DefaultGitLabAPI = "https://gitlab.com/api/v4"

// GitLabOptions configures a GitLab reporter.
type GitLabOptions struct {
	// APIURL is the API base; DefaultGitLabAPI when empty, and
	// https://HOST/api/v4 for a GitLab of one's own.
	APIURL string
	// Project is the project's path with namespace ("group/sub/project")
	// or its numeric id. When empty it is taken from RepoURL.
	Project string
	// RepoURL is the repository's clone URL:
	// https://host/group/project(.git), ssh://git@host/group/project.git
	// or git@host:group/project.git.
	RepoURL string
	// Token is sent as "PRIVATE-TOKEN: TOKEN". Required.
	Token Token
	// Client sends the requests; one with DefaultHTTPTimeout when nil.
	// Redirects are never followed.
	Client *http.Client
}

// GitLab reports commit statuses through GitLab's API,
// POST {api}/projects/{url-encoded project}/statuses/{sha}.
type GitLab struct {
	p        *poster
	endpoint string // up to and including "/statuses/"
}

var _ Reporter = (*GitLab)(nil)

// NewGitLab checks the options. It does not touch the network.
func NewGitLab(opts GitLabOptions) (*GitLab, error) {
	api := opts.APIURL
	if api == "" {
		api = DefaultGitLabAPI
	}
	api, err := checkAPIURL("gitlab", api)
	if err != nil {
		return nil, err
	}
	project := strings.Trim(opts.Project, "/")
	if project == "" {
		if opts.RepoURL == "" {
			return nil, fmt.Errorf("gitlab reporter: set the project, or the repository URL to take it from")
		}
		if project, err = repoPath(opts.RepoURL); err != nil {
			return nil, fmt.Errorf("gitlab reporter: %w", err)
		}
	}
	if strings.ContainsAny(project, " \t\r\n") || strings.Contains(project, "//") {
		return nil, fmt.Errorf("gitlab reporter: project %q is not a path or id", project)
	}
	name := "gitlab:" + project
	if opts.Token == "" {
		return nil, fmt.Errorf("%s: %w: set %s or %s_FILE, or a token file", name, ErrNoToken, EnvGitLabToken, EnvGitLabToken)
	}
	token := opts.Token
	return &GitLab{
		p: newPoster(name, opts.Client, token, func(h http.Header) {
			h.Set("Private-Token", string(token))
		}),
		endpoint: api + "/projects/" + url.PathEscape(project) + "/statuses/",
	}, nil
}

// Name is "gitlab:group/project".
func (g *GitLab) Name() string { return g.p.name }

// gitlabStatus is the request body of the statuses API.
type gitlabStatus struct {
	State       string `json:"state"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	TargetURL   string `json:"target_url,omitempty"`
}

// gitlabState translates a State.
func gitlabState(s State) string {
	switch s {
	case StateFailure:
		return "failed"
	case StateError:
		return "canceled"
	}
	return string(s)
}

// Report posts one status. GitLab answers 400 "Cannot transition status
// via …" when the status already is in the state sent (pending again,
// running again); that counts as delivered.
func (g *GitLab) Report(ctx context.Context, s Status) error {
	if err := s.validate(); err != nil {
		return fmt.Errorf("%s: %w", g.Name(), err)
	}
	body := gitlabStatus{
		State:       gitlabState(s.State),
		Name:        s.Context,
		Description: truncate(s.Description, MaxDescription),
		TargetURL:   s.TargetURL,
	}
	err := g.p.post(ctx, g.endpoint+s.SHA, body, http.Header{"Accept": {"application/json"}})
	var he *HTTPError
	if errors.As(err, &he) && he.StatusCode == http.StatusBadRequest &&
		strings.Contains(he.Message, "Cannot transition status via") {
		return nil
	}
	return err
}
