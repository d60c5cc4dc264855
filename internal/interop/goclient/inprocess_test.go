package goclient_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rocketry-go/rocketry/broker"
	"github.com/rocketry-go/rocketry/broker/brokertest"
	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/internal/interop/goclient/kit"
	"github.com/rocketry-go/rocketry/producer"
)

// TestWireServiceName: rocketry's copy of the RocketMQ 5 protocol has a
// proto package of its own, so that this test binary links it beside the
// official client's, but its gRPC service name, the one name on the wire,
// is the official client's.
func TestWireServiceName(t *testing.T) {
	assert.Equal(t, v2.MessagingService_ServiceDesc.ServiceName, rocketmqv2.MessagingService_ServiceDesc.ServiceName)
	assert.Equal(t, "apache.rocketmq.v2.MessagingService", rocketmqv2.MessagingService_ServiceDesc.ServiceName)
	official := map[string]bool{}
	for _, m := range v2.MessagingService_ServiceDesc.Methods {
		official[m.MethodName] = true
	}
	for _, m := range v2.MessagingService_ServiceDesc.Streams {
		official[m.StreamName] = true
	}
	for _, m := range rocketmqv2.MessagingService_ServiceDesc.Methods {
		if m.MethodName == "RecallMessage" {
			continue // newer than the client 5.1.2 (apache/rocketmq-apis added it with recall)
		}
		assert.True(t, official[m.MethodName], "method %s is not the official client's", m.MethodName)
	}
	for _, m := range rocketmqv2.MessagingService_ServiceDesc.Streams {
		assert.True(t, official[m.StreamName], "stream %s is not the official client's", m.StreamName)
	}
}

