package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"

	"github.com/rezuscloud/rezuscloud/backend/api"
)

// githubPush is what the handler reads of a GitHub, Gitea or Forgejo push.
type githubPush struct {
	Ref        string `json:"ref"`
	Repository struct {
		CloneURL string `json:"clone_url"`
		HTMLURL  string `json:"html_url"`
		SSHURL   string `json:"ssh_url"`
	} `json:"repository"`
}

// gitlabPush is what the handler reads of a GitLab push or tag push.
type gitlabPush struct {
	Ref     string `json:"ref"`
	Project struct {
		GitHTTPURL string `json:"git_http_url"`
		GitSSHURL  string `json:"git_ssh_url"`
		WebURL     string `json:"web_url"`
	} `json:"project"`
}

// genericPush is the optional JSON body of the generic hook.
type genericPush struct {
	Repository string `json:"repository"`
	Ref        string `json:"ref"`
}

// githubEventHeaders name the event; Gitea and Forgejo send their own
// header besides, or instead of, GitHub's.
var githubEventHeaders = []string{"X-GitHub-Event", "X-Gitea-Event", "X-Forgejo-Event", "X-Gogs-Event"}

func (h *Handler) github(r *http.Request, body []byte) (Answer, *hookError) {
	var event string
	for _, k := range githubEventHeaders {
		if event = r.Header.Get(k); event != "" {
			break
		}
	}
	switch event {
	case "":
		return Answer{}, refuse(ResultBadRequest, http.StatusBadRequest, "missing X-GitHub-Event header (or X-Gitea-Event, X-Forgejo-Event): cannot tell a push from another event")
	case "ping":
		return Answer{Status: ResultPong}, nil
	case "push":
	default:
		return ignoreEvent(event), nil
	}
	payload, herr := formPayload(r, body)
	if herr != nil {
		return Answer{}, herr
	}
	var p githubPush
	if err := json.Unmarshal(payload, &p); err != nil {
		return Answer{}, badPayload("push", err)
	}
	rp := p.Repository
	return h.fire("repository.clone_url, html_url and ssh_url", p.Ref, rp.CloneURL, rp.HTMLURL, rp.SSHURL)
}

func (h *Handler) gitlab(r *http.Request, body []byte) (Answer, *hookError) {
	switch event := r.Header.Get("X-Gitlab-Event"); event {
	case "Push Hook", "Tag Push Hook":
	case "":
		return Answer{}, refuse(ResultBadRequest, http.StatusBadRequest, "missing X-Gitlab-Event header: cannot tell a push from another event")
	default:
		return ignoreEvent(event), nil
	}
	var p gitlabPush
	if err := json.Unmarshal(body, &p); err != nil {
		return Answer{}, badPayload("GitLab push", err)
	}
	pr := p.Project
	return h.fire("project.git_http_url, git_ssh_url and web_url", p.Ref, pr.GitHTTPURL, pr.GitSSHURL, pr.WebURL)
}

// generic reads an optional JSON object naming the repository and ref.
// A body that is not a JSON object is opaque and names nothing.
func (h *Handler) generic(body []byte) (Answer, *hookError) {
	var p genericPush
	if b := bytes.TrimSpace(body); len(b) > 0 && b[0] == '{' {
		if err := json.Unmarshal(b, &p); err != nil {
			return Answer{}, badPayload(`generic hook (a JSON body must be {"repository": "...", "ref": "..."})`, err)
		}
	}
	if p.Repository == "" {
		return h.triggerOne("", p.Ref), nil
	}
	return h.fire("repository", p.Ref, p.Repository)
}

// fire triggers a fetch for the first of urls the Trigger matches. A
// payload names one repository by several URLs (https, ssh, web); the
// server may follow any of these forms.
func (h *Handler) fire(fields, ref string, urls ...string) (Answer, *hookError) {
	seen := make(map[string]bool, len(urls))
	var first string
	for _, u := range urls {
		n := NormalizeRepoURL(u)
		if n == "" || seen[n] {
			continue
		}
		seen[n] = true
		if first == "" {
			first = u
		}
		if h.trigger.Trigger(u, ref) {
			return Answer{Status: ResultAccepted, Repository: u, Ref: ref}, nil
		}
	}
	if first == "" {
		return Answer{}, refuse(ResultBadRequest, http.StatusBadRequest, "payload names no repository: %s are empty or missing", fields)
	}
	return Answer{Status: ResultIgnored, Message: MessageOtherRepository, Repository: first, Ref: ref}, nil
}

func (h *Handler) triggerOne(repo, ref string) Answer {
	if h.trigger.Trigger(repo, ref) {
		return Answer{Status: ResultAccepted, Repository: repo, Ref: ref}
	}
	return Answer{Status: ResultIgnored, Message: MessageOtherRepository, Repository: repo, Ref: ref}
}

func ignoreEvent(event string) Answer {
	return Answer{Status: ResultIgnored, Message: fmt.Sprintf("ignored: event %q is not a push", api.Shorten(event))}
}

// formPayload returns the JSON payload: the body itself, or its "payload"
// field when the forge sends application/x-www-form-urlencoded.
func formPayload(r *http.Request, body []byte) ([]byte, *hookError) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/x-www-form-urlencoded" {
		return body, nil
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, refuse(ResultBadRequest, http.StatusBadRequest, "form-encoded payload: %v", err)
	}
	p := form.Get("payload")
	if p == "" {
		return nil, refuse(ResultBadRequest, http.StatusBadRequest, "form-encoded payload has no payload field; choose application/json as the webhook's content type")
	}
	return []byte(p), nil
}

func badPayload(what string, err error) *hookError {
	return refuse(ResultBadRequest, http.StatusBadRequest, "%s payload is not valid JSON: %s", what, err)
}
