// Package producer sends messages to a rocketry broker over gRPC and keeps
// them safe through the broker's bad days: crashes, restarts, slow answers
// and throttling.
//
// # Sending
//
// [New] dials one broker, several ("h1:p1,h2:p2"), or a gRPC resolver
// target; [NewFromConn] uses a connection you own. [Producer.Send] blocks
// until the message is stored or the send fails for good;
// [Producer.SendAsync] returns at once and runs a callback exactly once
// later, with at most MaxInFlight sends in flight ([WithMaxInFlight]);
// [Producer.TrySendAsync] never waits for room. [Producer.Close] stops
// accepting sends and waits for the ones in flight.
//
// # The retry contract
//
// One function decides what follows each attempt, from its error:
//
//   - stored: done;
//   - 530 TOO_MANY_REQUESTS (RESOURCE_EXHAUSTED): retry after the throttle
//     schedule's delay, by default the gRPC connection backoff (1 s, x1.6,
//     +/-20%, at most 120 s), counted from the start of the throttled
//     attempt; the next attempt is given at least the schedule's
//     MinConnectTimeout. A broker's google.rpc.RetryInfo may lengthen the
//     wait, never shorten it;
//   - a failure (the attempt's own timeout, a lost connection, UNAVAILABLE,
//     INTERNAL): retry at once ([WithFailureSchedule] to change it). When
//     the message is known not stored (the request never left the client,
//     or the broker's 500/503 detail says so) the retry goes to the next
//     endpoint when there are several; after an unknown outcome it stays on
//     the same endpoint, which recognises the message ID, so no retry
//     stores a message twice ([WithFailoverOnUnknownOutcome] to change it).
//     A retry on the same endpoint waits for its connection within its
//     timeout (gRPC wait-for-ready), so it rides out a broker restart;
//   - a 4xx answer: never retried; neither is a transactional message
//     ([Message].Transactional) after a failure whose outcome is unknown;
//   - the caller's context ended: stop.
//
// [WithMaxAttempts] counts attempts, the first included (default 3: at most
// 2 retries). Retry n of the throttle schedule follows the n-th throttled
// attempt of a send, retry n of the failure schedule the n-th failed one.
// No wait ends after the caller's deadline: a send whose next wait would
// fails at once with [ErrDeadlineTooShort]. An optional retry budget
// ([WithRetryBudget], gRPC's retry throttling) keeps retries from
// multiplying the load of a broker in trouble. Every attempt of a send
// carries the same message ID, so the broker stores a message once.
//
// # Nothing lost
//
// A send that fails after its message was validated returns a [*SendError]
// (errors.Is tells why; errors.As gives the attempt count, the broker code
// and the last cause) and hands the message to the fallback ([WithFallback])
// or the dead-letter spool on disk ([WithSpool], replayed by [ReplaySpool]
// and `rocketry replay`). An invalid message ([ErrInvalidMessage]) is
// returned to the caller only: no attempt is made.
//
// # Any gRPC call
//
// [UnaryClientInterceptor] brings the same decisions and schedules, through
// the same code, to any unary call, with per-call options
// ([WithCallOptions]).
//
// # Watching
//
// [WithObserver] is called on every attempt, retry (with the delay chosen
// and why), throttle, exhaustion and dead letter; it costs nothing when
// unset. [WithLogger] takes a log/slog logger; retries log at debug level.
package producer
