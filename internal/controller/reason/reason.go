// Package reason is the one error type of kao's controllers for a run that
// does not start, or a restore that does not: what the user sees (a
// condition's reason and message, an Event) and what kao does next (retry
// with backoff, look again soon, or give up on this spec).
//
// Each controller turns a *Error into its condition, Event and requeue in
// one place; any other error goes back to controller-runtime, which retries
// it with its own backoff.
package reason

import (
	"errors"
	"fmt"
	"time"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
)

// Kind is what kao does after an *Error.
type Kind int

const (
	// Retry is something the user fixes (a missing Secret, a host the inventory
	// rejects, an unreachable host cluster). A failed attempt, retried with
	// backoff.
	Retry Kind = iota
	// Wait is no failure: kao looks again After (an address still being
	// assigned, a deployment busy with another run).
	Wait
	// Refuse means kao never runs this as specified (a restore whose snapshot
	// fails its checksum).
	Refuse
)

// Error says why a run or restore did not start.
type Error struct {
	// Reason is a kaov1 *Reason constant: the condition's reason and the Event's.
	Reason string
	// Message names the spec fields involved; never a secret or a library's
	// raw output.
	Message string
	// Kind is what kao does next.
	Kind Kind
	// After is how soon a Wait looks again (DefaultWait when not positive).
	After time.Duration
	// Cause is for errors.Is (ErrSecretMissing); it is never shown.
	Cause error
}

func (e *Error) Error() string { return e.Message }

// Unwrap gives the cause to errors.Is and errors.As.
func (e *Error) Unwrap() error { return e.Cause }

// ErrSecretMissing is the cause of a Secret, or a key of it, that is not there.
var ErrSecretMissing = errors.New("secret missing")

// Missing is input the user referenced that is missing or unusable: a Retry
// with the reason PrerequisitesMissing.
func Missing(format string, args ...any) *Error {
	return &Error{Reason: kaov1.PrerequisitesMissingReason, Message: fmt.Sprintf(format, args...), Kind: Retry}
}

// SecretMissing is a Missing whose Secret, or key of it, does not exist.
func SecretMissing(format string, args ...any) *Error {
	e := Missing(format, args...)
	e.Cause = ErrSecretMissing
	return e
}

// Failed is a Retry with a reason other than PrerequisitesMissing: a host
// cluster kao could not reach, a user role it cannot use, a downgrade.
func Failed(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...), Kind: Retry}
}

// DefaultWait is how soon a Wait with no After of its own looks again.
const DefaultWait = 5 * time.Second

// Pending is a Wait: nothing failed, and kao looks again after (DefaultWait
// when after is not positive, so a wait never stalls).
func Pending(reason string, after time.Duration, format string, args ...any) *Error {
	if after <= 0 {
		after = DefaultWait
	}
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...), Kind: Wait, After: after}
}

// Refused is a Refuse: kao never runs this as specified.
func Refused(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...), Kind: Refuse}
}

// From finds the *Error in err's chain.
func From(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
