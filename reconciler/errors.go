package reconciler

import (
	"errors"
	"fmt"

	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/schema"
)

// The errors of the loop's steps. Every step of a tenant's run (see
// steps.go) returns nil or one of these two kinds, wrapping what the code
// it calls returns (tofuError, talosError, retry, stall); they tell the
// loop what to do next:
//
//   - *StalledError: only a new commit can help, so retrying would not.
//     Examples: manifests that do not validate or render, the deletion
//     guard, deletion protection, a rollout stopped at a failed machine.
//     The tenant is not retried, and its Stalled condition says why.
//   - *RetryError: the failure may pass by itself. Examples: a state lock
//     held elsewhere, a tofu or provider error (a cloud answering 500), the
//     state backend or the store failing, machines the Talos plane waits
//     for. The tenant runs again by itself after a backoff (see Backoff),
//     until it succeeds or a new revision takes over.
//
// Work that waits for a closed maintenance window is a RetryError too,
// for reason WaitingForMaintenanceWindow, whose error is a
// *window.WaitError with the time to run again at (windowWait): the run
// then ends as waiting rather than failed, and runs again at that time
// instead of after a backoff (window.go).
//
// Each carries a reason, a Reason* constant of package schema, that the
// tenant's conditions and the commit's result show. An error of neither
// type counts as a RetryError with ReasonFailed: a failure no step
// foresaw is retried, within the backoff's cap.

// StalledError is a failure that only a new commit can mend.
type StalledError struct {
	Reason string
	Err    error
}

func (e *StalledError) Error() string { return e.Err.Error() }
func (e *StalledError) Unwrap() error { return e.Err }

// RetryError is a failure that may pass: the run is retried, after a
// backoff, or for a maintenance window at its opening (windowWait).
type RetryError struct {
	Reason string
	Err    error
}

func (e *RetryError) Error() string { return e.Err.Error() }
func (e *RetryError) Unwrap() error { return e.Err }

// stall returns err as a StalledError for reason; nil stays nil.
func stall(reason string, err error) error {
	if err == nil {
		return nil
	}
	return &StalledError{Reason: reason, Err: err}
}

// retry returns err as a RetryError for reason; nil stays nil, and an
// error that already says what to do keeps it.
func retry(reason string, err error) error {
	var s *StalledError
	var r *RetryError
	if err == nil || errors.As(err, &s) || errors.As(err, &r) {
		return err
	}
	return &RetryError{Reason: reason, Err: err}
}

// retryf is retry of a formatted message.
func retryf(reason, format string, args ...any) error {
	return retry(reason, fmt.Errorf(format, args...))
}

// tofuError classifies an error of a tofu run: a state lock that someone
// else holds, or any other failure of tofu or a provider. Both are
// retried.
func tofuError(err error) error {
	if tofu.LockHeld(err) {
		return retry(schema.ReasonStateLocked, err)
	}
	return retry(schema.ReasonTofuFailed, err)
}

// classify tells what an error of a step asks for: whether it stalled the
// run, and for what reason.
func classify(err error) (stalled bool, reason string) {
	var s *StalledError
	if errors.As(err, &s) {
		return true, s.Reason
	}
	var r *RetryError
	if errors.As(err, &r) {
		return false, r.Reason
	}
	return false, schema.ReasonFailed
}
