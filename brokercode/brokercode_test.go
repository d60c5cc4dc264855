package brokercode_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rocketry-go/rocketry/brokercode"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// TestCodesAreRocketryV1s pins every code to rocketry.v1's number and name,
// both ways: the dead-letter store keeps these numbers on disk, and the
// producer reads rocketry.v1's codes as they are.
func TestCodesAreRocketryV1s(t *testing.T) {
	require.Len(t, brokercode.Codes(), len(rocketryv1.Code_name), "one code per rocketry.v1 Code")
	for _, c := range brokercode.Codes() {
		name, ok := rocketryv1.Code_name[int32(c)]
		require.True(t, ok, "code %d (%v) is not a rocketry.v1 Code", int32(c), c)
		assert.Equal(t, strings.TrimPrefix(name, "CODE_"), c.String(), "name of code %d", int32(c))
	}
	for n, name := range rocketryv1.Code_name {
		assert.Equal(t, strings.TrimPrefix(name, "CODE_"), brokercode.Code(n).String(), "rocketry.v1 code %d", n)
	}
	// The numbers themselves, spelt out: changing one breaks stored records.
	want := map[brokercode.Code]int32{
		brokercode.Unspecified: 0, brokercode.BadRequest: 400, brokercode.TopicNotFound: 404,
		brokercode.MessageTooLarge: 413, brokercode.InternalError: 500, brokercode.Unavailable: 503,
		brokercode.TooManyRequests: 530,
	}
	for c, n := range want {
		assert.Equal(t, n, int32(c), "%v", c)
	}
}

func TestReasonsAreRocketryV1s(t *testing.T) {
	require.Len(t, brokercode.Reasons(), len(rocketryv1.ThrottleReason_name))
	for _, r := range brokercode.Reasons() {
		name, ok := rocketryv1.ThrottleReason_name[int32(r)]
		require.True(t, ok, "reason %d (%v) is not a rocketry.v1 ThrottleReason", int32(r), r)
		assert.Equal(t, strings.TrimPrefix(name, "THROTTLE_REASON_"), r.String())
	}
	assert.Equal(t, int32(1), int32(brokercode.ReasonStorageLoad))
	assert.Equal(t, int32(2), int32(brokercode.ReasonBacklog))
	assert.Equal(t, int32(3), int32(brokercode.ReasonSendRate))
}

func TestRetriable(t *testing.T) {
	tests := []struct {
		code brokercode.Code
		want bool
	}{
		{brokercode.Unspecified, false},
		{brokercode.BadRequest, false},
		{brokercode.TopicNotFound, false},
		{brokercode.MessageTooLarge, false},
		{brokercode.InternalError, true},
		{brokercode.Unavailable, true},
		{brokercode.TooManyRequests, true},
		{brokercode.Code(999), false},
	}
	for _, tt := range tests {
		if got := tt.code.Retriable(); got != tt.want {
			t.Errorf("%v.Retriable() = %v; want %v", tt.code, got, tt.want)
		}
	}
}

func TestUnknownNumbers(t *testing.T) {
	assert.Equal(t, "Code(999)", brokercode.Code(999).String())
	assert.Equal(t, "Reason(9)", brokercode.Reason(9).String())
}

func Example() {
	c := brokercode.TooManyRequests
	fmt.Println(c, int32(c), c.Retriable(), brokercode.ReasonBacklog)
	fmt.Println(brokercode.MessageTooLarge, brokercode.MessageTooLarge.Retriable())
	// Output:
	// TOO_MANY_REQUESTS 530 true BACKLOG
	// MESSAGE_TOO_LARGE false
}
