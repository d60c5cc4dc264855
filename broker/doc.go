// Package broker is rocketry's bundled test broker: an in-memory message
// broker that serves the rocketry gRPC services (MessagingService for
// producers, ConsumerService for consumers and stats) and misbehaves on
// purpose, so that producers can be tested against a broker's bad days.
//
// # Storing
//
// A SendMessage request carries one or more messages of one topic. Each
// topic has several queues (WithQueues), each an in-memory log with offsets
// from 0; new messages go to the topic's queues in turn (round-robin, in
// arrival order). Storage is idempotent by message id: an id the broker
// remembers (WithDedupWindow) is not stored again, and its answer is the
// original queue and offset with duplicate set. A request is refused whole
// (validation, faults, throttling) or each of its messages is stored or
// answered as a duplicate.
//
// # Consuming
//
// A consumer group receives a topic's messages from its committed offsets
// (one per queue); a group is created at offset 0 of every queue on its
// first call, so a new group sees the whole log. ReceiveMessages with
// auto_commit commits past what it returns; CommitOffset and ResetOffset
// move a group's offsets, ResetOffset on every queue at once (capped at each
// queue's head), for example back to 0 to re-read history.
//
// # Throttling
//
// Refusals for load are 530 TOO_MANY_REQUESTS (gRPC RESOURCE_EXHAUSTED)
// with an ErrorDetail naming the reason and, where the broker can estimate
// it, a google.rpc.RetryInfo delay. See Throttle:
//
//   - BACKLOG: a topic's backlog is the largest number of stored but
//     uncommitted messages over its groups (0 for a topic without groups).
//     Above MaxBacklog, sends to the topic are refused until the backlog is
//     back at BacklogLowWater or under.
//   - STORAGE_LOAD: reading a message more than ColdReadDistance behind its
//     queue's head is a cold read; the rate of cold reads over
//     StorageLoadWindow is the storage load. Above MaxStorageLoad every send
//     is refused until the rate falls. A group reset to 0 on a long log
//     raises it; groups reading at the head do not.
//   - SEND_RATE: a token bucket of MaxSendRate messages per second.
//
// # Faults
//
// Faults (WithFaults, SetFaults) fail a share of sends with INTERNAL, add
// latency, answer nothing until the caller's deadline (blackhole), close the
// caller's connection (drop), or answer UNAVAILABLE. Restart and
// DropConnections act on the listener and the connections, keeping every
// stored message. Faults are drawn from one random source seeded by
// WithSeed, so they are the same for the same sequence of calls.
//
// # Errors
//
// Every error status carries a rocketry.v1.ErrorDetail with the broker code
// of the design (400, 404, 413, 500, 503, 530) and a message naming the
// problem and, for a bad message, its index in the request.
//
// Package brokertest starts a broker for a test, as httptest does.
package broker
