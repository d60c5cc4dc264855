// Package rocketry is a Go SDK for message producers that must survive a
// broker's bad days: crashes, restarts, slow answers and throttling.
//
// The packages:
//
//   - [github.com/rocketry-go/rocketry/producer]: the Producer (sync and async
//     sends) and a gRPC client interceptor with the same retry decisions.
//   - [github.com/rocketry-go/rocketry/producer/deadletter]: the durable
//     dead-letter store (bbolt) a Producer hands what it cannot send to, and
//     its replay.
//   - [github.com/rocketry-go/rocketry/brokercode]: the outcome codes and
//     throttle reasons the producer reports, whichever protocol answered.
//   - [github.com/rocketry-go/rocketry/backoff]: delay schedules: the gRPC
//     connection backoff and SNS-style delivery policies.
//   - [github.com/rocketry-go/rocketry/broker]: a test broker that stores,
//     serves consumers, throttles on backlog and storage load, and injects
//     faults on purpose.
//
// The generated wire contract lives in gen/rocketry/v1; regenerate it from the
// repository root with
//
//	go generate .
//
// which also generates the dead-letter store's on-disk record
// (proto/rocketry/deadletter) into internal/deadletterpb, out of the API.
//
// # RocketMQ 5 protocol
//
// gen/apache/rocketmq/v2 (Go package rocketmqv2) holds the part of the
// RocketMQ 5 gRPC protocol, apache.rocketmq.v2.MessagingService, that the
// producer speaks to a RocketMQ proxy. Its .proto files in
// proto/apache/rocketmq/v2 are rocketry's own, but every full name, field
// number and enum value is upstream's, since that is the wire contract.
//
// The official RocketMQ Go client (github.com/apache/rocketmq-clients/golang/v5)
// registers the same full names (and the same .proto file paths) in the
// protobuf global registry, so a binary that links both panics at start-up
// with a registration conflict. To link both, relax the conflict policy of
// google.golang.org/protobuf, either when running:
//
//	GOLANG_PROTOBUF_REGISTRATION_CONFLICT=warn ./yourprogram
//
// or when building:
//
//	go build -ldflags "-X google.golang.org/protobuf/reflect/protoregistry.conflictPolicy=warn"
//
// With "warn" the first registration wins and the later one is logged and
// ignored. Each package's generated code keeps marshalling its own types, but
// lookups by name in the global registry (protoregistry.GlobalTypes,
// anypb, gRPC server reflection) find only the first. Neither switch is
// covered by protobuf-go's compatibility promise.
package rocketry

//go:generate go tool -modfile=tools/go.mod buf generate
//go:generate go tool -modfile=tools/go.mod buf generate --template buf.gen.deadletter.yaml
