package main

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// TestBrokerMetricsFlag: --metrics serves the broker's metrics over HTTP
// while it runs, and stops with it.
func TestBrokerMetricsFlag(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	interrupt := fakeSignals(t)
	var out, errb syncBuffer
	done := make(chan int)
	go func() {
		done <- run([]string{"broker", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--stats-interval", "0"}, &out, &errb)
	}()
	w := waitPrinted(t, &out, &errb, "listening on ", "metrics at ")
	addr, metrics := w[0], w[1]
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	_, err = rocketryv1.NewMessagingServiceClient(conn).SendMessage(context.Background(), &rocketryv1.SendMessageRequest{
		Messages: []*rocketryv1.Message{{Topic: "t", MessageId: "a"}},
	})
	conn.Close()
	require.NoError(t, err)

	resp, err := http.Get(metrics)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Contains(t, string(body), "\nrocketry_broker_stored_messages_total 1\n")

	interrupt()
	require.Equal(t, 0, <-done, "stderr: %s", errb.String())
	_, err = http.Get(metrics)
	assert.Error(t, err, "the metrics listener closes with the broker")
}

func TestBrokerMetricsFlagBadAddress(t *testing.T) {
	fakeSignals(t)
	var out, errb syncBuffer
	code := run([]string{"broker", "--listen", "127.0.0.1:0", "--metrics", "no-such-host-at-all:x", "--stats-interval", "0"}, &out, &errb)
	assert.Equal(t, 2, code, "an address the broker cannot listen on is bad input")
	assert.Contains(t, errb.String(), `rocketry broker: --metrics "no-such-host-at-all:x": `)
}
