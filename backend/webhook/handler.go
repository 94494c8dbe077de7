package webhook

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/rezuscloud/rezuscloud/backend/api"
)

// Prefix is where the server mounts the handler.
const Prefix = "/hooks/"

// MaxBodyBytes bounds a hook's body: 1 MiB. GitHub caps its payloads at
// 25 MB, but it drops the commit list of large pushes long before that,
// and the handler needs only a URL and a ref.
const MaxBodyBytes = 1 << 20

// The hooks, as paths under Prefix and as the hook argument of Observe.
const (
	HookGitHub  = "github"
	HookGitLab  = "gitlab"
	HookGeneric = "generic"
	// HookUnknown is reported to Observe for paths that are no hook, so
	// that a metric label never takes a caller's path.
	HookUnknown = "unknown"
)

// The results reported to Observe, one per request.
const (
	// ResultAccepted: a valid push for the followed repository triggered
	// a fetch.
	ResultAccepted = "accepted"
	// ResultIgnored: a valid hook that is not a push, or a push for
	// another repository or ref; nothing was triggered.
	ResultIgnored = "ignored"
	// ResultPong: a valid GitHub ping.
	ResultPong = "pong"
	// ResultUnauthorized: a missing or wrong signature or token.
	ResultUnauthorized = "unauthorized"
	// ResultTooLarge: a body over MaxBodyBytes.
	ResultTooLarge = "too_large"
	// ResultBadRequest: a signed payload that cannot be read.
	ResultBadRequest = "bad_request"
	// ResultMethodNotAllowed: a method other than POST.
	ResultMethodNotAllowed = "method_not_allowed"
	// ResultNotFound: a path that is no hook.
	ResultNotFound = "not_found"
	// ResultDisabled: no secret is configured.
	ResultDisabled = "disabled"
)

// MessageOtherRepository is the message of a valid push for a repository
// or ref the server does not follow.
const MessageOtherRepository = "ignored: not the repository this server follows"

// Trigger starts a fetch of the followed repository.
type Trigger interface {
	// Trigger reports whether repoURL and ref name the repository and
	// ref the server follows and, if they do, asks for a fetch. An empty
	// repoURL stands for the followed repository, an empty ref for any
	// ref; compare URLs with NormalizeRepoURL. The handler calls Trigger
	// while the sender waits, so it must not block: hand the fetch to
	// the source, which coalesces a burst of triggers into one fetch.
	// It may be called from many goroutines at once.
	Trigger(repoURL, ref string) bool
}

// TriggerFunc adapts a function to Trigger.
type TriggerFunc func(repoURL, ref string) bool

// Trigger calls f.
func (f TriggerFunc) Trigger(repoURL, ref string) bool { return f(repoURL, ref) }

// Options configure a Handler.
type Options struct {
	// Secret signs the hooks (HMAC-SHA256 for GitHub and generic hooks)
	// or is the GitLab token. Without one the handler answers every hook
	// with 503 and triggers nothing. Get it with SecretFrom.
	Secret []byte
	// Trigger receives valid pushes. Required.
	Trigger Trigger
	// Observe, when set, is called once per request with the hook (one
	// of the Hook constants) and the result (one of the Result
	// constants), for metrics. It must not block.
	Observe func(hook, result string)
	// Logger receives one line per hook; it never receives bodies or
	// secrets. Default: none.
	Logger *slog.Logger
}

// Handler serves the webhooks under Prefix; see the package doc.
type Handler struct {
	secret  []byte
	trigger Trigger
	observe func(hook, result string)
	log     *slog.Logger
}

// Answer is the body of a hook's successful answer.
type Answer struct {
	// Status is ResultAccepted, ResultIgnored or ResultPong.
	Status string `json:"status"`
	// Message says why a hook was ignored.
	Message string `json:"message,omitempty"`
	// Repository and Ref are what the payload named.
	Repository string `json:"repository,omitempty"`
	Ref        string `json:"ref,omitempty"`
}

