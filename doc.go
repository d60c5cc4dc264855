// Package rocketry is a Go SDK for message producers that must survive a
// broker's bad days: crashes, restarts, slow answers and throttling.
//
// The packages:
//
//   - [github.com/rocketry-go/rocketry/producer]: the Producer (sync and async
//     sends) and a gRPC client interceptor with the same retry decisions.
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
package rocketry

//go:generate go tool -modfile=tools/go.mod buf generate
