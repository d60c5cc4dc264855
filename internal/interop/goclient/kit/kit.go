// Package kit holds what the official Go client's programs share: its log
// on stderr, its version, how an error it returned is described in their
// JSON summaries, and the interceptor that reads the answers the client
// does not return (acks.go).
package kit

import (
	"errors"
	"os"
	"runtime/debug"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"google.golang.org/grpc/status"
)

// clientModule is the official client's module path.
const ClientModule = "github.com/apache/rocketmq-clients/golang/v5"

// LogToStderr points the client's logger, which writes to
// $user.home/logs/rocketmqlogs by default, at stderr: its console appender
// writes to os.Stdout as it is when the logger is made, so stdout is
// stderr for that moment. Warnings (each failed attempt) and errors only,
// unless verbose.
func LogToStderr(verbose bool) {
	level := "warn"
	if verbose {
		level = "info"
	}
	os.Setenv(rmq.ENABLE_CONSOLE_APPENDER, "true")
	os.Setenv(rmq.CLIENT_LOG_LEVEL, level)
	stdout := os.Stdout
	os.Stdout = os.Stderr
	rmq.ResetLogger()
	os.Stdout = stdout
}

// ClientVersion is the client module's version this program was built
// with.
func ClientVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == ClientModule {
				return d.Version
			}
		}
	}
	return "unknown"
}

// ClientError is an error the client returned: a RocketMQ status it raised
// (Code, from *ErrRpcStatus), a gRPC error (GRPCCode) or another error.
type ClientError struct {
	Name     string `json:"name"`
	Code     int    `json:"code,omitempty"`
	GRPCCode *int   `json:"grpcCode,omitempty"`
	Message  string `json:"message"`
}

// Describe is err as the programs report it.
func Describe(err error) *ClientError {
	var rs *rmq.ErrRpcStatus
	if errors.As(err, &rs) {
		return &ClientError{Name: "ErrRpcStatus", Code: int(rs.Code), Message: rs.Message}
	}
	if st, ok := status.FromError(err); ok && st.Code() != 0 {
		c := int(st.Code())
		return &ClientError{Name: "grpc", GRPCCode: &c, Message: st.Message()}
	}
	return &ClientError{Name: "Error", Message: err.Error()}
}
