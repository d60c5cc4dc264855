package main

import (
	"bytes"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	rocketryv1 "github.com/rocketry-go/rocketry/gen/rocketry/v1"
)

// startOneProtocol starts a gRPC server on 127.0.0.1:0 that serves one
// protocol's service, every method unimplemented.
func startOneProtocol(t *testing.T, rocketmq bool) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	if rocketmq {
		rocketmqv2.RegisterMessagingServiceServer(srv, rocketmqv2.UnimplementedMessagingServiceServer{})
	} else {
		rocketryv1.RegisterMessagingServiceServer(srv, rocketryv1.UnimplementedMessagingServiceServer{})
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// TestProduceWrongProtocolNamesTheFlag: produce pointed at a server of the
// other protocol fails at once with a line that names the flag to use.
func TestProduceWrongProtocolNamesTheFlag(t *testing.T) {
	for _, tt := range []struct {
		name     string
		rocketmq bool     // the server's protocol
		args     []string // the producer's
		want     string
	}{
		{"rocketry.v1 to a RocketMQ 5 server", true, []string{"--protocol", "rocketry"}, "--protocol rocketmq"},
		{"the default to a rocketry.v1 server", false, nil, "--protocol rocketry"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr := startOneProtocol(t, tt.rocketmq)
			var out, errb bytes.Buffer
			args := append([]string{"produce", "--addr", addr, "--topic", "t", "--count", "1", "--max-attempts", "5"}, tt.args...)
			code := run(args, &out, &errb)
			if code != 1 || !strings.Contains(errb.String(), tt.want) {
				t.Fatalf("run(%v) = %d, stderr %q; want 1 and a line naming %q", args, code, errb.String(), tt.want)
			}
		})
	}
}
