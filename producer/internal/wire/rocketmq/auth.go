package wirermq

import (
	"errors"
	"io"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
	"github.com/rocketry-go/rocketry/outcome"
	"github.com/rocketry-go/rocketry/senderr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// An authentication or permission refusal is final: the same credentials
// are refused again on every retry, so start fails at the first refusal
// instead of waiting out its timeout, and a send fails after the one
// attempt (its outcome is Permanent, as ClassifyCode and wirev1.Classify
// read 40100, 40300, UNAUTHENTICATED and PERMISSION_DENIED).
//
// How a RocketMQ 5 proxy refuses: its authentication pipeline runs on
// every request, unary ones and each command of a Telemetry stream
// (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/GrpcMessagingApplication.java,
// addExecutor and telemetry's onNext), and an AuthenticationException or
// AuthorizationException is answered as the body status 40100
// UNAUTHORIZED with the exception's text
// (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/common/ResponseBuilder.java,
// buildStatus); on Telemetry as a command with that status alone, after
// which the proxy completes the stream
// (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/common/ResponseWriter.java).
// Other servers in front of RocketMQ answer with the gRPC codes
// UNAUTHENTICATED or PERMISSION_DENIED instead; 40300 FORBIDDEN is the
// protocol's code of a refused permission, but for the proxy's "no
// writable queue" (rmqNoWritableQueue), which refuses no credential.

// authRefusal reads err as an authentication or permission refusal: ok
// when it is one, denied when it refuses a permission.
func authRefusal(err error) (ok, denied bool) {
	if err == nil {
		return false, false
	}
	var se *senderr.StatusError
	if errors.As(err, &se) {
		switch {
		case rocketmqv2.Code(se.Code) == rocketmqv2.Code_UNAUTHORIZED:
			return true, false
		case rmqNoWritableQueue(se.Code, se.Message):
			return false, false
		case rocketmqv2.Code(se.Code) == rocketmqv2.Code_FORBIDDEN:
			return true, true
		}
		return false, false
	}
	s, isStatus := status.FromError(err)
	if !isStatus {
		return false, false
	}
	switch s.Code() {
	case codes.Unauthenticated:
		return true, false
	case codes.PermissionDenied:
		return true, true
	}
	return false, false
}

// authError is err as a *senderr.AuthError of the client's access key when it is
// a refusal by endpoint, else err.
func (c *rmqClient) authError(err error, endpoint string) error {
	var ae *senderr.AuthError
	if errors.As(err, &ae) {
		return err
	}
	ok, denied := authRefusal(err)
	if !ok {
		return err
	}
	return &senderr.AuthError{AccessKey: c.set.AccessKey, Endpoint: endpoint, Denied: denied, Err: err}
}

// refused is o with its error made a *senderr.AuthError when it is a refusal by
// endpoint.
func (c *rmqClient) refused(o outcome.Outcome, endpoint string) outcome.Outcome {
	o.Err = c.authError(o.Err, endpoint)
	return o
}

// refusal is the refusal that ended an access point's telemetry stream,
// as a *senderr.AuthError; nil when none did.
func (c *rmqClient) refusal() error {
	for _, cn := range c.connList() {
		if err := cn.tel.err(); err != nil {
			if ok, _ := authRefusal(err); ok {
				return c.authError(err, cn.addr)
			}
		}
	}
	return nil
}

// sendErr is the error of a stream whose Send failed with err: gRPC's
// Send says io.EOF when the server has ended the stream, whose status
// (a refusal, say) only Recv reads.
func sendErr(stream rocketmqv2.MessagingService_TelemetryClient, err error) error {
	if !errors.Is(err, io.EOF) {
		return err
	}
	if _, rerr := stream.Recv(); rerr != nil && !errors.Is(rerr, io.EOF) {
		return rerr
	}
	return err
}