// New returns a Handler. An empty opts.Secret gives a handler that
// refuses every hook with 503; a nil opts.Trigger is an error.
func New(opts Options) (*Handler, error) {
	if opts.Trigger == nil {
		return nil, errors.New("webhook: Options.Trigger is required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	observe := opts.Observe
	if observe == nil {
		observe = func(string, string) {}
	}
	return &Handler{
		secret:  append([]byte(nil), opts.Secret...),
		trigger: opts.Trigger,
		observe: observe,
		log:     log,
	}, nil
}

// hookError is a refusal: the error body and the result for Observe.
type hookError struct {
	result string
	err    *api.Error
}

func refuse(result string, code int, format string, args ...any) *hookError {
	return &hookError{result: result, err: api.Errorf(code, format, args...)}
}

// ServeHTTP serves one hook. The path may carry Prefix or not, so the
// handler also works behind http.StripPrefix.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hook := hookName(r.URL.Path)
	ans, herr := h.serve(hook, w, r)
	if herr != nil {
		if herr.err.Code == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", http.MethodPost)
		}
		h.observe(hook, herr.result)
		if herr.result == ResultUnauthorized {
			h.log.Warn("webhook refused", "hook", hook, "remote", r.RemoteAddr, "reason", herr.err.Message)
		} else {
			h.log.Info("webhook refused", "hook", hook, "remote", r.RemoteAddr, "code", herr.err.Code, "reason", herr.err.Message)
		}
		api.WriteError(w, herr.err)
		return
	}
	h.observe(hook, ans.Status)
	h.log.Info("webhook "+ans.Status, "hook", hook, "delivery", delivery(r), "repository", ans.Repository, "ref", ans.Ref, "message", ans.Message)
	code := http.StatusAccepted
	if ans.Status == ResultPong {
		code = http.StatusOK
	}
	api.WriteJSON(w, code, ans)
}

func (h *Handler) serve(hook string, w http.ResponseWriter, r *http.Request) (Answer, *hookError) {
	if hook == HookUnknown {
		return Answer{}, refuse(ResultNotFound, http.StatusNotFound,
			"no webhook at %q; the hooks are %sgithub (also Gitea and Forgejo), %sgitlab and %sgeneric", r.URL.Path, Prefix, Prefix, Prefix)
	}
	if r.Method != http.MethodPost {
		return Answer{}, refuse(ResultMethodNotAllowed, http.StatusMethodNotAllowed,
			"method %s is not allowed on a webhook; forges send POST", r.Method)
	}
	if len(h.secret) == 0 {
		return Answer{}, refuse(ResultDisabled, http.StatusServiceUnavailable,
			"webhooks are disabled: the server has no webhook secret; set %s or --webhook-secret-file and restart", SecretEnv)
	}
	body, herr := readBody(w, r)
	if herr != nil {
		return Answer{}, herr
	}
	switch hook {
	case HookGitHub:
		if herr := verifyHMAC(r.Header, body, h.secret); herr != nil {
			return Answer{}, herr
		}
		return h.github(r, body)
	case HookGitLab:
		if herr := verifyToken(r.Header, h.secret); herr != nil {
			return Answer{}, herr
		}
		return h.gitlab(r, body)
	default:
		if herr := verifyHMAC(r.Header, body, h.secret); herr != nil {
			return Answer{}, herr
		}
		return h.generic(body)
	}
}

// hookName maps a request path to its hook, HookUnknown for any other.
func hookName(p string) string {
	name := strings.TrimPrefix(p, Prefix)
	if name == p {
		name = strings.TrimPrefix(p, "/")
	}
	switch name {
	case HookGitHub, HookGitLab, HookGeneric:
		return name
	}
	return HookUnknown
}

// readBody reads at most MaxBodyBytes; a declared or actual length over
// that is a 413.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, *hookError) {
	if r.ContentLength > MaxBodyBytes {
		return nil, tooLarge(fmt.Sprintf("body of %d bytes", r.ContentLength))
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, tooLarge("body")
		}
		if ae, ok := errors.AsType[*api.Error](err); ok {
			// The server's limits on bodies: too slow, or no memory free.
			return nil, &hookError{result: ResultBadRequest, err: ae}
		}
		return nil, refuse(ResultBadRequest, http.StatusBadRequest, "read body: %v", err)
	}
	return body, nil
}

func tooLarge(what string) *hookError {
	return refuse(ResultTooLarge, http.StatusRequestEntityTooLarge,
		"%s is over the limit of %d bytes for a webhook; send pushes without the commit list or use %sgeneric with a small body", what, MaxBodyBytes, Prefix)
}

// delivery returns the forge's delivery ID, for the log.
func delivery(r *http.Request) string {
	for _, k := range []string{"X-GitHub-Delivery", "X-Gitea-Delivery", "X-Forgejo-Delivery", "X-Gitlab-Event-UUID", "X-Request-Id"} {
		if v := r.Header.Get(k); v != "" {
			return api.Shorten(v)
		}
	}
	return ""
}
