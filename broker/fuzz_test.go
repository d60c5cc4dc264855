package broker_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
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

// FuzzRocketMQSendMessage sends arbitrary apache.rocketmq.v2 requests to a
// real broker: the broker never crashes, the call succeeds, and the answer
// is a stored request's (status OK and one OK entry) or a refused one's (a
// 4xxxx status with a message and no entry).
func FuzzRocketMQSendMessage(f *testing.F) {
	tooBig := v2msg("t", "big")
	tooBig.Body = make([]byte, 65)
	group := "g"
	grouped := v2msg("t", "grouped")
	grouped.SystemProperties.MessageGroup = &group
	for _, req := range []*rocketmqv2.SendMessageRequest{
		{Messages: []*rocketmqv2.Message{v2msg("t", "a")}},
		{Messages: []*rocketmqv2.Message{v2msg("t", "a"), v2msg("t", "a"), tooBig, v2msg("u", "b")}},
		{Messages: []*rocketmqv2.Message{{Topic: &rocketmqv2.Resource{Name: "t"}}}},
		{Messages: []*rocketmqv2.Message{grouped}},
		{},
	} {
		data, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	b := brokertest.Start(f, broker.WithMaxBodyBytes(64), broker.WithMaxBatch(8), broker.WithQueues(2))
	c := dialV2(f, b.Addr())
	f.Fuzz(func(t *testing.T, data []byte) {
		req := &rocketmqv2.SendMessageRequest{}
		if proto.Unmarshal(data, req) != nil {
			t.Skip("not a SendMessageRequest")
		}
		resp, err := c.SendMessage(ctx(t), req)
		if err != nil {
			t.Fatalf("SendMessage(%v) = %v; want a body status", req, err)
		}
		st := resp.GetStatus()
		if st.GetCode() == rocketmqv2.Code_OK {
			if len(resp.Entries) != 1 || resp.Entries[0].GetStatus().GetCode() != rocketmqv2.Code_OK {
				t.Fatalf("SendMessage(%v) = OK with entries %v; want one OK entry", req, resp.Entries)
			}
			return
		}
		if c := st.GetCode(); c < 40000 || c >= 50000 || st.GetMessage() == "" || len(resp.Entries) != 0 {
			t.Fatalf("SendMessage(%v) = %v with %d entries; want a 4xxxx status with a message and no entry", req, st, len(resp.Entries))
		}
	})
}
