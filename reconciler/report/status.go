package report

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// State is the outcome a Status reports, in this package's words. Each
// Reporter translates it into its forge's vocabulary (see the package
// documentation).
type State string

// States.
const (
	StatePending State = "pending"
	// StateRunning is pending with work in progress (tofu applying).
	// GitLab shows it as running; GitHub has no such state and shows
	// pending.
	StateRunning State = "running"
	StateSuccess State = "success"
	StateFailure State = "failure"
	// StateError says the commit did not run to an outcome of its own:
	// it was superseded by a newer revision.
	StateError State = "error"
)

// Valid reports whether s is one of the States above.
func (s State) Valid() bool {
	switch s {
	case StatePending, StateRunning, StateSuccess, StateFailure, StateError:
		return true
	}
	return false
}

// Status is what a Reporter reports about one commit under one context.
type Status struct {
	// SHA is the full hex commit id.
	SHA string
	// Context names the status: "rezuscloud/<instance>/<tenant>" or
	// "rezuscloud/<instance>" (see TenantContext, CommitContext).
	Context string
	State   State
	// Description is one line of at most MaxDescription characters.
	Description string
	// TargetURL links to more detail, such as the Commit in the API; it
	// may be empty.
	TargetURL string
}

// MaxDescription is how many characters a description keeps: GitHub's
// limit, and so the limit for every reporter.
const MaxDescription = 140

var shaRE = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)

// validate checks what every reporter relies on.
func (s Status) validate() error {
	if !shaRE.MatchString(s.SHA) {
		return fmt.Errorf("%w: status %q: commit %q is not a full lower-case hex sha", ErrPermanent, s.Context, s.SHA)
	}
	if s.Context == "" || strings.ContainsAny(s.Context, "\r\n") || strings.Contains(s.Context, ": ") {
		return fmt.Errorf("%w: status context %q must be one line without \": \"", ErrPermanent, s.Context)
	}
	if !s.State.Valid() {
		return fmt.Errorf("%w: status %q: unknown state %q", ErrPermanent, s.Context, s.State)
	}
	return nil
}

// Reporter delivers statuses to one place. Report is called from one
// goroutine at a time by a Dispatcher, but implementations here are safe
// for concurrent use too. An error wrapping ErrPermanent is not retried;
// an *HTTPError's Retryable and RetryAfter say whether and when to retry.
type Reporter interface {
	// Name identifies the reporter in logs, such as "github:owner/repo".
	Name() string
	Report(ctx context.Context, s Status) error
}

// ContextPrefix starts every context this package makes.
const ContextPrefix = "rezuscloud/"

// CommitContext is the context of a commit as a whole for instance:
// "rezuscloud/<instance>".
func CommitContext(instance string) string { return ContextPrefix + instance }

// TenantContext is the context of one tenant of a commit for instance:
// "rezuscloud/<instance>/<tenant>".
func TenantContext(instance, tenant string) string {
	return ContextPrefix + instance + "/" + tenant
}

var instanceRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)

// CheckInstance reports whether name can be an instance name: 1 to 100
// letters, digits, '.', '_' and '-', starting with a letter or digit.
func CheckInstance(name string) error {
	if !instanceRE.MatchString(name) {
		return fmt.Errorf("instance name %q: use 1 to 100 letters, digits, '.', '_' and '-', starting with a letter or digit", name)
	}
	return nil
}

// DefaultInstance is the instance name when none is configured: the host
// name, lower-cased, with characters CheckInstance refuses replaced by '-',
// or "rezuscloud" when there is none. Where the host name changes with
// every start (a container), configure a stable name instead, or statuses
// of earlier runs stay behind under the old name.
func DefaultInstance() string {
	h, _ := os.Hostname()
	return instanceFromHost(h)
}

func instanceFromHost(h string) string {
	h = strings.ToLower(h)
	var b strings.Builder
	for _, r := range h {
		if r < utf8.RuneSelf && (r == '.' || r == '_' || r == '-' || unicode.IsLetter(r) || unicode.IsDigit(r)) {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	name := strings.TrimLeft(b.String(), "._-")
	if len(name) > 100 {
		name = name[:100]
	}
	if name == "" {
		return "rezuscloud"
	}
	return name
}

// oneLine turns s into a single line: every run of white space and control
// characters becomes one space.
func oneLine(s string) string {
	var b strings.Builder
	space := false
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == utf8.RuneError {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

// truncate makes s one line of at most n characters. A cut prefers a word
// boundary near the end and is marked with "…".
func truncate(s string, n int) string {
	s = oneLine(s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	runes := []rune(s)[:n-1]
	cut := len(runes)
	for i := len(runes) - 1; i >= len(runes)-20 && i > 0; i-- {
		if runes[i] == ' ' {
			cut = i
			break
		}
	}
	return strings.TrimRight(string(runes[:cut]), " ,;:-") + "…"
}

// firstLine is the first line of s that is not blank, trimmed.
func firstLine(s string) string {
	for line := range strings.SplitSeq(s, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return ""
}
