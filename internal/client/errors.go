package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"syscall"

	"github.com/rezuscloud/rezuscloud/backend/api"
)

// StatusError is a request the server answered with a status other than
// 2xx. Message is the API's error message when the body was an error body.
type StatusError struct {
	// Path is the API path of the request, without its query.
	Path    string
	Code    int
	Reason  api.Reason
	Message string
}

// Error says what failed in one line: the server's message, prefixed for
// authentication and authorization failures, which otherwise read like
// the resource's own errors.
func (e *StatusError) Error() string {
	switch e.Code {
	case http.StatusUnauthorized:
		return fmt.Sprintf("the server rejected the token (401): %s", e.Message)
	case http.StatusForbidden:
		return fmt.Sprintf("the token may not do this (403): %s", e.Message)
	case http.StatusTooManyRequests:
		return fmt.Sprintf("too many requests (429): %s", e.Message)
	case http.StatusNotFound, http.StatusBadRequest, http.StatusGone:
		return e.Message
	}
	return fmt.Sprintf("server error (%d): %s", e.Code, e.Message)
}

// ConnError is a request that got no answer: the server is unreachable,
// refused the connection or broke it off.
type ConnError struct {
	// Server is the server's base URL.
	Server string
	Err    error
}

// Error says which server could not be reached and, in a few words, why:
// "cannot reach http://127.0.0.1:8080: connection refused".
func (e *ConnError) Error() string {
	return fmt.Sprintf("cannot reach %s: %s", e.Server, cause(e.Err))
}

func (e *ConnError) Unwrap() error { return e.Err }

// cause names the reason a request got no answer in a few words.
func cause(err error) string {
	var (
		dnsErr  *net.DNSError
		certErr *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
	)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset by the server"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to host"
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return "timed out"
	case errors.As(err, &dnsErr):
		if dnsErr.IsNotFound {
			return "no such host " + dnsErr.Name
		}
		return "DNS lookup failed: " + dnsErr.Err
	case errors.As(err, &unknown), errors.As(err, &host), errors.As(err, &certErr):
		return "TLS certificate not trusted: " + innermost(err).Error()
	}
	return innermost(err).Error()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// innermost strips the *url.Error and *net.OpError wrappers, which repeat
// the URL and addresses the message already names.
func innermost(err error) error {
	for {
		var ue *url.Error
		var oe *net.OpError
		switch {
		case errors.As(err, &ue) && ue.Err != nil:
			err = ue.Err
		case errors.As(err, &oe) && oe.Err != nil:
			err = oe.Err
		default:
			return err
		}
	}
}

// Code returns the HTTP status of a *StatusError in err's chain, or 0.
func Code(err error) int {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Code
	}
	return 0
}

// IsNotFound reports whether err is the server's 404.
func IsNotFound(err error) bool { return Code(err) == http.StatusNotFound }

// IsAuth reports whether the server refused the token (401) or what it
// may do (403).
func IsAuth(err error) bool {
	c := Code(err)
	return c == http.StatusUnauthorized || c == http.StatusForbidden
}

// IsConn reports whether err is a request that got no answer.
func IsConn(err error) bool {
	var ce *ConnError
	return errors.As(err, &ce)
}
