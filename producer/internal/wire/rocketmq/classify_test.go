package wirermq

import (
	"strings"
	"testing"

	"github.com/rocketry-go/rocketry/brokercode"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/senderr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRocketMQClassifierUnknownCodes reads codes no enum names by their
// range.
func TestRocketMQClassifierUnknownCodes(t *testing.T) {
	for _, tc := range []struct {
		code int32
		kind outcome.Kind
	}{
		{40099, outcome.Permanent}, {40555, outcome.Permanent}, {42999, outcome.Throttled}, {45000, outcome.Permanent},
		{50999, outcome.FailedUnknown}, {20001, outcome.FailedUnknown}, {70000, outcome.FailedUnknown},
	} {
		o := ClassifyStatus(&rocketmqv2.Status{Code: rocketmqv2.Code(tc.code)})
		if o.Kind != tc.kind || o.WireCode != tc.code {
			t.Errorf("ClassifyStatus(%d) = {%v %d}; want {%v %d}", tc.code, o.Kind, o.WireCode, tc.kind, tc.code)
		}
	}
}

func TestRocketMQClassifyEntriesOfABatch(t *testing.T) {
	resp := &rocketmqv2.SendMessageResponse{
		Status: &rocketmqv2.Status{Code: rocketmqv2.Code_MULTIPLE_RESULTS},
		Entries: []*rocketmqv2.SendResultEntry{
			{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_OK}},
			{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_TOO_MANY_REQUESTS, Message: "BACKLOG"}},
			{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_MESSAGE_BODY_TOO_LARGE}},
		},
	}
	got := ClassifyEntries(resp, 4)
	require.Len(t, got, 4)
	assert.Equal(t, outcome.Stored, got[0].Kind)
	assert.Equal(t, outcome.Throttled, got[1].Kind)
	assert.Equal(t, brokercode.ReasonBacklog, got[1].Reason)
	assert.Equal(t, outcome.Permanent, got[2].Kind)
	assert.Equal(t, outcome.FailedUnknown, got[3].Kind, "a message without an entry")

	// A top-level failure without entries is every message's.
	top := &rocketmqv2.SendMessageResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_TOO_MANY_REQUESTS}}
	for i, o := range ClassifyEntries(top, 2) {
		assert.Equal(t, outcome.Throttled, o.Kind, "message %d", i)
	}
	// Entries without a status: the top-level OK covers them, not
	// MULTIPLE_RESULTS.
	bare := []*rocketmqv2.SendResultEntry{{}, {}}
	ok := ClassifyEntries(&rocketmqv2.SendMessageResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_OK}, Entries: bare}, 3)
	assert.Equal(t, []outcome.Kind{outcome.Stored, outcome.Stored, outcome.FailedUnknown}, []outcome.Kind{ok[0].Kind, ok[1].Kind, ok[2].Kind})
	multi := ClassifyEntries(&rocketmqv2.SendMessageResponse{Status: &rocketmqv2.Status{Code: rocketmqv2.Code_MULTIPLE_RESULTS}, Entries: bare}, 2)
	assert.Equal(t, []outcome.Kind{outcome.FailedUnknown, outcome.FailedUnknown}, []outcome.Kind{multi[0].Kind, multi[1].Kind})
}

