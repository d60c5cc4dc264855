package producer

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/rocketry-go/rocketry/brokercode"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRocketMQClassifierCodes pins the kind and rocketry.v1 code of every
// apache.rocketmq.v2 code, each as the status of a one-entry answer.
func TestRocketMQClassifierCodes(t *testing.T) {
	t.Parallel()
	const (
		unspec   = brokercode.Unspecified
		bad      = brokercode.BadRequest
		notFound = brokercode.TopicNotFound
		large    = brokercode.MessageTooLarge
		internal = brokercode.InternalError
		unavail  = brokercode.Unavailable
		tooMany  = brokercode.TooManyRequests
	)
	type rmqClass struct {
		kind OutcomeKind
		code brokercode.Code
	}
	want := map[rocketmqv2.Code]rmqClass{
		rocketmqv2.Code_CODE_UNSPECIFIED:                    {FailedUnknown, unspec},
		rocketmqv2.Code_OK:                                  {Stored, unspec},
		rocketmqv2.Code_MULTIPLE_RESULTS:                    {FailedUnknown, unspec},
		rocketmqv2.Code_BAD_REQUEST:                         {Permanent, bad},
		rocketmqv2.Code_ILLEGAL_ACCESS_POINT:                {Permanent, bad},
		rocketmqv2.Code_ILLEGAL_TOPIC:                       {Permanent, bad},
		rocketmqv2.Code_ILLEGAL_CONSUMER_GROUP:              {Permanent, bad},
		rocketmqv2.Code_ILLEGAL_MESSAGE_TAG:                 {Permanent, bad},
		rocketmqv2.Code_ILLEGAL_MESSAGE_KEY:                 {Permanent, bad},
		rocketmqv2.Code_ILLEGAL_MESSAGE_GROUP:               {Permanent, bad},
		rocketmqv2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY:        {Permanent, bad},
		rocketmqv2.Code_INVALID_TRANSACTION_ID:              {Permanent, bad},
		rocketmqv2.Code_ILLEGAL_MESSAGE_ID:                  {Permanent, bad},
		rocketmqv2.Code_ILLEGAL_FILTER_EXPRESSION:           {Permanent, bad},
		rocketmqv2.Code_ILLEGAL_INVISIBLE_TIME:              {Permanent, bad},
		rocketmqv2.Code_ILLEGAL_DELIVERY_TIME:               {Permanent, bad},
		rocketmqv2.Code_INVALID_RECEIPT_HANDLE:              {Permanent, bad},
		rocketmqv2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE: {Permanent, bad},
		rocketmqv2.Code_UNRECOGNIZED_CLIENT_TYPE:            {Permanent, bad},
		rocketmqv2.Code_MESSAGE_CORRUPTED:                   {Permanent, bad},
		rocketmqv2.Code_CLIENT_ID_REQUIRED:                  {Permanent, bad},
		rocketmqv2.Code_ILLEGAL_POLLING_TIME:                {Permanent, bad},
		rocketmqv2.Code_ILLEGAL_OFFSET:                      {Permanent, bad},
		rocketmqv2.Code_ILLEGAL_LITE_TOPIC:                  {Permanent, bad},
		rocketmqv2.Code_UNAUTHORIZED:                        {Permanent, unspec},
		rocketmqv2.Code_PAYMENT_REQUIRED:                    {Permanent, unspec},
		rocketmqv2.Code_FORBIDDEN:                           {Permanent, unspec},
		rocketmqv2.Code_NOT_FOUND:                           {Permanent, notFound},
		rocketmqv2.Code_MESSAGE_NOT_FOUND:                   {Permanent, unspec},
		rocketmqv2.Code_TOPIC_NOT_FOUND:                     {Permanent, notFound},
		rocketmqv2.Code_CONSUMER_GROUP_NOT_FOUND:            {Permanent, unspec},
		rocketmqv2.Code_OFFSET_NOT_FOUND:                    {Permanent, unspec},
		rocketmqv2.Code_REQUEST_TIMEOUT:                     {FailedUnknown, unspec},
		rocketmqv2.Code_PAYLOAD_TOO_LARGE:                   {Permanent, large},
		rocketmqv2.Code_MESSAGE_BODY_TOO_LARGE:              {Permanent, large},
		rocketmqv2.Code_MESSAGE_BODY_EMPTY:                  {Permanent, bad},
		rocketmqv2.Code_PRECONDITION_FAILED:                 {Permanent, unspec},
		rocketmqv2.Code_TOO_MANY_REQUESTS:                   {Throttled, tooMany},
		rocketmqv2.Code_LITE_TOPIC_QUOTA_EXCEEDED:           {Permanent, unspec},
		rocketmqv2.Code_LITE_SUBSCRIPTION_QUOTA_EXCEEDED:    {Permanent, unspec},
		rocketmqv2.Code_REQUEST_HEADER_FIELDS_TOO_LARGE:     {Permanent, large},
		rocketmqv2.Code_MESSAGE_PROPERTIES_TOO_LARGE:        {Permanent, large},
		rocketmqv2.Code_INTERNAL_ERROR:                      {FailedUnknown, internal},
		rocketmqv2.Code_INTERNAL_SERVER_ERROR:               {FailedUnknown, internal},
		rocketmqv2.Code_HA_NOT_AVAILABLE:                    {Stored, unspec},
		rocketmqv2.Code_NOT_IMPLEMENTED:                     {Permanent, unspec},
		rocketmqv2.Code_PROXY_TIMEOUT:                       {FailedUnknown, unspec},
		rocketmqv2.Code_MASTER_PERSISTENCE_TIMEOUT:          {Stored, unspec},
		rocketmqv2.Code_SLAVE_PERSISTENCE_TIMEOUT:           {Stored, unspec},
		rocketmqv2.Code_UNSUPPORTED:                         {Permanent, unspec},
		rocketmqv2.Code_VERSION_UNSUPPORTED:                 {Permanent, unspec},
		rocketmqv2.Code_VERIFY_FIFO_MESSAGE_UNSUPPORTED:     {Permanent, unspec},
		rocketmqv2.Code_FAILED_TO_CONSUME_MESSAGE:           {Permanent, unspec},
	}
	// Every code of the enum has a row: a code added upstream must be
	// decided here.
	for n, name := range rocketmqv2.Code_name {
		_, ok := want[rocketmqv2.Code(n)]
		assert.True(t, ok, "code %d %s has no row", n, name)
	}
	for code, w := range want {
		resp := &rocketmqv2.SendMessageResponse{
			Status:  &rocketmqv2.Status{Code: code, Message: "m"},
			Entries: []*rocketmqv2.SendResultEntry{{Status: &rocketmqv2.Status{Code: code, Message: "m"}}},
		}
		o := RocketMQClassifier.Classify(resp, nil)
		if o.Kind != w.kind || o.Code != w.code || o.WireCode != int32(code) {
			t.Errorf("Classify(%v) = {%v %v %d}; want {%v %v %d}", code, o.Kind, o.Code, o.WireCode, w.kind, w.code, int32(code))
		}
		if w.kind == Stored {
			assert.NoError(t, o.Err, "%v", code)
			continue
		}
		var se *RocketMQStatusError
		if assert.ErrorAs(t, o.Err, &se, "%v", code) {
			assert.Equal(t, int32(code), se.Code)
			assert.Equal(t, "m", se.Message)
		}
	}
}

