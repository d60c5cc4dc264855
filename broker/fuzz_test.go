package broker_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// FuzzSendMessage sends arbitrary requests (any bytes that unmarshal as a
// SendMessageRequest) through a real client to a real broker: the broker
// never crashes, and every refusal is a 4xx with an ErrorDetail and a
// message. The seed corpus is in testdata/fuzz/FuzzSendMessage.
func FuzzSendMessage(f *testing.F) {
	for _, req := range []*rocketryv1.SendMessageRequest{
		{Messages: []*rocketryv1.Message{msg("t", "a")}},
		{Messages: []*rocketryv1.Message{msg("t", "a"), msg("t", "a")}},
		{Messages: []*rocketryv1.Message{{Topic: "t", MessageId: "k", Tag: "tag", Keys: []string{"k1"}, Properties: map[string]string{"p": "v"}}}},
		{Messages: []*rocketryv1.Message{msg("t", "a"), msg("u", "b")}},
		{Messages: []*rocketryv1.Message{{Topic: "t"}}},
		{},
	} {
		data, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	b := brokertest.Start(f, broker.WithMaxBodyBytes(64), broker.WithMaxBatch(8), broker.WithQueues(2))
	c := dial(f, b.Addr())
	f.Fuzz(func(t *testing.T, data []byte) {
		req := &rocketryv1.SendMessageRequest{}
		if proto.Unmarshal(data, req) != nil {
			t.Skip("not a SendMessageRequest")
		}
		resp, err := c.SendMessage(ctx(t), req)
		if err == nil {
			if len(resp.Results) != len(req.Messages) {
				t.Fatalf("SendMessage(%v) = %d results; want %d", req, len(resp.Results), len(req.Messages))
			}
			return
		}
		st, d := detail(t, err)
		if st.Code() != codes.InvalidArgument && st.Code() != codes.NotFound {
			t.Fatalf("SendMessage(%v) = %v; want success or a 4xx", req, err)
		}
		if d.Code < 400 || d.Code >= 500 || d.Message == "" || st.Message() == "" {
			t.Fatalf("SendMessage(%v) refusal detail = %v; want a 4xx code and a message", req, d)
		}
		_ = status.Code(err)
	})
}
