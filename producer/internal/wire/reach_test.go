package wire

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/senderr"
)

// call makes one unary call to addr, as an attempter does: with
// grpc.Peer, so that NotSent can tell whether the request left.
func call(t *testing.T, addr string) (*peer.Peer, error) {
	t.Helper()
	cc, err := grpc.NewClient(Passthrough(addr), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var pr peer.Peer
	_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&pr))
	return &pr, err
}

// TestNotSent: a call to a closed port never left the client, and names
// its broker and why (ErrConnectionRefused); a call that reached a server
// left, whatever its answer, and its outcome is as the classifier read it.
func TestNotSent(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := lis.Addr().String()
	require.NoError(t, lis.Close())

	pr, err := call(t, closed)
	require.Error(t, err)
	o, unsent := NotSent(outcome.Outcome{Kind: outcome.FailedUnknown, Err: err}, err, pr, closed)
	assert.True(t, unsent, "a refused connection: %v", err)
	assert.Equal(t, outcome.FailedNotStored, o.Kind)
	var ce *senderr.ConnectError
	require.ErrorAs(t, o.Err, &ce)
	assert.Equal(t, closed, ce.Endpoint)
	assert.ErrorIs(t, o.Err, senderr.ErrConnectionRefused)
	assert.Equal(t, codes.Unavailable, status.Code(o.Err))
	assert.Contains(t, o.Err.Error(), "producer: broker "+closed+" unreachable: connection refused")

	lis, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	// An unknown service: NOT_FOUND, from a server the request reached.
	cc, err := grpc.NewClient(Passthrough(lis.Addr().String()), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var p2 peer.Peer
	_, err = healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "nope"}, grpc.Peer(&p2))
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	in := outcome.Outcome{Kind: outcome.Permanent, Err: err}
	o, unsent = NotSent(in, err, &p2, lis.Addr().String())
	assert.False(t, unsent, "the request reached the server")
	assert.Equal(t, in, o)
}