// TestRocketMQClassifyProxyBatchShapes pins the reading of the answers a
// RocketMQ 5 proxy gives a request of several messages: one entry for the
// whole batch (its status is every message's), or a status alone.
func TestRocketMQClassifyProxyBatchShapes(t *testing.T) {
	st := func(c rocketmqv2.Code, msg string) *rocketmqv2.Status {
		return &rocketmqv2.Status{Code: c, Message: msg}
	}
	one := func(top, entry *rocketmqv2.Status) *rocketmqv2.SendMessageResponse {
		return &rocketmqv2.SendMessageResponse{Status: top, Entries: []*rocketmqv2.SendResultEntry{{Status: entry, MessageId: "a,b,c,d"}}}
	}
	for _, tc := range []struct {
		name string
		resp *rocketmqv2.SendMessageResponse
		kind outcome.Kind
		wire int32
	}{
		{"one OK entry: all stored", one(st(rocketmqv2.Code_OK, "OK"), st(rocketmqv2.Code_OK, "OK")), outcome.Stored, 20000},
		{"one flush-timeout entry: all in the leader's log", one(st(rocketmqv2.Code_MASTER_PERSISTENCE_TIMEOUT, ""), st(rocketmqv2.Code_MASTER_PERSISTENCE_TIMEOUT, "")), outcome.Stored, 50401},
		{"one replica-timeout entry: all in the leader's log", one(st(rocketmqv2.Code_SLAVE_PERSISTENCE_TIMEOUT, ""), st(rocketmqv2.Code_SLAVE_PERSISTENCE_TIMEOUT, "")), outcome.Stored, 50402},
		{"one HA entry: all in the leader's log", one(st(rocketmqv2.Code_HA_NOT_AVAILABLE, ""), st(rocketmqv2.Code_HA_NOT_AVAILABLE, "")), outcome.Stored, 50002},
		{"one OK entry under a failed top status", one(st(rocketmqv2.Code_PROXY_TIMEOUT, ""), st(rocketmqv2.Code_OK, "")), outcome.FailedUnknown, 50400},
		{"status alone, 42900 tagged", &rocketmqv2.SendMessageResponse{Status: st(rocketmqv2.Code_TOO_MANY_REQUESTS, "[TIMEOUT_CLEAN_QUEUE]broker busy")}, outcome.Throttled, 42900},
		{"status alone, 50001 tagged (local mode)", &rocketmqv2.SendMessageResponse{Status: st(rocketmqv2.Code_INTERNAL_SERVER_ERROR, "[PC_SYNCHRONIZED]broker busy, start flow control for a while")}, outcome.Throttled, 50001},
		{"status alone, 50001", &rocketmqv2.SendMessageResponse{Status: st(rocketmqv2.Code_INTERNAL_SERVER_ERROR, "NullPointerException")}, outcome.FailedUnknown, 50001},
		{"status alone, OK: not a proxy's answer", &rocketmqv2.SendMessageResponse{Status: st(rocketmqv2.Code_OK, "OK")}, outcome.FailedUnknown, 20000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ClassifyEntries(tc.resp, 4)
			require.Len(t, got, 4)
			for i, o := range got {
				assert.Equal(t, tc.kind, o.Kind, "message %d: %v", i, o.Err)
				assert.Equal(t, tc.wire, o.WireCode, "message %d", i)
			}
		})
	}
}

// TestRocketMQBusyTags pins the throttle reason read from a broker's busy
// tags, as 42900 (the broker's SYSTEM_BUSY through a proxy) and as 50001
// (local mode, or the broker's SYSTEM_ERROR for [PC_SYNCHRONIZED]); a
// 42900 without a tag or words stays UNSPECIFIED, a 50001 without a tag
// stays unknown.
func TestRocketMQBusyTags(t *testing.T) {
	const (
		unspec  = brokercode.ReasonUnspecified
		rate    = brokercode.ReasonSendRate
		storage = brokercode.ReasonStorageLoad
		backlog = brokercode.ReasonBacklog
	)
	for _, tc := range []struct {
		msg    string
		reason brokercode.Reason
	}{
		{"[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: 201ms, size of queue: 37", rate},
		{"[PCBUSY_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: 5ms, size of queue: 2", storage},
		{"[PC_SYNCHRONIZED]broker busy, start flow control for a while", storage},
		{"[REJECTREQUEST]system busy, start flow control for a while", storage},
		{"[OVERLOAD]system busy, start flow control for a while", rate},
		{"throttled: BACKLOG of topic t over 1000", backlog},
		{"throttled: STORAGE_LOAD", storage},
		{"flow limit", unspec},
		{"", unspec},
	} {
		o := ClassifyStatus(&rocketmqv2.Status{Code: rocketmqv2.Code_TOO_MANY_REQUESTS, Message: tc.msg})
		if o.Kind != outcome.Throttled || o.Reason != tc.reason {
			t.Errorf("ClassifyStatus(42900 %q) = {%v %v}; want {Throttled %v}", tc.msg, o.Kind, o.Reason, tc.reason)
		}
		o = ClassifyStatus(&rocketmqv2.Status{Code: rocketmqv2.Code_INTERNAL_SERVER_ERROR, Message: tc.msg})
		want := outcome.FailedUnknown
		if strings.HasPrefix(tc.msg, "[") {
			want = outcome.Throttled
		}
		if o.Kind != want || (want == outcome.Throttled && (o.Reason != tc.reason || o.Code != brokercode.TooManyRequests)) {
			t.Errorf("ClassifyStatus(50001 %q) = {%v %v %v}; want {%v %v}", tc.msg, o.Kind, o.Reason, o.Code, want, tc.reason)
		}
		var se *senderr.StatusError
		if assert.ErrorAs(t, o.Err, &se) {
			assert.Equal(t, tc.msg, se.Message, "the raw tag stays in the error")
		}
	}
}
