// Package interop proves that rocketry's bundled broker serves the RocketMQ 5
// gRPC protocol (apache.rocketmq.v2) to code nobody here wrote: the official
// Apache RocketMQ Node.js client, npm package rocketmq-client-nodejs 1.0.8,
// pinned with its whole dependency tree in node/package-lock.json. It has no
// API. The tests run node/produce.js, which sends messages with the client's
// Producer and prints a JSON summary (each message's id, receipt or error,
// and every SendMessage attempt), against the bundled broker, and check the
// broker's store and its send observer (broker.WithSendObserver) against
// the summary:
//
//   - TestOfficialNodeProducer: 300 messages, 8 at a time, through backlog
//     throttling, 10% INTERNAL answers (nothing stored), 5% stored and then
//     answered INTERNAL (broker.Faults.StoredInternalRate, as a proxy whose
//     answer failed) and 2% dropped connections, on the broker's faithful
//     face, which stores a message sent again again, as the Apache proxy:
//     every message the client reports sent is stored, and more than once
//     only after unknown outcomes (no answer, or 50001), every other one is
//     reported failed, and is stored only after an unknown outcome; the
//     broker's copies (its own count) are no more than the unknown outcomes
//     the client met; the client's attempts match the broker's records. It
//     logs attempts per message, the codes retried and the gaps between
//     attempts.
//   - TestOfficialNodeProducerRetriesBadRequest: the client re-sends a
//     message the broker refuses as invalid (40007) until its attempts are
//     spent.
//   - TestOfficialNodeProducerFailsOverAndIsolates: with two brokers in the
//     route, a message that fails on one is re-sent to the other at once,
//     and the failing broker gets no send after its first failure.
//   - TestOfficialNodeSimpleConsumer runs node/consume.js: the client's
//     Producer sends FIFO groups (each group's messages one after another)
//     to a topic declared FIFO and timed messages to one declared DELAY,
//     and its SimpleConsumer reads them back, leaving the first delivery
//     of every seventh message unacknowledged. Every message is
//     acknowledged once, each group in send order and never delivered
//     before its predecessor was acknowledged, a message comes again only
//     after an unacknowledged delivery (attempt one higher), and no timed
//     message arrives before its delivery time.
//   - TestOfficialNodeTransactionsAndRecall runs node/tx.js: the client's
//     transactions (one message each, as the client allows) and recall. A
//     committed message reaches its SimpleConsumer, a rolled back one
//     never does; the two it leaves open are resolved by its checker (the
//     Producer's checker option), which the broker's check calls through
//     the Telemetry stream's RecoverOrphanedTransactionCommand, and the
//     client's EndTransaction (SOURCE_SERVER_CHECK) commits one and rolls
//     back the other; a timed message recalled with its receipt's
//     recallHandle (recallMessage, in 1.0.8) is never received while its
//     twin due at the same time is; a malformed handle is refused 50001.
//   - TestOfficialNodePushConsumer runs node/push.js: the client's
//     PushConsumer (QueryAssignment, then receives with auto_renew, no
//     invisible_duration, and the receive_batch_size and
//     long_polling_timeout of the broker's Settings, which it adopts: a
//     batch size of 0 without them) receives every message its Producer
//     sent, each once on its first attempt, and acknowledges them: the
//     group's backlog ends at 0 and nothing comes back while the script
//     lingers.
//   - TestNodeClientReadsBackoffSecondsAsMilliseconds pins the client's
//     backoff bug described under Retries.
//   - TestCompareUnderThrottling (with ROCKETRY_COMPARE=1) runs rocketry's
//     RocketMQ 5 producer and the Node.js client through the same
//     throttling and faults, each on a fresh broker, and prints attempts
//     per stored message, failures, losses and retry gaps (BENCHMARKS.md);
//     TestCompareUnderThrottlingTiny, always on, asserts nothing lost and
//     no more copies (the broker's count) than the unknown outcomes each
//     met, on a small run.
//   - TestFlowControlBench (with ROCKETRY_FLOWBENCH=1) runs rocketry, the
//     official Go client and the Node.js client, each against a fresh
//     broker process whose send queue refuses requests that waited over
//     200 ms ([TIMEOUT_CLEAN_QUEUE]), and prints stored per second against
//     the capacity, attempts per stored message, failures and p99
//     (BENCHMARKS.md).
//
// The official Go client, module github.com/apache/rocketmq-clients/golang/v5
// v5.1.2, runs the same way in a process of its own: it registers its own
// apache.rocketmq.v2 descriptors, which conflict with rocketry's in gen/,
// so goclient/ is a module of its own (goclient/go.mod and go.sum pin the
// client and its dependencies; the core go.mod does not name it), and the
// tests build its program goclient/cmd/produce once per run with `go
// build`, which fetches the module through the Go module proxy on a cold
// cache; a failed download or build fails the tests, nothing skips them.
// The program prints the same JSON summary as produce.js. The client only
// speaks TLS, so these tests serve the broker with brokertest.StartTLS:
//
//   - TestOfficialGoProducer is TestOfficialNodeProducer with the Go
//     client, the same broker and the same checks, plus the waits the
//     client states before re-sending a throttled message.
//   - TestOfficialGoProducerBackoff: the waits after 42900 follow the
//     broker's backoff, one step ahead (see Go client: retries).
//   - TestOfficialGoProducerWrapsLongBackoff pins the client's backoff
//     bug: a wait above 4.29 s wraps around.
//   - TestOfficialGoProducerRetriesBadRequest: the client re-sends a
//     message refused 40007 until its attempts are spent, as the Node.js
//     client does.
//   - TestOfficialGoProducerDoesNotFailOver: with two brokers in the route,
//     a message whose queue is on a failing broker spends every attempt
//     there.
//   - TestOfficialGoTransactions runs goclient/cmd/tx, node/tx.js's
//     transactions with the Go client (no recall: see Go client:
//     transactions): a committed message reaches its SimpleConsumer, a
//     rolled back one never does, and the two left open are resolved by its
//     TransactionChecker as it answered (COMMIT received, ROLLBACK never),
//     through EndTransaction calls that carry no source; one transaction
//     takes two messages, not one, and refuses a third.
//
// Run them with:
//
//	go test -v ./internal/interop/
//
// The Node.js tests skip only when node or npm is not on PATH. They install the
// client with `npm ci` into a directory under the user cache directory named
// after the hash of node/package.json and node/package-lock.json, so only
// the first run downloads anything; a failing npm ci fails the test.
//
// What follows (Transport to Shutdown) is what the Node.js client does and
// expects, read from its source (src/ of the package the lock file
// installs; dist/ is the same code compiled) and checked against the broker
// by these tests. It is what a broker must answer, field by field, for this
// client to work. The sections named "Go client" are the same for the Go
// client, read from its module's source (file names below are its).
//
// # Transport
//
// Plain gRPC over HTTP/2 (TLS only with sslEnabled), service
// apache.rocketmq.v2.MessagingService. Every call carries the metadata
// x-mq-protocol: v2, x-mq-client-id (host@pid@n@time), x-mq-date-time,
// x-mq-request-id (a UUID), x-mq-language: HTTP (not NODE_JS: the client
// says so to avoid a Java proxy bug) and x-mq-client-version: 1.0.8;
// x-mq-namespace only when a namespace is set, authorization only with
// sessionCredentials. Each unary call has a deadline of the client's
// requestTimeout, 3 s by default. The client opens one channel per Endpoints
// object, so the access point and the route's broker address get a channel
// each even when they are the same address.
//
// # Startup
//
// new Producer({endpoints: "127.0.0.1:PORT", namespace: "", topic, maxAttempts})
// then startup():
//
//  1. QueryRoute for each topic given to the constructor, to the access
//     point: QueryRouteRequest{topic: {name}, endpoints: {scheme: IPv4 for a
//     dotted-quad host, else DOMAIN_NAME, addresses: [{host, port}]}}; the
//     topic's resource_namespace is left empty even with a namespace. Up to
//     3 attempts, 1 s and then 2 s apart. The answer's status must be OK
//     (20000) (30000 and 40401 pass the client's check too; other codes
//     fail the attempt). Of its message_queues the
//     producer keeps only those with id == 0 (it compares the queue id, not
//     the broker id, with its MASTER_BROKER_ID of 0) and permission WRITE (3)
//     or READ_WRITE (4). At least one must be left, or every send fails at
//     once, without a retry, with "RangeError: The value of "max" is out of
//     range" (randomInt(0)). For each kept queue the client dials
//     broker.endpoints as host:port of each address joined by commas, so
//     broker.endpoints must hold exactly one address whose host the client
//     can dial as written (an IPv4 literal or a name; an IPv6 literal breaks
//     it); scheme is not used for dialling, so IPv4 and DOMAIN_NAME both
//     work. Queues are grouped by broker.name; broker.id is not used.
//     accept_message_types must contain NORMAL (1) while message types are
//     validated (the default), or every send fails with a TypeError, not
//     retried.
//  2. For each broker address new to it, the client opens one Telemetry
//     stream to that address (the route's, not the access point) and
//     writes TelemetryCommand{settings: {client_type: PRODUCER (1),
//     access_point, request_timeout: 3s, publishing: {topics: [{name}],
//     validate_message_type: true, max_body_size: 0}, user_agent: {language:
//     NODE_JS (8), version: "1.0.8", platform, hostname}}}. It sends no
//     backoff_policy, and its max_body_size of 0 is not a limit.
//  3. startup() then waits, with no timeout of its own, for the first
//     TelemetryCommand from the broker whose settings field is set. From
//     those Settings it takes, when pub_sub is publishing:
//     backoff_policy.exponential_backoff (required: a Settings with
//     publishing but without backoff_policy throws an uncaught TypeError in
//     the stream's data handler and kills the Node process; a
//     customized_backoff fails an assertion the same way),
//     publishing.max_body_size (adopted as is: 0 makes every send fail
//     with "Message body size exceeds the threshold" before it reaches the
//     wire) and publishing.validate_message_type. Settings without
//     publishing are ignored, but still end the wait. A command's status is
//     ignored when settings is set; a command with no field but a non-OK
//     status fails startup. If the broker ends or breaks the stream, the
//     client opens a new one after 1 s and writes its Settings again.
//
// A producer given no topic skips steps 1 and 3: its first send queries the
// route and writes Settings without waiting for the answer. Afterwards the
// client sends Heartbeat{client_type: PRODUCER} to every route address every
// 10 s (the answer is not checked), queries routes again every 30 s and
// writes its Settings again every 5 minutes.
//
// # Sending
//
// Producer.send sends one message per SendMessage request: 1.0.8 has no
// batch API. The message is {topic: {name, resource_namespace}, body,
// user_properties, system_properties: {message_id, keys, tag,
// born_timestamp, born_host, body_encoding: IDENTITY, queue_id: the chosen
// queue's id (always 0, see above), message_type: NORMAL}}. The message id
// is 34 upper-case hex digits: version 01, 6 bytes of a MAC address, the
// low 2 bytes of the pid, 4 bytes of seconds since 2021-01-01 UTC and a
// 4-byte sequence number. It is made once per send() and is the same on
// every attempt, so a broker that deduplicates by message id stores a
// re-sent message once; a RocketMQ broker, and the bundled broker's
// faithful face, store it again.
//
// The client checks the answer's first entry whose status is not OK, or the
// top-level status when every entry is OK. OK (20000) and MULTIPLE_RESULTS
// (30000) pass, so a top-level 30000 with OK entries is a success; one bad
// entry fails the whole request, and the retry re-sends every message of
// it, stored or not (with one message per request that is that message).
// Each entry becomes a receipt {message_id, transaction_id, recall_handle,
// offset}: the broker must answer one entry per message and echo the
// message id, or send() resolves to undefined (OK without entries) or to a
// receipt with another id.
//
// # Retries
//
// A send has maxAttempts attempts (the constructor's, 3 by default; the
// max_attempts of the broker's backoff_policy is ignored). Every failure is
// retried while attempts are left, except for transactional messages: gRPC
// errors (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ...) and every
// status but 20000, 30000 and 40401, including 4xxxx answers such as 40000
// BAD_REQUEST, 40402 TOPIC_NOT_FOUND and 41301 MESSAGE_BODY_TOO_LARGE that
// cannot succeed later. Only a 42900 TOO_MANY_REQUESTS status waits before the next
// attempt; everything else, including a gRPC RESOURCE_EXHAUSTED error, is
// re-sent at once. The wait before attempt n (n >= 2) is
//
//	min(initial.seconds * multiplier^(n-1), max.seconds) milliseconds
//
// from the broker's exponential_backoff: the client keeps whole seconds of
// the Durations (nanos are dropped) and hands the number to setTimeout,
// which counts milliseconds. A backoff of initial 10 ms, max 1 s gives no
// wait at all; initial 1 s, max 5 s, multiplier 2 gives 2 ms and then 4 ms.
// Before the first Settings the wait is 0. After a failure the client
// isolates the address for good (1.0.8's producer never lifts it) and later
// sends prefer addresses not isolated; within one send the candidate queues
// are picked once, one per broker name, and attempt n goes to candidate
// (n-1) mod count. With one broker every attempt goes to queue 0 at the
// same address. The last attempt's error is what send() rejects with.
//
// # Consuming
//
// SimpleConsumer.receive(n, invisibleMs) sends one ReceiveMessage per call,
// for its topics in turn, with batch_size n, invisible_duration, auto_renew
// false and long_polling_timeout its awaitDuration (30 s by default), under
// a deadline of requestTimeout plus awaitDuration: with the proxy's least
// long polling time of 5 s, an awaitDuration of 2 s or less is answered 40000
// BAD_REQUEST (the proxy's 40018 ILLEGAL_POLLING_TIME goes only to clients
// of version "5.0.3" or later, and this one sends "1.0.8"). It reads the whole stream, takes the last status
// (40401 MESSAGE_NOT_FOUND is an empty answer, not an error) and the
// messages, and needs every message's system_properties.body_digest: a
// message without one throws a TypeError in MessageView. Its queue choice
// keeps only the route's queues whose id is 0 (it compares the queue id
// with the master broker id), so it names queue 0 of each broker; a
// broker must serve every queue of the topic, as the proxy's pop does.
// ack(message) and changeInvisibleDuration(message, ms) send the receipt
// handle of the message's last delivery.
//
// The official Go client's SimpleConsumer works against the broker too
// (TestOfficialGoSimpleConsumer; see "Go client: SimpleConsumer").
//
// # Shutdown
//
// shutdown() sends NotifyClientTerminationRequest{} to every route address
// and then ends the Telemetry streams and closes the channels. An error from
// NotifyClientTermination (UNIMPLEMENTED, say) rejects shutdown() before the
// streams and channels are closed, and the process stays alive; produce.js
// reports it and exits anyway.
//
// # Go client: transport
//
// gRPC over HTTP/2, always with TLS: the connection options hold a
// tls.Config with InsecureSkipVerify that no producer option changes
// (conn_options.go), so the client dials only a broker that serves TLS and
// verifies no certificate. Each connection is dialled with grpc.WithBlock
// and a 5 s dial timeout, one per address. Every call carries
// x-mq-language: GO, x-mq-protocol: v2, x-mq-client-version: 5.0.1-rc1
// (metadata/metadata.go; not the module's version), x-mq-client-id,
// x-mq-request-id, x-mq-date-time, x-mq-namespace (empty when none is set)
// and always an authorization header (MQv2-HMAC-SHA1, signed with an empty
// secret without credentials). Each unary call has a deadline of 3 s, the
// client's default timeout, for which NewProducer takes no option. A call failing UNAVAILABLE closes its
// connection (client_manager.go, handleGrpcError), so every other call in
// flight on it fails CANCELED and loses its answer too: a broker that drops
// one connection loses the answers of all the sends sharing it. The client
// logs every gRPC call to /tmp/rocketmq-logger.log, and its own log to
// logs/rocketmqlogs/rocketmq_client_go.log under the environment variable
// "user.home" (usually unset: under /) unless rocketmq.client.logRoot or
// mq.consoleAppender.enabled=true (stdout) is set; goclient/cmd/produce
// silences the first and sends the second to stderr.
//
// # Go client: startup
//
// NewProducer(&Config{Endpoint: "host:port", Credentials: ...},
// WithTopics(topic), WithMaxAttempts(n)) then Start(): for each topic given,
// one QueryRoute to the access point (one attempt, whose status must be OK
// and whose message_queues must not be empty, or Start fails), then for
// each address of the route's brokers a Telemetry stream carrying the
// client's Settings{client_type: PRODUCER, access_point, request_timeout:
// 3s, publishing: {topics}, backoff_policy: {max_attempts: n,
// exponential_backoff: {0, 0, 1}}, user_agent: {language: GOLANG, version:
// 5.0.1-rc1}}. Start does not wait for the broker's Settings:
// goclient/cmd/produce waits for them itself (--await-settings) so that
// every send sees the broker's backoff; before they come the client's
// backoff is 0 and its body limit 4 MiB. From the broker's Settings, when
// they are for publishing, it takes exponential_backoff as full durations
// (a customized_backoff is ignored, the previous one kept), max_body_size
// as is (0 fails every send that has a body before it reaches the wire)
// and validate_message_type; the broker's max_attempts is ignored. Every
// queue of the route is a candidate, whatever its id or permission; with
// validate_message_type, the chosen queue's accept_message_types must hold
// NORMAL, or the send fails at once without a retry. The client dials the
// broker's endpoints (one address, picked at random when there are
// several; ';' separates access points). If a Telemetry stream breaks, the
// client waits 5 s and reads it again, drops it when that fails too, and
// opens a new one only when it sends its Settings again (every 5 minutes,
// or after a heartbeat answered UNRECOGNIZED_CLIENT_TYPE). It sends Heartbeat{client_type: PRODUCER} to
// every route address 1 s after Start and then every 10 s, and queries
// its routes again every 30 s.
//
// # Go client: sending
//
// Send(ctx, msg) sends one message per SendMessage request; 5.1.2 has no
// batch send. The message carries a message id of the Node.js client's
// layout (version 01, 6 bytes of a MAC address, the pid's low 2 bytes,
// seconds since 2021 and a sequence number), made once per Send and the
// same on every attempt, keys, tag, born_timestamp, born_host,
// message_type NORMAL, and no queue_id: the queue chosen only picks the
// broker. The client reads only the answer's top-level status: 20000 is a
// success whatever the entries say (an entry's error is not seen), and
// anything else, 30000 MULTIPLE_RESULTS included, fails the attempt. Each
// entry becomes a receipt {message_id, transaction_id, offset}; an answer
// with no entry is a success with no receipt.
//
// # Go client: retries
//
// A Send has WithMaxAttempts attempts (3 by default). Every failure is
// retried while attempts are left, except for transactional messages:
// gRPC errors and every status but 20000, 4xxxx answers that cannot
// succeed later included; 50001 is re-sent at once. Only a 42900
// TOO_MANY_REQUESTS status waits before the next attempt (producer.go,
// send1), for
//
//	min(initial * multiplier^(n-1), max)
//
// before attempt n (n >= 2), from the broker's exponential_backoff: one
// step ahead of the policy's meaning, so the proxy's default of 10 ms, x2,
// 1 s gives 20 ms and then 40 ms. The wait is a time.Sleep that ignores the
// context, and it is held in a uint32 of nanoseconds, so a wait above
// 4.29 s wraps around on amd64 (6 s becomes 1.705 s). Every attempt of a
// Send goes to the same queue, so the same broker: the load balancer
// (loadBalancer.go, TakeMessageQueues) reads the same queue on every turn
// of its loop and returns one candidate. Sends take the route's queues in
// turn, over every broker. After any failure the broker's addresses are
// isolated until a heartbeat to them succeeds (10 s at most), but an
// isolated broker is still taken when no other candidate was found, which
// with one candidate is always: isolation steers no send away. The last
// attempt's error is what Send returns (*ErrRpcStatus for a status).
//
// # Go client: shutdown
//
// GracefulStop() stops the route refresh and leaves the client manager (no
// more heartbeats), but sends no NotifyClientTermination (client.go,
// notifyClientTermination, calls it only when an address fails to parse)
// and closes neither the Telemetry streams nor the connections: they live
// until the process exits, which goclient/cmd/produce and cmd/consume do
// at once.
//
// # Go client: FIFO and timed messages
//
// A Message with SetMessageGroup is sent as message_type FIFO with its
// message_group, one that has SetDelayTimestamp as DELAY with its
// delivery_timestamp (publishing_message.go, NewPublishingMessage; with
// both, FIFO, the delivery timestamp sent along). A FIFO message's queue is the group's SipHash over the
// route's queues (loadBalancer.go, TakeMessageQueueByMessageGroup), every
// attempt to it; since the request carries no queue_id, that choice only
// picks the broker, and the broker puts the message on the group's queue
// of its own. With validate_message_type the chosen queue's
// accept_message_types must hold the message's type: a topic declared
// FIFO or DELAY (`rocketry broker --topic NAME=FIFO`) is routed with that
// type. Each group is sent in order only as far as its sender waits for
// each Send before the next: 5.1.2 has no batch send, and its SendAsync
// sends each message on a goroutine of its own (producer.go, SendAsync), so
// two SendAsync calls of one group may be stored in either order.
//
// # Go client: SimpleConsumer
//
// TestOfficialGoSimpleConsumer runs goclient/cmd/consume: the Producer
// sends 4 groups of 20 FIFO messages and 5 timed ones, the SimpleConsumer
// reads them back from a FIFO and a DELAY topic, leaving some first
// deliveries unacknowledged and renewing some invisible times before the
// Ack, and each group comes back in send order, nothing missing or
// doubled, no timed message before its time. As the client reads the
// broker:
//
// NewSimpleConsumer(&Config{Endpoint, ConsumerGroup, Credentials},
// WithAwaitDuration(d), WithSubscriptionExpressions(topic -> filter)) then
// Start(): QueryRoute for each subscribed topic and a Telemetry stream with
// Settings{client_type: SIMPLE_CONSUMER, subscription: {group,
// subscriptions, long_polling_timeout: d}}; Heartbeat carries the group.
//
// Receive(ctx, n, invisible) sends one ReceiveMessage for one subscribed
// topic, taken at random: the topics are a map's keys, read in Go's
// random order on each call (simple_consumer.go, Receive), so one topic
// may be polled several times in a row while another has messages; and
// for the route's queues in turn, whatever their id (loadBalancer.go,
// subscriptionLoadBalancer.TakeMessageQueue), which the broker, reading
// every queue as the proxy's pop does, ignores. The request has
// batch_size n, invisible_duration, auto_renew false and no
// long_polling_timeout (wrapReceiveMessageRequest), under a deadline of d
// plus 3 s, so the proxy polls for that time less half the client's
// request_timeout: d + 1.5 s. With the proxy's least polling time of 5 s
// (the broker's default too), a d under 2 s, the default of 0 included,
// gets 40000 BAD_REQUEST on every Receive (the proxy's 40018
// ILLEGAL_POLLING_TIME goes only to clients of version "5.0.3" or later,
// and this one sends "5.0.1-rc1"; the client's copy of apache.rocketmq.v2
// has no ILLEGAL_POLLING_TIME, and ErrRpcStatus.Error (error.go) would
// write that code as the character U+9C52). An answer of 40401
// MESSAGE_NOT_FOUND comes back as an *ErrRpcStatus error, not an empty
// list. Any error that ends the stream before its end (UNIMPLEMENTED from
// a broker with no consumer face, say) becomes the error text
// "[error] CODE=DEADLINE_EXCEEDED" once the stream is cancelled
// (simple_consumer.go, receiveMessage); the real cause is only in its log.
//
// Ack(ctx, view) sends the view's receipt handle and returns nil whatever
// status the broker answers (simple_consumer.go, Ack, reads it only for its
// metrics): an expired or stale handle (40013 INVALID_RECEIPT_HANDLE) goes
// unseen, and the message comes back after its invisible time.
// goclient/cmd/consume reads each AckMessage answer with an interceptor
// instead. ChangeInvisibleDuration(view, d) returns a non-OK status as an
// error and puts the answer's receipt handle in the view, the one a later
// Ack sends; after a refusal that is the answer's empty handle
// (changeInvisibleDuration), so the view can no longer be acknowledged.
//
// # Go client: transactions
//
// TestOfficialGoTransactions shows commit, rollback and the check working
// with the bundled broker; what 5.1.2 does on the way, from its source:
//
// BeginTransaction() makes a transaction value; SendWithTransaction(ctx,
// msg, tx) sends msg as message_type TRANSACTION (publishing_message.go,
// NewPublishingMessage, which refuses one with a message group or a
// delivery timestamp), one message per SendMessage, so the broker gives
// each message a transaction id of its own. The queue chosen must accept
// TRANSACTION (validate_message_type is on until the broker's Settings say
// otherwise), so the test declares its topic TRANSACTION. The transaction
// is meant to hold one message, but transaction.go, tryAddMessage, refuses
// a message only when len(messages) > MAX_MESSAGE_NUM (1), so it takes
// two and refuses the third ("message in transaction has exceeded the
// threshold: 1"); the test sends three in one transaction and finds the
// two committed, each by its own EndTransaction. A half message is never re-sent after a failure of any kind, a
// 42900 throttle included (producer.go, send1: the "No need more attempts
// for transactional message" branch).
//
// Commit() and RollBack() (transaction.go) send one EndTransaction per
// message to the endpoints of its receipt, once, and return nil whatever
// happens: a failed EndTransaction is only logged, so the caller never
// learns that its commit did not land; the broker's check resolves it.
// goclient/cmd/tx reads each EndTransaction answer with an interceptor
// instead.
//
// The checker (WithTransactionChecker(&TransactionChecker{Check})) is
// called when a RecoverOrphanedTransactionCommand comes on a Telemetry
// stream (client.go, handleTelemetryCommand; producer.go,
// onRecoverOrphanedTransactionCommand): on a goroutine of its own, with the
// command's message as a MessageView, and its answer goes to the stream's
// endpoints as an EndTransaction whose error is only logged; UNKNOWN is
// sent as TRANSACTION_RESOLUTION_UNSPECIFIED, which the broker answers OK
// and leaves the transaction open for the next check. A producer without a
// checker logs the command and ignores it.
//
// Every EndTransaction the client sends, the checker's included, has
// topic, message_id, transaction_id and resolution but no source
// (producer.go, endTransaction): SOURCE_UNSPECIFIED, never
// SOURCE_SERVER_CHECK. The broker applies it all the same, and so would
// the real one: the proxy passes fromTransactionCheck = (source ==
// SOURCE_SERVER_CHECK) on (apache/rocketmq,
// proxy/src/main/java/org/apache/rocketmq/proxy/grpc/v2/transaction/EndTransactionActivity.java),
// and the broker's EndTransactionProcessor
// (broker/src/main/java/org/apache/rocketmq/broker/processor/EndTransactionProcessor.java)
// uses that flag only to pick its log line before it commits or rolls
// back. The test checks that all four EndTransaction calls (two by Commit
// and RollBack, two by the checker) are SOURCE_UNSPECIFIED and answered
// 20000, and that both open transactions ended as the checker said.
//
// Recall cannot be tried: 5.1.2's SendReceipt (message.go) has MessageID,
// TransactionId, Offset and Endpoints but no recall handle, its Producer
// has no recall method, and its copy of apache.rocketmq.v2 (protocol/v2)
// has no RecallMessage call.
package interop
