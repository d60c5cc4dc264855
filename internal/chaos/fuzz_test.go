package chaos_test

import (
	"context"
	"fmt"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/broker"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// Consumer request kinds of FuzzConsumerRequests.
const (
	fuzzReceive = iota
	fuzzCommit
	fuzzReset
	numFuzzKinds
)

// fuzzQueues, fuzzStored: the fuzz broker's topic "t" has 2 queues and 10
// messages, so each queue's head is 5.
const (
	fuzzQueues = 2
	fuzzStored = 10
	fuzzHead   = fuzzStored / fuzzQueues
)

// fuzzBroker is a broker with topic "t" filled, and clients of it. It is
// replaced every fuzzRenew calls, since every new topic or group name the
// fuzzer tries stays in the broker's memory.
type fuzzBroker struct {
	b     *broker.Broker
	cc    *grpc.ClientConn
	c     rocketryv1.ConsumerServiceClient
	calls int
}

const fuzzRenew = 5000

func newFuzzBroker(tb testing.TB) *fuzzBroker {
	b, err := broker.New(broker.WithQueues(fuzzQueues))
	if err != nil {
		tb.Fatal(err)
	}
	if err := b.Start("127.0.0.1:0"); err != nil {
		tb.Fatal(err)
	}
	cc, err := grpc.NewClient(b.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Stop()
		tb.Fatal(err)
	}
	req := &rocketryv1.SendMessageRequest{}
	for i := range fuzzStored {
		req.Messages = append(req.Messages, &rocketryv1.Message{Topic: "t", MessageId: fmt.Sprint(i), Body: []byte("x")})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := rocketryv1.NewMessagingServiceClient(cc).SendMessage(ctx, req); err != nil {
		cc.Close()
		b.Stop()
		tb.Fatal(err)
	}
	return &fuzzBroker{b: b, cc: cc, c: rocketryv1.NewConsumerServiceClient(cc)}
}

func (f *fuzzBroker) close() {
	f.cc.Close()
	f.b.Stop()
}

// FuzzConsumerRequests sends arbitrary ReceiveMessages, CommitOffset and
// ResetOffset requests (any topic and group names, counts, queue ids and
// offsets) to a real broker through a real client. The broker never
// crashes or answers INTERNAL; every refusal is INVALID_ARGUMENT or
// NOT_FOUND with a 4xx ErrorDetail and a message; every answer keeps the
// broker's rules: at most the count asked (32 for 0, 10,000 at most), the
// topic's own messages in offset order per queue, offsets committed only
// within 0..head. The seed corpus is in testdata/fuzz/FuzzConsumerRequests
// and below.
func FuzzConsumerRequests(f *testing.F) {
	for _, s := range []struct {
		kind         uint8
		topic, group string
		a, b         int64
		auto         bool
	}{
		{fuzzReceive, "t", "g", 0, 0, false},
		{fuzzReceive, "t", "g", 3, 0, true},
		{fuzzReceive, "t", "g", -1, 0, true},
		{fuzzReceive, "t", "g", 1 << 40, 0, true},
		{fuzzReceive, "", "g", 1, 0, false},
		{fuzzReceive, "t", "", 1, 0, false},
		{fuzzReceive, "t t", "g\x00", 1, 0, false},
		{fuzzReceive, "tópico\u00a0", "g\u2028", 1, 0, false},
		{fuzzCommit, "t", "g", 0, 5, false},
		{fuzzCommit, "t", "g", 1, 6, false},
		{fuzzCommit, "t", "g", 2, 0, false},
		{fuzzCommit, "t", "g", -1, -1, false},
		{fuzzCommit, "u", "g", 0, 0, false},
		{fuzzReset, "t", "g", 0, 0, false},
		{fuzzReset, "t", "g", 1 << 62, 0, false},
		{fuzzReset, "t", "g", -5, 0, false},
		{fuzzReset, "t", "a-very-long-group-name-" + string(make([]byte, 300)), 0, 0, false},
	} {
		f.Add(s.kind, s.topic, s.group, s.a, s.b, s.auto)
	}
	fb := newFuzzBroker(f)
	f.Cleanup(func() { fb.close() })
	f.Fuzz(func(t *testing.T, kind uint8, topicName, group string, a, b int64, auto bool) {
		if !utf8.ValidString(topicName) || !utf8.ValidString(group) {
			// proto3 strings are UTF-8: the client's codec refuses to
			// send these, and the server's would refuse to read them.
			t.Skip("not UTF-8")
		}
		if fb.calls++; fb.calls > fuzzRenew {
			fb.close()
			fb = newFuzzBroker(t)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		var what string
		switch kind % numFuzzKinds {
		case fuzzReceive:
			req := &rocketryv1.ReceiveMessagesRequest{Topic: topicName, Group: group, MaxMessages: int32(a), AutoCommit: auto}
			what = fmt.Sprintf("ReceiveMessages(%v)", req)
			var resp *rocketryv1.ReceiveMessagesResponse
			resp, err = fb.c.ReceiveMessages(ctx, req)
			if err == nil {
				checkReceived(t, what, req, resp)
			}
		case fuzzCommit:
			req := &rocketryv1.CommitOffsetRequest{Topic: topicName, Group: group, QueueId: int32(a), Offset: b}
			what = fmt.Sprintf("CommitOffset(%v)", req)
			_, err = fb.c.CommitOffset(ctx, req)
			if err == nil {
				head := int64(0)
				if topicName == "t" {
					head = fuzzHead
				}
				if req.QueueId < 0 || req.QueueId >= fuzzQueues || req.Offset < 0 || req.Offset > head {
					t.Fatalf("%s = ok; want a refusal (queues 0..%d, head %d)", what, fuzzQueues-1, head)
				}
			}
		case fuzzReset:
			req := &rocketryv1.ResetOffsetRequest{Topic: topicName, Group: group, Offset: a}
			what = fmt.Sprintf("ResetOffset(%v)", req)
			_, err = fb.c.ResetOffset(ctx, req)
			if err == nil && req.Offset < 0 {
				t.Fatalf("%s = ok; want a refusal of a negative offset", what)
			}
		}
		if err != nil {
			checkRefusal(t, what, err)
		}
	})
}

// checkReceived checks a ReceiveMessages answer against the broker's rules.
func checkReceived(t *testing.T, what string, req *rocketryv1.ReceiveMessagesRequest, resp *rocketryv1.ReceiveMessagesResponse) {
	t.Helper()
	limit := int(req.MaxMessages)
	switch {
	case limit < 0:
		t.Fatalf("%s = ok; want a refusal of a negative count", what)
	case limit == 0:
		limit = broker.DefaultReceiveMessages
	case limit > broker.MaxReceiveMessages:
		limit = broker.MaxReceiveMessages
	}
	if len(resp.GetMessages()) > limit {
		t.Fatalf("%s = %d messages; want at most %d", what, len(resp.GetMessages()), limit)
	}
	next := map[int32]int64{}
	for _, rm := range resp.GetMessages() {
		q, off := rm.GetQueueId(), rm.GetOffset()
		if q < 0 || q >= fuzzQueues || off < 0 || off >= fuzzHead {
			t.Fatalf("%s: message at queue %d offset %d; want queues 0..%d, offsets 0..%d", what, q, off, fuzzQueues-1, fuzzHead-1)
		}
		if want, ok := next[q]; ok && off != want {
			t.Fatalf("%s: queue %d offset %d after %d; want offsets in order", what, q, off, want-1)
		}
		next[q] = off + 1
		if rm.GetMessage().GetTopic() != req.Topic {
			t.Fatalf("%s: a message of topic %q; want %q", what, rm.GetMessage().GetTopic(), req.Topic)
		}
	}
}

// checkRefusal checks that err is a 4xx refusal with an ErrorDetail.
func checkRefusal(t *testing.T, what string, err error) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || (st.Code() != codes.InvalidArgument && st.Code() != codes.NotFound) {
		t.Fatalf("%s = %v; want success, INVALID_ARGUMENT or NOT_FOUND", what, err)
	}
	for _, d := range st.Details() {
		if ed, ok := d.(*rocketryv1.ErrorDetail); ok {
			if ed.GetCode() < 400 || ed.GetCode() >= 500 || ed.GetMessage() == "" || st.Message() == "" {
				t.Fatalf("%s refusal detail = %v; want a 4xx code and a message", what, ed)
			}
			return
		}
	}
	t.Fatalf("%s = %v; want an ErrorDetail", what, err)
}
