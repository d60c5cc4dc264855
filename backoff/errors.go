package backoff

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidConfig is returned (wrapped in a *FieldError) by
	// Config.Validate and NewConnection when a field of a connection-backoff
	// Config is out of range.
	ErrInvalidConfig = errors.New("backoff: invalid connection-backoff config")

	// ErrInvalidPolicy is returned (wrapped in a *FieldError) by ParsePolicy,
	// NewDeliveryPolicy and the DeliveryPolicy With methods when a delivery
	// policy breaks one of SNS's constraints, has an unknown field, or is
	// not well-formed JSON.
	ErrInvalidPolicy = errors.New("backoff: invalid delivery policy")

	// ErrUnknownPreset is returned by Preset when no preset has the name.
	ErrUnknownPreset = errors.New("backoff: unknown preset")
)

// FieldError says which field of a Config or a delivery policy is wrong,
// what its value is and what is allowed. It wraps ErrInvalidConfig or
// ErrInvalidPolicy, so errors.Is works with both.
type FieldError struct {
	// Field is the field's name: a Config field name ("BaseDelay") or the
	// policy's JSON path ("healthyRetryPolicy.numRetries").
	Field string
	// Value is the offending value as written, or "" when the problem is
	// not a value (an unknown or repeated field, malformed JSON).
	Value string
	// Want says what is allowed, e.g. "an integer in 0..100"; when Value
	// is "", it says what is wrong and what is allowed.
	Want string

	kind error
}

func (e *FieldError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("backoff: %s: %s", e.Field, e.Want)
	}
	return fmt.Sprintf("backoff: %s = %s: want %s", e.Field, e.Value, e.Want)
}

// Unwrap returns ErrInvalidConfig or ErrInvalidPolicy.
func (e *FieldError) Unwrap() error { return e.kind }

func configError(field string, value any, want string) error {
	return &FieldError{Field: field, Value: fmt.Sprint(value), Want: want, kind: ErrInvalidConfig}
}

func policyError(field string, value any, want string) error {
	v := fmt.Sprint(value)
	if value == nil {
		v = ""
	}
	return &FieldError{Field: field, Value: v, Want: want, kind: ErrInvalidPolicy}
}
