// Package senderr holds the errors of a send: the sentinel errors and the
// error types (SendError, ConnectError, StatusError, AuthError) that the
// producer's internal packages return and its public API gives, one value
// and one type on both sides, as franz-go's kerr is to kgo. A send's
// failure is one type: the executor makes the *SendError the producer
// returns.
//
// Package producer re-exports every name: producer.ErrClosed is
// senderr.ErrClosed (the same value, so errors.Is matches with either),
// producer.SendError is senderr.SendError, producer.ConnectError is
// senderr.ConnectError, and producer.RocketMQStatusError and
// producer.AuthError are StatusError and AuthError. A program needs to
// import this package only to name the errors without the producer.
//
// The package imports no package of the producer (SendError speaks the
// leaf packages brokercode and outcome).
package senderr