func TestRocketMQClassifierThrottleReason(t *testing.T) {
	t.Parallel()
	for msg, want := range map[string]brokercode.Reason{
		"":                                   brokercode.ReasonUnspecified,
		"throttled: BACKLOG over 1000":       brokercode.ReasonBacklog,
		"STORAGE_LOAD: re-reads":             brokercode.ReasonStorageLoad,
		"send_rate spent":                    brokercode.ReasonSendRate,
		"broker busy, too many requests now": brokercode.ReasonUnspecified,
	} {
		resp := &rocketmqv2.SendMessageResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_TOO_MANY_REQUESTS, Message: msg}}
		o := RocketMQClassifier.Classify(resp, nil)
		if o.Kind != Throttled || o.Reason != want {
			t.Errorf("Classify(42900 %q) = {%v %v}; want {throttled %v}", msg, o.Kind, o.Reason, want)
		}
	}
}

// TestRocketMQClassifierEntries pins which status decides a one-message
// answer: the first entry that is not OK, else the top-level status.
func TestRocketMQClassifierEntries(t *testing.T) {
	t.Parallel()
	st := func(c rocketmqv2.Code) *rocketmqv2.Status { return &rocketmqv2.Status{Code: c} }
	entry := func(c rocketmqv2.Code) *rocketmqv2.SendResultEntry { return &rocketmqv2.SendResultEntry{Status: st(c)} }
	for _, tc := range []struct {
		name string
		resp *rocketmqv2.SendMessageResponse
		kind OutcomeKind
		wire int32
	}{
		{"ok", &rocketmqv2.SendMessageResponse{Status: st(rocketmqv2.Code_OK), Entries: []*rocketmqv2.SendResultEntry{entry(rocketmqv2.Code_OK)}}, Stored, 20000},
		{"ok without entry", &rocketmqv2.SendMessageResponse{Status: st(rocketmqv2.Code_OK)}, FailedUnknown, 20000},
		{"top ok, entry throttled", &rocketmqv2.SendMessageResponse{Status: st(rocketmqv2.Code_OK), Entries: []*rocketmqv2.SendResultEntry{entry(rocketmqv2.Code_TOO_MANY_REQUESTS)}}, Throttled, 42900},
		{"multiple, entries ok", &rocketmqv2.SendMessageResponse{Status: st(rocketmqv2.Code_MULTIPLE_RESULTS), Entries: []*rocketmqv2.SendResultEntry{entry(rocketmqv2.Code_OK)}}, Stored, 20000},
		{"multiple, entry failed", &rocketmqv2.SendMessageResponse{Status: st(rocketmqv2.Code_MULTIPLE_RESULTS), Entries: []*rocketmqv2.SendResultEntry{entry(rocketmqv2.Code_OK), entry(rocketmqv2.Code_PROXY_TIMEOUT)}}, FailedUnknown, 50400},
		{"multiple, no entry", &rocketmqv2.SendMessageResponse{Status: st(rocketmqv2.Code_MULTIPLE_RESULTS)}, FailedUnknown, 30000},
		{"top failed, entry without status", &rocketmqv2.SendMessageResponse{Status: st(rocketmqv2.Code_TOPIC_NOT_FOUND), Entries: []*rocketmqv2.SendResultEntry{{}}}, Permanent, 40402},
		{"no status at all", &rocketmqv2.SendMessageResponse{}, FailedUnknown, 0},
	} {
		o := RocketMQClassifier.Classify(tc.resp, nil)
		if o.Kind != tc.kind || o.WireCode != tc.wire {
			t.Errorf("%s: Classify = {%v %d}; want {%v %d}", tc.name, o.Kind, o.WireCode, tc.kind, tc.wire)
		}
	}
}

