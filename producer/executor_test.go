package producer

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/brokercode"
	"github.com/rocketry-go/rocketry/senderr"
)

func TestSendErrorIs(t *testing.T) {
	t.Parallel()
	se := senderr.NewSendError(ErrAttemptsExhausted, nil)
	se.MessageID, se.Attempts, se.Code, se.Cause = "m1", 3, brokercode.Unavailable, err503
	for _, target := range []error{ErrAttemptsExhausted, err503} {
		if !errors.Is(se, target) {
			t.Errorf("errors.Is(%v, %v) = false; want true", se, target)
		}
	}
	if errors.Is(se, ErrDeadlineTooShort) {
		t.Errorf("errors.Is(%v, ErrDeadlineTooShort) = true; want false", se)
	}
	if got, want := se.Error(), `producer: send of message "m1" failed after 3 attempts (attempts exhausted): rpc error: code = Unavailable desc = test: CODE_UNAVAILABLE`; got != want {
		t.Errorf("Error() = %q; want %q", got, want)
	}
	if status.Code(se) != codes.Unavailable {
		t.Errorf("status.Code(SendError) = %v; want Unavailable", status.Code(se))
	}
	if !IsThrottled(err530) || IsThrottled(err503) || !IsThrottled(&SendError{Code: brokercode.TooManyRequests}) {
		t.Errorf("IsThrottled is wrong")
	}
	if got := CodeOf(err400); got != brokercode.BadRequest {
		t.Errorf("CodeOf(400) = %v; want CODE_BAD_REQUEST", got)
	}
}