// TestInProcess is a service as our users build it: one binary that
// produces with rocketry and consumes with the official Go client, against
// brokertest in the same process, with no environment variable. rocketry
// sends FIFO groups (each message after the previous one's receipt, as a
// caller that needs the order does, and the async way, which keeps a
// group's call order itself) and normal messages; the official
// SimpleConsumer receives every message once, each group in send order;
// the official Producer's messages are stored too. The broker's ACL is on:
// every client signs its calls, and none is refused.
func TestInProcess(t *testing.T) {
	const (
		fifoTopic   = "inproc-fifo"
		normalTopic = "inproc-normal"
		groups      = 4
		perGroup    = 15
		normal      = 20
		official    = 10
		accessKey   = "inproc-ak"
		secretKey   = "inproc-sk"
	)
	creds := &credentials.SessionCredentials{AccessKey: accessKey, AccessSecret: secretKey}
	kit.LogToStderr(false)
	b, tlsCfg := brokertest.StartTLS(t,
		broker.WithTopicType(fifoTopic, broker.TopicFIFO),
		broker.WithTopicType(normalTopic, broker.TopicNormal),
		broker.WithLongPolling(100*time.Millisecond, 200*time.Millisecond),
		broker.WithACL(map[string]string{accessKey: secretKey}),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	p, err := producer.New(b.Addr(), producer.WithTLS(tlsCfg), producer.WithCredentials(accessKey, secretKey, ""))
	require.NoError(t, err, "rocketry's producer.New")
	defer p.Close(context.Background())

	// A wrong secret is refused at once, by rocketry and by the official
	// client alike.
	_, err = producer.New(b.Addr(), producer.WithTLS(tlsCfg), producer.WithCredentials(accessKey, "not-the-secret-9f2c", ""))
	require.ErrorIs(t, err, producer.ErrUnauthorized, "rocketry with a wrong secret")
	assert.Contains(t, err.Error(), accessKey, "the error names the access key")
	assert.NotContains(t, err.Error(), "not-the-secret-9f2c", "the error never names the secret")
	bad, err := rmq.NewProducer(&rmq.Config{Endpoint: b.Addr(), Credentials: &credentials.SessionCredentials{AccessKey: accessKey, AccessSecret: "wrong"}},
		rmq.WithTopics(normalTopic))
	require.NoError(t, err)
	assert.Error(t, bad.Start(), "the official producer's Start with a wrong secret")
	_ = bad.GracefulStop()
	refused := b.AuthRefused("")
	require.Positive(t, refused, "calls the ACL refused")

	// FIFO: half the groups sync, half async (the producer keeps a group's
	// call order); normal messages async beside them.
	var (
		mu      sync.Mutex
		sendErr []error
		wg      sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		sendErr = append(sendErr, err)
		mu.Unlock()
	}
	body := func(group string, seq int) []byte { return fmt.Appendf(nil, "%s/%d", group, seq) }
	for g := range groups {
		group := fmt.Sprintf("group-%d", g)
		wg.Go(func() {
			for i := range perGroup {
				m := &producer.Message{Topic: fifoTopic, Tag: "fifo", MessageGroup: group, Body: body(group, i)}
				if g%2 == 0 {
					if _, err := p.Send(ctx, m); err != nil {
						fail(fmt.Errorf("sync %s/%d: %w", group, i, err))
						return
					}
					continue
				}
				wg.Add(1)
				p.SendAsync(ctx, m, func(_ *producer.SendReceipt, err error) {
					defer wg.Done()
					if err != nil {
						fail(fmt.Errorf("async %s/%d: %w", group, i, err))
					}
				})
			}
		})
	}
	for i := range normal {
		wg.Add(1)
		p.SendAsync(ctx, &producer.Message{Topic: normalTopic, Tag: "normal", Body: body("normal", i)}, func(_ *producer.SendReceipt, err error) {
			defer wg.Done()
			if err != nil {
				fail(fmt.Errorf("normal %d: %w", i, err))
			}
		})
	}
	wg.Wait()
	require.Empty(t, sendErr, "rocketry's sends")

	// The official producer, in the same process, to the same broker.
	op, err := rmq.NewProducer(&rmq.Config{Endpoint: b.Addr(), Credentials: creds},
		rmq.WithTopics(normalTopic))
	require.NoError(t, err, "the official NewProducer")
	require.NoError(t, op.Start(), "the official producer's Start")
	for i := range official {
		msg := &rmq.Message{Topic: normalTopic, Body: body("official", i)}
		msg.SetTag("official")
		_, err := op.Send(ctx, msg)
		require.NoError(t, err, "the official producer's Send %d", i)
	}
	require.NoError(t, op.GracefulStop())

	// The official SimpleConsumer reads everything back.
	c, err := rmq.NewSimpleConsumer(&rmq.Config{
		Endpoint: b.Addr(), ConsumerGroup: "inproc", Credentials: creds,
	},
		rmq.WithAwaitDuration(200*time.Millisecond),
		rmq.WithSubscriptionExpressions(map[string]*rmq.FilterExpression{fifoTopic: rmq.SUB_ALL, normalTopic: rmq.SUB_ALL}))
	require.NoError(t, err, "the official NewSimpleConsumer")
	require.NoError(t, c.Start(), "the official consumer's Start")
	defer c.GracefulStop()

	want := groups*perGroup + normal + official
	seen := map[string]int{} // body: deliveries
	next := map[string]int{} // group: the next seq it must deliver
	var outOfOrder []string  // what came out of order
	deadline := time.Now().Add(30 * time.Second)
	for len(seen) < want && time.Now().Before(deadline) {
		views, err := c.Receive(ctx, 16, 10*time.Second)
		if err != nil {
			var rs *rmq.ErrRpcStatus
			if errors.As(err, &rs) && rs.Code == int32(v2.Code_MESSAGE_NOT_FOUND) {
				continue
			}
			if err.Error() == "[error] CODE=DEADLINE_EXCEEDED" {
				// 5.1.2's receiveMessage cancels its context after the
				// stream's end and then selects on that context and on
				// its done channel at random, so that a receive that got
				// its messages can report this instead (fixed upstream by
				// apache/rocketmq-clients#1275): the messages it dropped
				// come again after their invisible duration.
				continue
			}
			require.NoError(t, err, "the official consumer's Receive")
		}
		for _, v := range views {
			bd := string(v.GetBody())
			seen[bd]++
			if g := v.GetMessageGroup(); g != nil {
				group, seq, _ := strings.Cut(bd, "/")
				n, _ := strconv.Atoi(seq)
				if group != *g || n != next[group] {
					outOfOrder = append(outOfOrder, fmt.Sprintf("%s (group %s) when %d was due", bd, *g, next[group]))
				}
				next[group] = n + 1
			}
			require.NoError(t, c.Ack(ctx, v), "the official consumer's Ack of %s", bd)
		}
	}
	require.Len(t, seen, want, "distinct messages received")
	for bd, n := range seen {
		assert.Equal(t, 1, n, "%s received %d times", bd, n)
	}
	assert.Empty(t, outOfOrder, "FIFO deliveries out of send order")
	for g := range groups {
		assert.Equal(t, perGroup, next[fmt.Sprintf("group-%d", g)], "group-%d's last message", g)
	}
	assert.Len(t, b.Messages(normalTopic), normal+official, "messages stored on %s", normalTopic)
	assert.Equal(t, refused, b.AuthRefused(""), "calls the ACL refused with the right keys")
}
