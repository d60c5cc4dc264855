package broker

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"maps"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	rocketmqv2 "github.com/rocketry-go/rocketry/gen/rocketry/rocketmq/v2"
)

// The ACL of the apache.rocketmq.v2 face: with one set (WithACL, SetACL),
// every call must be signed, as a RocketMQ 5 proxy with authentication
// on wants it, and the official clients and rocketry sign it: the
// authorization header "MQv2-HMAC-SHA1 Credential=<access key>,
// SignedHeaders=x-mq-date-time, Signature=<hex of the HMAC-SHA1 of the
// x-mq-date-time header keyed by the secret key>". It is checked as the
// proxy checks it, with the proxy's words for each refusal: the header and
// the date-time present, the header parsed
// (auth/src/main/java/org/apache/rocketmq/auth/authentication/builder/DefaultAuthenticationContextBuilder.java),
// the access key known and the signature the expected one
// (auth/src/main/java/org/apache/rocketmq/auth/authentication/chain/DefaultAuthenticationHandler.java).
//
// A refusal is answered as the proxy answers an AuthenticationException:
// the response of the call with the body status 40100 UNAUTHORIZED and the
// refusal's text, the gRPC call itself OK
// (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/common/ResponseBuilder.java,
// buildStatus). Every call is checked, unary ones and each command of a
// Telemetry stream; a refused Telemetry command is answered by a command
// carrying that status alone, and the stream is completed
// (proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/GrpcMessagingApplication.java,
// telemetry, and proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/common/ResponseWriter.java).
// The broker has no permissions (no AuthorizationException): a known
// access key may do everything. rocketry.v1 is never checked.

// acl is the broker's ACL, nil when it is off.
type acl struct {
	mu      sync.Mutex
	keys    map[string]string // access key -> secret key; nil: off
	refused map[string]int64  // refused calls by method name
}

// WithACL turns authentication on for the apache.rocketmq.v2 face: every
// call must be signed with one of keys (access key -> secret key), as a
// RocketMQ 5 proxy with authentication on wants it; one that is not
// (no signature, an unknown access key, a wrong signature) is refused with
// 40100 UNAUTHORIZED. nil (the default) turns it off; an empty map refuses
// every call. The map is copied. SetACL changes it while the broker runs.
func WithACL(keys map[string]string) Option {
	return optionFunc(func(c *config) error {
		for ak := range keys {
			if ak == "" {
				return errorf("WithACL: an access key is empty")
			}
		}
		c.acl = maps.Clone(keys)
		return nil
	})
}

// SetACL replaces the ACL while the broker runs, as WithACL sets it: the
// next call is checked against keys (a revoked or changed key is refused
// from then on); nil turns authentication off. The map is copied.
func (b *Broker) SetACL(keys map[string]string) {
	b.acl.mu.Lock()
	defer b.acl.mu.Unlock()
	b.acl.keys = maps.Clone(keys)
}

// AuthRefused is the number of apache.rocketmq.v2 calls the ACL refused
// since the broker was made: of the method named (its gRPC method name,
// such as "Telemetry" or "SendMessage"; a Telemetry stream counts each
// refused command), or of every method when method is "".
func (b *Broker) AuthRefused(method string) int64 {
	b.acl.mu.Lock()
	defer b.acl.mu.Unlock()
	if method != "" {
		return b.acl.refused[method]
	}
	var n int64
	for _, c := range b.acl.refused {
		n += c
	}
	return n
}

// authRefusal checks the signature of a call of method (its gRPC method
// name) whose incoming metadata is ctx's: nil when the ACL is off or the
// call is signed with a known key, else the 40100 status to answer.
func (b *Broker) authRefusal(ctx context.Context, method string) *rocketmqv2.Status {
	b.acl.mu.Lock()
	keys := b.acl.keys
	b.acl.mu.Unlock()
	if keys == nil {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	ak, msg := checkSignature(keys, first(md, "authorization"), first(md, "x-mq-date-time"))
	if msg == "" {
		return nil
	}
	b.acl.mu.Lock()
	if b.acl.refused == nil {
		b.acl.refused = map[string]int64{}
	}
	b.acl.refused[method]++
	b.acl.mu.Unlock()
	b.log.Info("broker: call refused by the ACL", "method", method, "access_key", ak, "reason", msg)
	return v2Status(rocketmqv2.Code_UNAUTHORIZED, msg)
}

// first is md's first value of key, or "".
func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// checkSignature reads the authorization header of a call signed at
// dateTime: the access key it names, and "" when its signature is the
// HMAC-SHA1 of dateTime keyed by that key's secret in keys, else the
// proxy's words for what is wrong.
func checkSignature(keys map[string]string, authorization, dateTime string) (accessKey, refusal string) {
	if authorization == "" {
		return "", "authentication header is null"
	}
	if dateTime == "" {
		return "", "datetime is null"
	}
	_, params, ok := strings.Cut(authorization, " ")
	if !ok {
		return "", "authentication header is incorrect"
	}
	var sig string
	for kv := range strings.SplitSeq(params, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return "", "authentication keyValues length is incorrect, actual length=1"
		}
		switch k {
		case "Credential":
			accessKey, _, _ = strings.Cut(v, "/")
		case "Signature":
			sig = v
		}
	}
	if accessKey == "" {
		return "", "username cannot be null."
	}
	secret, known := keys[accessKey]
	if !known {
		return accessKey, "User:" + accessKey + " is not found."
	}
	got, err := hex.DecodeString(sig)
	if err != nil {
		return accessKey, "create authentication context error."
	}
	h := hmac.New(sha1.New, []byte(secret))
	h.Write([]byte(dateTime))
	if !hmac.Equal(h.Sum(nil), got) {
		return accessKey, "check signature failed."
	}
	return accessKey, ""
}

// rocketmqMethodPrefix is the path prefix of the apache.rocketmq.v2 face's
// methods.
const rocketmqMethodPrefix = "/apache.rocketmq.v2.MessagingService/"

// aclUnary refuses an apache.rocketmq.v2 unary call that the ACL does not
// let through, answering the method's response with the refusal's status
// (every response of the service has a status field), without running the
// handler.
func (b *Broker) aclUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method, ok := strings.CutPrefix(info.FullMethod, rocketmqMethodPrefix)
	if !ok {
		return handler(ctx, req)
	}
	st := b.authRefusal(ctx, method)
	if st == nil {
		return handler(ctx, req)
	}
	return statusResponse(method, st), nil
}

// statusResponse is the response of method carrying st alone.
func statusResponse(method string, st *rocketmqv2.Status) any {
	m := rocketmqv2.File_rocketry_rocketmq_v2_service_proto.Services().ByName("MessagingService").
		Methods().ByName(protoreflect.Name(method))
	if m == nil { // not a method of the service: gRPC answers UNIMPLEMENTED before
		return &rocketmqv2.Status{}
	}
	var resp protoreflect.Message
	if mt, err := protoregistry.GlobalTypes.FindMessageByName(m.Output().FullName()); err == nil {
		resp = mt.New()
	} else {
		resp = dynamicpb.NewMessage(m.Output())
	}
	if f := m.Output().Fields().ByName("status"); f != nil {
		resp.Set(f, protoreflect.ValueOfMessage(st.ProtoReflect()))
	}
	return resp.Interface()
}
