// Package bench holds the contenders that rocketry is measured against and
// the measurements themselves: the fast-path Go benchmarks (bench_test.go),
// the throttling scenario, the scale run and the retry-timing run that
// `rocketry-bench` prints. BENCHMARKS.md at the repository root has the
// figures and the commands.
//
// Every contender sends to the bundled test broker on loopback in the same
// process, so allocation counts include the broker's own: only differences
// between contenders mean something.
//
// The contenders:
//
//   - raw: the generated MessagingServiceClient.SendMessage, no retry (the
//     floor);
//   - rocketry: producer.Producer.Send;
//   - interceptor: the raw client with producer.UnaryClientInterceptor;
//   - middleware: the raw client with go-grpc-middleware v2's retry
//     interceptor, as its documentation recommends (RESOURCE_EXHAUSTED and
//     UNAVAILABLE, WithMax(3) attempts, BackoffExponential(100 ms));
//   - serviceconfig: grpc-go's own retry, a service-config retryPolicy
//     (maxAttempts 3, initialBackoff 0.1 s, maxBackoff 1 s, multiplier 2,
//     UNAVAILABLE and RESOURCE_EXHAUSTED);
//   - naive-immediate and naive-sleep (scenario only): hand-written loops
//     that retry every error at once, or after a fixed sleep, until the
//     send's deadline.
//
// The hintless mode (hintless.go, `rocketry-bench --hintless`) is
// throttling without RetryInfo hints: a server in a child process
// (hintless_server.go) with a token bucket and no hint in its refusals, and
// rocketry, middleware, serviceconfig and raw, each allowed 5 attempts on
// its own unscaled schedule.
//
// The fleet mode (fleet.go, `rocketry-bench --fleet`) is many producer
// processes (fleet_producer.go) on one such server: their shares of its
// capacity, which can change during the run (fleet_figures.go), together
// and one against another (Jain's index, a newcomer's share).
//
// This package is internal: its API serves the benchmarks and the command,
// and may change at any time.
package bench
