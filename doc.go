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
// The generated wire contracts live in gen/; regenerate them from the
// repository root with
//
//	go generate .
//
// which also generates the dead-letter store's on-disk record
// (proto/rocketry/deadletter) into internal/deadletterpb, out of the API.
//
// # RocketMQ 5 protocol
//
// gen/rocketry/rocketmq/v2 (Go package rocketmqv2) holds the part of the
// RocketMQ 5 gRPC protocol, apache.rocketmq.v2.MessagingService, that the
// producer speaks to a RocketMQ proxy and the test broker serves. Its .proto
// files in proto/rocketry/rocketmq/v2 are rocketry's own: every message and
// enum name, field number and enum value is upstream's, since that is the
// wire contract, but the proto package is rocketry.rocketmq.v2, so that a
// program links it beside the official RocketMQ Go client
// (github.com/apache/rocketmq-clients/golang/v5, which registers
// apache.rocketmq.v2 in the protobuf global registry) with no conflict. The
// wire carries no message names; the gRPC method paths, which are names,
// stay upstream's: go generate sets them after buf generate (the second
// line below), and a test checks them against the official client's.
package rocketry

//go:generate go tool -modfile=tools/go.mod buf generate
//go:generate go run ./internal/cmd/grpcservicename -from rocketry.rocketmq.v2.MessagingService -to apache.rocketmq.v2.MessagingService gen/rocketry/rocketmq/v2/service_grpc.pb.go
//go:generate go tool -modfile=tools/go.mod buf generate --template buf.gen.deadletter.yaml
