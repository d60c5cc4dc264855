package main

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
	"github.com/rocketry-go/rocketry/producer"
)

// brokerV2 dials the broker command listening at addr.
func brokerV2(t *testing.T, addr string) (rocketmqv2.MessagingServiceClient, rocketryv1.ConsumerServiceClient) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return rocketmqv2.NewMessagingServiceClient(conn), rocketryv1.NewConsumerServiceClient(conn)
}

func v2Send(t *testing.T, c rocketmqv2.MessagingServiceClient, id string) *rocketmqv2.SendMessageResponse {
	t.Helper()
	resp, err := c.SendMessage(context.Background(), &rocketmqv2.SendMessageRequest{Messages: []*rocketmqv2.Message{{
		Topic: &rocketmqv2.Resource{Name: "orders"}, Body: []byte("b"),
		SystemProperties: &rocketmqv2.SystemProperties{MessageId: id},
	}}})
	require.NoError(t, err)
	return resp
}

// TestBrokerRocketMQFlags: by default a re-sent apache.rocketmq.v2 message
// is stored again and counted as a copy; --rocketmq-dedup answers it as
// stored; --stored-internal-rate 1 stores each send and answers it 50001;
// --proxy-mode local and the send queue flags refuse a request
// that waited too long with 50001 [TIMEOUT_CLEAN_QUEUE]; a --peers entry
// may give a broker several addresses.
func TestBrokerRocketMQFlags(t *testing.T) {
	leakCheck(t)
	for _, tc := range []struct {
		flags          []string
		code           rocketmqv2.Code
		stored, copies int64
	}{
		{nil, rocketmqv2.Code_OK, 2, 1},
		{[]string{"--rocketmq-dedup"}, rocketmqv2.Code_OK, 1, 0},
		{[]string{"--stored-internal-rate", "1"}, rocketmqv2.Code_INTERNAL_SERVER_ERROR, 2, 1},
	} {
		out, stop := startBrokerCommand(t, append([]string{"--listen", "127.0.0.1:0", "--stats-interval", "0"}, tc.flags...)...)
		addr := regexp.MustCompile(`listening on (\S+)`).FindStringSubmatch(out.String())[1]
		c, cs := brokerV2(t, addr)
		for range 2 {
			assert.Equal(t, tc.code, v2Send(t, c, "a").GetStatus().GetCode(), "answer with %v", tc.flags)
		}
		s, err := cs.GetStats(context.Background(), &rocketryv1.GetStatsRequest{})
		require.NoError(t, err)
		assert.Equal(t, tc.stored, s.GetStored(), "stored with %v", tc.flags)
		assert.Equal(t, tc.copies, s.GetCopies(), "copies with %v", tc.flags)
		stop()
	}

	out, stop := startBrokerCommand(t, "--listen", "127.0.0.1:0", "--stats-interval", "0", "--proxy-mode", "local",
		"--send-workers", "1", "--send-service-time", "300ms", "--send-queue-max-wait", "20ms",
		"--peers", "broker-1=127.0.0.1:7001;127.0.0.2:7001")
	defer stop()
	addr := regexp.MustCompile(`listening on (\S+)`).FindStringSubmatch(out.String())[1]
	c, _ := brokerV2(t, addr)
	resps := make([]*rocketmqv2.SendMessageResponse, 2)
	var wg sync.WaitGroup
	for i := range resps {
		wg.Go(func() { resps[i] = v2Send(t, c, string(rune('a'+i))) })
	}
	wg.Wait()
	var codes []rocketmqv2.Code
	for _, r := range resps {
		codes = append(codes, r.GetStatus().GetCode())
		if r.GetStatus().GetCode() != rocketmqv2.Code_OK {
			assert.True(t, strings.HasPrefix(r.GetStatus().GetMessage(), "[TIMEOUT_CLEAN_QUEUE]broker busy, "), r.GetStatus().GetMessage())
		}
	}
	assert.ElementsMatch(t, []rocketmqv2.Code{rocketmqv2.Code_OK, rocketmqv2.Code_INTERNAL_SERVER_ERROR}, codes)
	route, err := c.QueryRoute(context.Background(), &rocketmqv2.QueryRouteRequest{Topic: &rocketmqv2.Resource{Name: "orders"}})
	require.NoError(t, err)
	var peer []string
	for _, q := range route.GetMessageQueues() {
		if q.GetBroker().GetName() == "broker-1" {
			peer = nil
			for _, a := range q.GetBroker().GetEndpoints().GetAddresses() {
				peer = append(peer, a.GetHost())
			}
		}
	}
	assert.Equal(t, []string{"127.0.0.1", "127.0.0.2"}, peer)
}

func TestBrokerRocketMQBadFlags(t *testing.T) {
	dead := deadAddress(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--proxy-mode", "remote"}, `--proxy-mode "remote": want cluster or local`},
		{[]string{"--send-workers", "-1"}, "WithSendQueue: Workers -1 is negative"},
		{[]string{"--send-workers", "1", "--send-queue-max-wait", "-1s"}, "MaxWait -1s is negative"},
		{[]string{"--peers", "broker-1=127.0.0.1:7001;127.0.0.1:7001"}, "address 127.0.0.1:7001 given twice"},
		{[]string{"--peers", "broker-1=127.0.0.1:7001;nohost"}, `address "nohost" of broker-1 is not HOST:PORT`},
	} {
		checkRefused(t, append([]string{"broker", "--listen", dead}, tc.args...), 2, tc.want)
	}
}

// TestBrokerACLFlag: with --acl, an unsigned apache.rocketmq.v2 call is
// refused with 40100, a producer with a wrong secret fails New with
// producer.ErrUnauthorized, and one with the right keys sends.
func TestBrokerACLFlag(t *testing.T) {
	leakCheck(t)
	out, stop := startBrokerCommand(t, "--listen", "127.0.0.1:0", "--stats-interval", "0", "--acl", "app:secret,ops:other")
	defer stop()
	addr := regexp.MustCompile(`listening on (\S+)`).FindStringSubmatch(out.String())[1]
	c, _ := brokerV2(t, addr)
	assert.Equal(t, rocketmqv2.Code_UNAUTHORIZED, v2Send(t, c, "a").GetStatus().GetCode())

	_, err := producer.New(addr, producer.WithProtocol(producer.RocketMQ5), producer.WithCredentials("app", "wrong", ""))
	require.ErrorIs(t, err, producer.ErrUnauthorized)

	p, err := producer.New(addr, producer.WithProtocol(producer.RocketMQ5), producer.WithCredentials("ops", "other", ""))
	require.NoError(t, err)
	_, err = p.Send(context.Background(), &producer.Message{Topic: "orders", Body: []byte("b")})
	assert.NoError(t, err)
	require.NoError(t, p.Close(context.Background()))
}

func TestBrokerACLBadFlag(t *testing.T) {
	dead := deadAddress(t)
	checkRefused(t, []string{"broker", "--listen", dead, "--acl", "app"}, 2, "ACCESS_KEY:SECRET_KEY")
	checkRefused(t, []string{"broker", "--listen", dead, "--acl", ":secret"}, 2, "ACCESS_KEY:SECRET_KEY")
}
