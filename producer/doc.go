// Package producer sends messages to a broker over gRPC and keeps them safe
// through the broker's bad days: crashes, restarts, slow answers and
// throttling. It speaks RocketMQ 5 (apache.rocketmq.v2, to a RocketMQ 5
// proxy or a cloud RocketMQ service: [New]'s default) and rocketry.v1, the
// bundled test broker's own protocol ([WithProtocol]([RocketryV1]), and
// [NewFromConn]).
//
// # Sending
//
// [New] starts a RocketMQ 5 client on the proxy's access points
// ("proxy-a:8081;proxy-b:8081"); over rocketry.v1 it dials one endpoint,
// several ("h1:p1,h2:p2"), or a gRPC resolver target ("dns:///brokers:7777",
// [WithResolvers]), which it resolves into
// one connection per address, so that each broker behind the name keeps
// the rules below; [NewFromConn] uses a rocketry.v1 connection you own.
// [Producer.Send] blocks until the message is stored or the send fails for
// good; [Producer.SendAsync] returns at once and runs a callback exactly
// once later, on a producer worker, with at most MaxInFlight sends in
// flight ([WithMaxInFlight]), and batches first attempts ([WithBatching]);
// [Producer.TrySendAsync] never waits for room. [Producer.Close] stops
// accepting sends and waits for the ones in flight.
//
// Over RocketMQ 5, [Producer.BeginTransaction] starts a transaction whose
// messages ([Transaction.Send]) are half messages, kept from consumers
// until [Transaction.Commit] and dropped by [Transaction.Rollback]; the
// broker asks about a transaction left open, and [WithTransactionChecker]
// answers. A half message is retried only when known not stored, never
// after an unknown outcome: the [*TransactionError] then says that the
// broker's check resolves it. [Producer.Recall] removes a timed message
// before its delivery time, by its receipt's [SendReceipt].RecallHandle.
//
// # The retry contract
//
// One executor runs every send, and one function in it decides what
// follows each attempt from the attempt's [Outcome], which a [Classifier]
// reads from the answer of its protocol ([GRPCClassifier],
// [RocketMQClassifier]):
//
//   - [Stored]: done;
//   - [Throttled] (RocketMQ 5's 42900, rocketry.v1's 530,
//     RESOURCE_EXHAUSTED): retry after the throttle schedule's delay, by
//     default the gRPC connection backoff (1 s, x1.6, +/-20%, at most
//     120 s), counted from the start of the throttled attempt; the next
//     attempt is given until its next backoff ends, at least
//     MinConnectTimeout (20 s). A broker's google.rpc.RetryInfo may
//     lengthen the wait, never shorten it. A broker that throttles without
//     a hint is paced ([WithPacing]): its attempts wait their turn at the
//     rate it accepts;
//   - [FailedNotStored] (the request never left the client, or the broker
//     said it stored nothing): retry at once ([WithFailureSchedule] to
//     change it) on another broker. A broker that cannot be reached is
//     named: the cause is a [*ConnectError] ([ErrConnectionRefused],
//     [ErrUnknownHost], [ErrNotGRPC]); a retry to the same broker waits for
//     its connection only when a request reached it in the last 10 s (a
//     restart), so with one broker that was never reached the attempts are
//     spent at once ([WithWaitForReady] to change it);
//   - [FailedUnknown] (the attempt's timeout, a lost connection, a 5xx that
//     does not say): retry at once on the same broker, which may hold the
//     message ([WithFailoverOnUnknownOutcome] to change it); the retry
//     waits for its connection within its timeout (gRPC wait-for-ready);
//   - [Permanent] (4xx): never retried; neither is a transactional message
//     ([Message].Transactional) after a failure once its request left
//     (over RocketMQ 5, a half message after an unknown outcome only);
//   - the caller's context ended: stop.
//
// [WithMaxAttempts] counts attempts, the first included (default 3: at most
// 2 retries; a delivery policy of N retries makes it N+1). Retry n of the
// throttle schedule follows the n-th throttled attempt of a send, retry n
// of the failure schedule the n-th failed one. No wait ends after the
// caller's deadline: a send whose next wait would fails at once with
// [ErrDeadlineTooShort]. Each attempt's timeout is sent to the server as
// grpc-timeout. An optional retry budget ([WithRetryBudget], gRPC's retry
// throttling) keeps retries from multiplying the load of a broker in
// trouble. Every attempt of a send carries the same message ID, so a broker
// that stores by ID (the bundled one does; a real RocketMQ broker does not)
// stores a message once.
//
// # Nothing lost
//
// A send that fails after its message was validated returns a [*SendError]
// (errors.Is tells why; errors.As gives the attempt count, the last
// outcome, the broker code and the last cause) and hands the message to its
// [DeadLetterSink]: a fallback ([WithFallback]) or a durable store on disk
// ([WithDeadLetterSink] with package
// github.com/rocketry-go/rocketry/producer/deadletter, replayed by its
// Replay and `rocketry replay`). The [DeadLetter] names the endpoint where
// the message may be stored after an unknown outcome, and [Producer.Resend]
// sends it there and nowhere else, so a replay stores nothing twice. An invalid message
// ([ErrInvalidMessage]) is returned to the caller only: no attempt is made.
// An invalid option is an [*OptionError] naming it.
//
// # Any gRPC call
//
// [NewUnaryClientInterceptor] brings the same executor and decisions to
// any unary call, with per-call options ([WithCallOptions]); its default
// classifier reads apache.rocketmq.v2 body statuses and gRPC statuses, and
// [WithClassifier] teaches it another service.
//
// # Watching
//
// [WithObserver] is called on every attempt, retry (with the delay chosen
// and the outcome that caused it), throttle, exhaustion and dead letter; it
// costs nothing when unset. [WithHook] sets a [Hook], which also sees each
// send's start and end with its context and may add properties to the
// outgoing message: the OpenTelemetry adapter, the module
// github.com/rocketry-go/rocketry/otelrocketry, is one. [WithLogger] takes a
// log/slog logger; retries log at debug level.
package producer