// TestRocketMQClassifierGRPCErrors: a gRPC error is read as GRPCClassifier
// reads it, whatever the reply.
func TestRocketMQClassifierGRPCErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		kind OutcomeKind
	}{
		{status.Error(codes.Unavailable, "down"), FailedUnknown},
		{status.Error(codes.DeadlineExceeded, "late"), FailedUnknown},
		{status.Error(codes.Canceled, "lost"), FailedUnknown},
		{status.Error(codes.ResourceExhausted, "slow down"), Throttled},
		{status.Error(codes.InvalidArgument, "bad"), Permanent},
		{status.Error(codes.Unauthenticated, "who"), Permanent},
		{context.DeadlineExceeded, FailedUnknown},
	} {
		o := RocketMQClassifier.Classify(&rocketmqv2.SendMessageResponse{}, tc.err)
		if o.Kind != tc.kind || !errors.Is(o.Err, tc.err) {
			t.Errorf("Classify(%v) = {%v %v}; want {%v %v}", tc.err, o.Kind, o.Err, tc.kind, tc.err)
		}
	}
}

func TestRocketMQStatusError(t *testing.T) {
	t.Parallel()
	e := &RocketMQStatusError{Code: 42900, Message: "BACKLOG over 10"}
	assert.Equal(t, "producer: rocketmq status 42900 TOO_MANY_REQUESTS: BACKLOG over 10", e.Error())
	assert.Equal(t, "producer: rocketmq status 41999 41999", (&RocketMQStatusError{Code: 41999}).Error())

	wrapped := fmt.Errorf("send: %w", e)
	var se *RocketMQStatusError
	require.ErrorAs(t, wrapped, &se)
	assert.True(t, IsThrottled(wrapped))
	assert.Equal(t, brokercode.TooManyRequests, CodeOf(wrapped))
	assert.False(t, IsThrottled(&RocketMQStatusError{Code: 50001}))
}

// Other v2 answers are read by their status too.
func TestRocketMQClassifierOtherAnswers(t *testing.T) {
	t.Parallel()
	o := RocketMQClassifier.Classify(&rocketmqv2.EndTransactionResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_OK}}, nil)
	assert.Equal(t, Stored, o.Kind)
	o = RocketMQClassifier.Classify(&rocketmqv2.QueryRouteResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_TOPIC_NOT_FOUND}}, nil)
	assert.Equal(t, Permanent, o.Kind)
	o = RocketMQClassifier.Classify(struct{}{}, nil)
	assert.Equal(t, FailedUnknown, o.Kind)
	assert.Error(t, o.Err)
}

// TestRocketMQBusyTagsPublic: a RocketMQStatusError of a 50001 with a
// broker's busy tag is a throttle (the reading itself is
// producer/internal/wire/rocketmq's TestRocketMQBusyTags).
func TestRocketMQBusyTagsPublic(t *testing.T) {
	t.Parallel()
	assert.True(t, IsThrottled(&RocketMQStatusError{Code: 50001, Message: "[PC_SYNCHRONIZED]broker busy"}))
	assert.False(t, IsThrottled(&RocketMQStatusError{Code: 50000, Message: "[PC_SYNCHRONIZED]broker busy"}), "only 50001 carries a refusal's remark")
}
