// Package backoff gives the delays between a producer's retries: pure math,
// with no gRPC import, each schedule taking its random source as an input
// so that tests are exact.
//
// Retries, not attempts, are numbered here: retry 1 is the second attempt,
// so a send with MaxAttempts n makes at most n-1 retries.
//
// # Schedules
//
// A [Schedule] answers one question: how long to wait before retry n,
// counted from the start of the attempt before it. [Immediate] and
// [Constant] are the simplest. Schedules may also implement [Phaser] (the
// phase of each retry), [Bounded] (how many retries there are) and
// [AttemptFloor] (the least time each attempt is given).
//
// # The gRPC connection backoff
//
// [NewConnection] builds the algorithm of gRPC's connection-backoff.md from
// a [Config]; [DefaultConfig] has gRPC's values (1 s, x1.6, +/-20% jitter,
// at most 120 s, at least 20 s per try). Retry 1 waits exactly BaseDelay;
// later retries wait min(BaseDelay*1.6^(n-1), MaxDelay), jittered. Any retry
// number is safe: retry 1,000,000 waits MaxDelay.
//
// # SNS delivery policies
//
// A [DeliveryPolicy] is an Amazon SNS delivery policy: NumRetries retries
// in four phases, immediate (no delay), pre-backoff (minDelayTarget),
// backoff (from minDelayTarget to maxDelayTarget along a
// [BackoffFunction]) and post-backoff (maxDelayTarget). Make one from
// SNS's JSON with [ParsePolicy], from Go with [NewDeliveryPolicy], or take
// SNS's own with [AWSManaged], [CustomerManaged] or [Preset]. Delays are
// jittered by [DefaultPolicyJitter] (+/-10%) unless the Rand is nil or
// [DeliveryPolicy.WithJitter] turns it off.
//
// # Seeing a schedule
//
// [Plan] lists a schedule's retries with their phases, delays and elapsed
// time; the command "rocketry schedule" prints and plots it. [Scale]
// shrinks a schedule's delays for demos and tests.
//
// # Errors
//
// Invalid configs and policies give a [*FieldError] naming the field (a
// Config field, or the policy's JSON path), its value and what is allowed;
// it wraps [ErrInvalidConfig] or [ErrInvalidPolicy].
package backoff
