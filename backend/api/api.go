// Package api holds the wire shapes of RezusCloud's read API that clients
// share with the server: the error body, the list body, the status body
// (Status) and the writers that produce them. It is a leaf package so that clients such as rezusctl can
// decode answers without importing the server; it must not import anything
// else of the project.
package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"
)

// Reason says in one word why a request failed.
type Reason string

// The reasons an error body can carry.
const (
	ReasonBadRequest       Reason = "BadRequest"
	ReasonUnauthorized     Reason = "Unauthorized"
	ReasonForbidden        Reason = "Forbidden"
	ReasonNotFound         Reason = "NotFound"
	ReasonMethodNotAllowed Reason = "MethodNotAllowed"
	ReasonConflict         Reason = "Conflict"
	ReasonGone             Reason = "Gone"
	ReasonInternalError    Reason = "InternalError"
)

// StatusFailure is the value of Error.Status.
const StatusFailure = "failure"

// Error is the body of every failed API request:
//
//	{"status":"failure","message":"...","reason":"NotFound","code":404}
type Error struct {
	Status  string `json:"status"`
	Message string `json:"message"`
	Reason  Reason `json:"reason"`
	Code    int    `json:"code"`
}

func (e *Error) Error() string { return e.Message }

// MaxEcho bounds how much of one argument of Errorf reaches a message:
// callers quote what a client sent (a path, a query parameter, a parser's
// error that repeats its input), and an answer must not echo megabytes.
const MaxEcho = 256

// Errorf returns an Error with the given HTTP status code, the reason that
// belongs to it and a formatted message. Every argument that is text (a
// string, []byte or error) is cut to about MaxEcho bytes first (see
// Shorten); other arguments pass untouched.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{
		Status:  StatusFailure,
		Message: fmt.Sprintf(format, boundArgs(args)...),
		Reason:  ReasonFor(code),
		Code:    code,
	}
}

// boundArgs returns args with every text argument cut by Shorten.
func boundArgs(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			out[i] = Shorten(v)
		case []byte:
			out[i] = Shorten(string(v))
		case error:
			out[i] = Shorten(v.Error())
		default:
			out[i] = a
		}
	}
	return out
}

// Shorten cuts s to about MaxEcho bytes: it keeps the start and the end,
// on UTF-8 boundaries, and says how many bytes it left out between them.
// The end stays because an error that quotes its input often says after
// it what is wrong.
func Shorten(s string) string {
	if len(s) <= MaxEcho {
		return s
	}
	head, tail := MaxEcho/2, len(s)-MaxEcho/2
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	return fmt.Sprintf("%s…(%d bytes left out)…%s", s[:head], tail-head, s[tail:])
}

// ReasonFor maps an HTTP status code to its reason. Codes without a reason
// of their own map to the nearest one: other 4xx codes to BadRequest, 423 to
// Conflict and 5xx codes to InternalError.
func ReasonFor(code int) Reason {
	switch code {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		return ReasonBadRequest
	case http.StatusUnauthorized:
		return ReasonUnauthorized
	case http.StatusForbidden:
		return ReasonForbidden
	case http.StatusNotFound:
		return ReasonNotFound
	case http.StatusMethodNotAllowed:
		return ReasonMethodNotAllowed
	case http.StatusConflict, http.StatusLocked:
		return ReasonConflict
	case http.StatusGone:
		return ReasonGone
	}
	if code >= 400 && code < 500 {
		return ReasonBadRequest
	}
	return ReasonInternalError
}

// WriteError writes err as an error body. An *Error (also when wrapped)
// keeps its code and message; any other error becomes a 500 whose message
// does not repeat err, since internal errors may name paths or values the
// caller must not see. The caller logs err.
func WriteError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = Errorf(http.StatusInternalServerError, "internal error; the server log has the details")
	}
	WriteJSON(w, e.Code, e)
}

// WriteJSON writes v as a JSON body with the given status code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		body, _ = json.Marshal(Errorf(code, "encode response: %v", err))
	}
	WriteBody(w, code, body)
}

// WriteBody writes body, JSON already encoded, and a newline with the
// given status code.
func WriteBody(w http.ResponseWriter, code int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)+1))
	w.WriteHeader(code)
	w.Write(append(body, '\n'))
}

// List is the body of every list answer: {"items":[...],"total":N}. Total
// counts all matching items, also those an offset or limit left out.
type List[T any] struct {
	Items []T `json:"items"`
	Total int `json:"total"`
}

// NewList returns a List of items whose total is len(items). A nil slice is
// written as [] rather than null.
func NewList[T any](items []T) List[T] {
	if items == nil {
		items = []T{}
	}
	return List[T]{Items: items, Total: len(items)}
}

// StateVersionList answers GET /api/v1/tfstate/{name}/versions: the stored
// versions of one TF state, newest first, and the lock on it if any.
type StateVersionList struct {
	Items []StateVersion `json:"items"`
	Total int            `json:"total"`
	Lock  *StateLock     `json:"lock,omitempty"`
}

// StateVersion describes one stored version of a TF state. Its bytes are
// served by GET /tfstate/{name}?version=N to admin tokens.
type StateVersion struct {
	// Version numbers the versions of one state in the order they were
	// stored, from 1.
	Version uint64 `json:"version"`
	// Current is true for the version GET /tfstate/{name} serves.
	Current bool `json:"current"`
	// Serial and Lineage are read from the state's JSON, plain or
	// encrypted; they are absent when the bytes are not JSON state.
	Serial  *uint64 `json:"serial,omitempty"`
	Lineage string  `json:"lineage,omitempty"`
	Size    int64   `json:"size"`
	// MD5 is the base64 Content-MD5 the writer sent, if it sent one.
	MD5  string    `json:"md5,omitempty"`
	Time time.Time `json:"time"`
	// Token names the token that wrote this version.
	Token string `json:"token"`
	// LockHolder is the lock the writer held, if the state was locked.
	LockHolder *StateLock `json:"lockHolder,omitempty"`
}

// StateLock describes a lock on a TF state.
type StateLock struct {
	// ID is the lock ID the client chose.
	ID string `json:"id"`
	// Token names the token that took the lock.
	Token string `json:"token"`
	// Who and Operation come from the client's LockInfo.
	Who       string `json:"who,omitempty"`
	Operation string `json:"operation,omitempty"`
	// Created is when the server granted the lock.
	Created time.Time `json:"created"`
	// Stale is true when the lock is older than the server's stale-lock
	// age. A stale lock is only reported; an admin releases it with
	// force-unlock.
	Stale bool `json:"stale,omitempty"`
}
