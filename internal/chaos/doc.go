// Package chaos holds rocketry's reliability tests: a seeded chaos suite
// that attacks a producer with broker restarts, dropped connections,
// INTERNAL answers, answers that never come, latency spikes, throttling
// storms and a broker that is down, then checks from the brokers' stored
// logs, the callbacks and the dead-letter spool that nothing was lost or
// stored twice; a fuzz target for the broker's consumer requests; and a
// sustained load test. It has no API: everything is in its _test.go files.
//
// The short runs are part of `go test ./...`. Longer runs:
//
//	ROCKETRY_CHAOS_SEEDS=20 go test -race -run Chaos -v ./internal/chaos/
//	ROCKETRY_LOAD=3m go test -run Load -v -timeout 30m ./internal/chaos/
//
// RELIABILITY.md at the repository root says what is promised and how each
// promise is tested.
package chaos
