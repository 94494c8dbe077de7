package report

import (
	"errors"
	"net/http"
	"strconv"
	"time"
)

var (
	// ErrPermanent is wrapped by errors that retrying cannot fix: a
	// malformed status, a refused token, a commit the forge does not know.
	// A Dispatcher logs and drops such a status.
	ErrPermanent = errors.New("not retryable")
	// ErrNoToken is wrapped by TokenFrom's error when no token is set.
	ErrNoToken = errors.New("no token")
)

// HTTPError is a forge's answer other than 2xx to a status request.
type HTTPError struct {
	// Reporter is the Name of the reporter that sent the request.
	Reporter string
	Method   string
	// URL of the request; it never holds a credential.
	URL        string
	StatusCode int
	// Message is the start of the forge's error message, on one line, with
	// the token cut out should the forge have echoed it.
	Message string
	// RetryAfter is the wait the forge asked for (Retry-After, or a
	// rate-limit reset), zero when it asked for none.
	RetryAfter time.Duration
	// RateLimited is true for a 403 that GitHub sends when a rate limit is
	// exhausted; it is retried like a 429.
	RateLimited bool
}

func (e *HTTPError) Error() string {
	s := e.Reporter + ": " + e.Method + " " + e.URL + ": " + strconv.Itoa(e.StatusCode) + " " + http.StatusText(e.StatusCode)
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.RetryAfter > 0 {
		s += " (retry after " + e.RetryAfter.String() + ")"
	}
	return s
}

// Retryable reports whether the request may succeed later: a 5xx, 408,
// 429 or a rate-limited 403. Every other 4xx is permanent.
func (e *HTTPError) Retryable() bool {
	switch {
	case e.StatusCode >= 500, e.StatusCode == http.StatusRequestTimeout,
		e.StatusCode == http.StatusTooManyRequests, e.RateLimited:
		return true
	}
	return false
}

// Is makes errors.Is(err, ErrPermanent) true for an answer that is not
// Retryable.
func (e *HTTPError) Is(target error) bool {
	return target == ErrPermanent && !e.Retryable()
}

// permanent marks err as not retryable.
type permanent struct{ err error }

func (p permanent) Error() string        { return p.err.Error() }
func (p permanent) Unwrap() error        { return p.err }
func (p permanent) Is(target error) bool { return target == ErrPermanent }

// retryDelay is the wait a retryable err asks for, zero when it asks for
// none.
func retryDelay(err error) time.Duration {
	var he *HTTPError
	if errors.As(err, &he) {
		return he.RetryAfter
	}
	return 0
}
