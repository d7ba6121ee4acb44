package sinks

import (
	"errors"
	"time"
)

// ErrNotAttempted marks a message the sink did not try to deliver (it was
// disconnected, paused, or out of time before starting the request), or
// whose failure was the destination's outage rather than the message's (a
// webhook request in flight when the sink paused for that outage): the
// relay puts the row back at once without counting an attempt. Wrap it:
// fmt.Errorf("%w: not connected", sinks.ErrNotAttempted).
var ErrNotAttempted = errors.New("delivery not attempted")

// Permanent marks err as a failure that retrying cannot fix (a message the
// destination can never take): the relay dead-letters the row at once.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// PermanentError is a delivery failure that must not be retried.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *PermanentError) Unwrap() error { return e.Err }

// IsPermanent reports whether err, or any error it wraps, is permanent.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// RetryAfter marks err as transient with a delay the destination asked for
// (an HTTP Retry-After): the relay retries no sooner than after.
func RetryAfter(err error, after time.Duration) error {
	if err == nil {
		return nil
	}
	return &RetryAfterError{Err: err, After: after}
}

// RetryAfterError is a transient failure with a minimum delay before the
// next attempt.
type RetryAfterError struct {
	Err   error
	After time.Duration
}

func (e *RetryAfterError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryDelay returns the delay err asks for, if it (or an error it wraps) was
// made with RetryAfter.
func RetryDelay(err error) (time.Duration, bool) {
	var r *RetryAfterError
	if errors.As(err, &r) {
		return r.After, true
	}
	return 0, false
}
