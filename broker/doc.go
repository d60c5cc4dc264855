// Package broker is rocketry's bundled test broker: an in-memory message
// broker that serves the rocketry gRPC services (MessagingService for
// producers, ConsumerService for consumers and stats) and RocketMQ 5's
// (producers, SimpleConsumers and PushConsumers), and
// misbehaves on purpose, so that producers can be tested against a
// broker's bad days.
//
// # Storing
//
// A SendMessage request carries one or more messages of one topic. Each
// topic has several queues (WithQueues), each an in-memory log with offsets
// from 0; new messages go to the topic's queues in turn (round-robin, in
// arrival order). Storage on rocketry.v1 is idempotent by message id: an
// id the broker remembers (WithDedupWindow) is not stored again, and its
// answer is the original queue and offset with duplicate set (the
// apache.rocketmq.v2 face does not deduplicate by default; see below). A request is refused whole
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
// A message with a delivery time still to come (a RocketMQ 5 timed message)
// waits in its topic's timer and joins its queue when due, as a RocketMQ
// broker's timer wheel holds it: no consumer of either protocol sees it
// before, and it counts for no backlog until then. Messages lists it with
// offset -1 meanwhile, and its send is answered with offset -1; Stats
// counts it in the broker's stored messages when sent and in its topic's
// when due.
//
// # Topic types
//
// A topic takes every message type (NORMAL, FIFO, DELAY, TRANSACTION)
// unless WithTopicType declares it with one: then a message of another
// type is refused (40014 MESSAGE_PROPERTY_CONFLICT_WITH_TYPE on
// apache.rocketmq.v2, 400 on rocketry.v1), as the proxy checks a request's
// first message, and the route's queues accept only that type. A message's
// type follows from its properties: TRANSACTION, else DELAY with a delivery
// time, else FIFO with a message group, else NORMAL.
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
// Faults (WithFaults, SetFaults) fail a share of sends with INTERNAL, store
// a share and answer them INTERNAL all the same (StoredInternalRate: 50001
// on apache.rocketmq.v2, as a proxy whose answer failed after the broker
// stored the messages), add latency, answer nothing until the caller's
// deadline (blackhole), close the caller's connection (drop), or answer
// UNAVAILABLE. Restart and
// DropConnections act on the listener and the connections, keeping every
// stored message. Faults are drawn from one random source seeded by
// WithSeed, so they are the same for the same sequence of calls.
//
// # Errors
//
// Every rocketry.v1 error status carries a rocketry.v1.ErrorDetail with the
// broker code (400, 404, 413, 500, 503, 530) and a message naming the
// problem and, for a bad message, its index in the request.
//
// # RocketMQ 5 clients
//
// On the same listener the broker serves apache.rocketmq.v2
// MessagingService, the gRPC protocol of RocketMQ 5 clients, so an official
// client can be pointed at Addr as its endpoint. It answers as the Apache
// RocketMQ 5 proxy does in cluster mode (WithProxyMode(ProxyLocal) for
// local mode), so that what a test proves against it holds against the
// proxy users run. Its sends go through the same steps as rocketry.v1's
// (validate, faults, throttle, store) into the same store, and what a
// RocketMQ client stored is read through ConsumerService or Messages
// (system_properties message_id, tag and keys and the user_properties
// become the stored message's id, tag, keys and properties; the body is
// kept as sent). Where it differs from rocketry.v1:
//
//   - A request is stored whole, on one queue, and answered with ONE
//     SendResultEntry however many messages it carries: status OK, the
//     ids joined by commas (local mode: a new id for the batch), the first
//     message's offset. A refused request is answered with a status and no
//     entry, nothing of it stored.
//   - The broker picks the queue; the client's queue_id is ignored. A
//     single message with a message group goes to the queue the proxy's
//     hash of the group picks; any other request to the next queue in turn.
//   - No deduplication by message id: a message sent twice is stored
//     twice, as a RocketMQ broker stores it. Stats counts the Copies and
//     the ids StoredTwice, and so do the metrics; WithRocketMQDedup answers
//     a remembered id as stored instead, for tests about something else.
//   - The proxy's validation, the whole request refused by its first
//     invalid message: 40002 ILLEGAL_TOPIC (blank, a system topic, over 127
//     characters, outside ^[%|a-zA-Z0-9_-]+$), 40016 MESSAGE_CORRUPTED (no
//     message, or topics that differ), 41302 MESSAGE_BODY_EMPTY, 41301
//     MESSAGE_BODY_TOO_LARGE, 43101 MESSAGE_PROPERTIES_TOO_LARGE (over 128
//     user properties, or over 16 KiB of them with the tag and keys), 40007
//     ILLEGAL_MESSAGE_PROPERTY_KEY (a reserved key, a control character),
//     40004 ILLEGAL_MESSAGE_TAG (blank, '|', a control character), 40005
//     ILLEGAL_MESSAGE_KEY, 40009 ILLEGAL_MESSAGE_ID, 40012
//     ILLEGAL_DELIVERY_TIME (over 24 hours away), 40006
//     ILLEGAL_MESSAGE_GROUP (blank, 64 bytes or more, a control
//     character); then 40402 TOPIC_NOT_FOUND.
//   - Load refusals are 42900 TOO_MANY_REQUESTS whose text starts with the
//     reason's tag, as a RocketMQ broker's busy answers do, with no retry
//     hint: [BACKLOG], [STORAGE_LOAD], [SEND_RATE] from Throttle, and, with
//     a send queue (WithSendQueue, the broker's send thread pool), a
//     request that waited too long for a worker is refused with
//     "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while,
//     period in queue: ...", one that finds the queue full with
//     "[OVERLOAD]system busy, ...". In local mode they are 50001
//     INTERNAL_SERVER_ERROR, with the same text, as is an injected INTERNAL
//     fault in both modes. Injected UNAVAILABLE, dropped connections,
//     blackholes and latency act on the call, as on rocketry.v1: a gRPC
//     UNAVAILABLE or the caller's deadline, with no body.
//
// QueryRoute lists WithQueues queues on this broker, named by
// WithBrokerName, with the access points the client used as its endpoints
// (cluster mode: every one of them), and the queues of the peers of
// WithRoutePeers at their own addresses (Peer.Addrs gives a broker
// several); brokertest.StartCluster starts brokers that route to each
// other. Telemetry answers the client's Settings with the retry policy of
// WithClientRetryPolicy (by default the RocketMQ 5 proxy's) and the
// broker's largest body, and stays open until the client closes it or the
// broker stops or restarts. Heartbeat and NotifyClientTermination answer
// OK.
//
// Transactions are a RocketMQ 5 broker's: a SendMessage of TRANSACTION
// messages stores them as half messages of a new transaction (its entry
// carries the transaction_id, offset -1), invisible to every consumer, in
// no queue, no backlog and not in Messages (HalfMessages lists them), and
// rocketry.v1's transactional flag is unchanged (stored when sent).
// EndTransaction COMMIT makes them visible, joining their queue then (or
// the timer, with a delivery time still to come); ROLLBACK drops them; an
// unknown or ended transaction is 50001 "cannot found transaction data",
// a blank id 40008 INVALID_TRANSACTION_ID, as the proxy answers. An
// orphan, neither committed nor rolled back within the check interval
// (WithTransactionCheck; 30 s and 15 checks by default, as the real
// broker), is checked: the broker sends a RecoverOrphanedTransactionCommand
// on the Telemetry stream of a connected producer (the sender, else one
// publishing the topic) and applies its EndTransaction; after the last
// check it is rolled back, as the real broker discards it. Stats counts a
// half message in the stored messages when it is committed.
//
// Recall: the entry of a timed message carries a recall_handle (encoded as
// the broker's); RecallMessage with it removes the message while it waits
// in the timer, so that it is never delivered. A handle whose delivery
// time has come, that does not decode, or names another topic, is 50001
// INTERNAL_SERVER_ERROR with the broker's text ("recall failed, timestamp
// invalid", ...), as the proxy answers. Stats still counts a recalled
// message as stored when sent.
//
// What the face still does not model: a route of several brokers behind
// one proxy (each bundled broker stores only its own messages, and hashes a
// group over its own queues), SEND_BATCH_MESSAGE's own limits, the broker's
// [PCBUSY_CLEAN_QUEUE] and [PC_SYNCHRONIZED] (page cache busy), the
// proxy's own full thread pool ("flow limit") and 50400 PROXY_TIMEOUT, and
// flush or replica answers (50401, 50402, 50002).
//
// The v2 consumer calls of a SimpleConsumer are served as the proxy serves
// them: ReceiveMessage pops up to batch_size messages of the topic for the
// request's group, from every queue (the request's queue does not matter,
// as it does not to the proxy), waiting for messages up to its long
// polling time (WithLongPolling), and answers a stream of a status (20000,
// or 40401 MESSAGE_NOT_FOUND), the messages (each with an MD5 body digest,
// a receipt handle and its delivery_attempt) and a delivery timestamp. A
// received message is invisible to its group for the request's
// invisible_duration (WithMinInvisibleDuration to 12 h); unless
// acknowledged (AckMessage) by then it is delivered again, attempt one
// higher, without limit (there is no dead-letter queue).
// ChangeInvisibleDuration sets a new invisible time and answers a new
// receipt handle. A handle whose invisible time is over, or replaced, is
// 40013 INVALID_RECEIPT_HANDLE. A message with a message group is not
// delivered while an earlier message of its group in its queue is not
// acknowledged, so each group is received in order, one message at a
// time. A v2 consumer group is the store's consumer group of that name: a
// new one starts at offset 0, its committed offset per queue is the first
// message it has not acknowledged, so what it has not acknowledged is
// backlog, and what it receives far behind a queue's head is a cold read;
// a rocketry.v1 CommitOffset or ResetOffset moves it too.
//
// QueryAssignment, a PushConsumer's question of which queues to receive
// from, is answered as the proxy answers it: one assignment per broker of
// the route, queue id -1 (ReceiveMessage reads every queue of that
// broker), READ_WRITE, the broker (id 0) at the endpoints QueryRoute gives
// it; a bad topic is 40002, a missing or bad group 40003, an unknown topic
// 40402. A consumer's Settings are answered as the proxy's
// mergeSubscriptionData answers them: receive_batch_size 32, the longest
// long polling time (WithLongPolling's max) as long_polling_timeout, fifo
// false, and the default group's retry policy (17 attempts, customized
// delays 1 s ... 2 h) as backoff_policy; a PushConsumer receives with that
// batch size and timeout. Its ReceiveMessage has auto_renew and no
// invisible_duration: the proxy pops such messages for its default 60 s
// and renews their handles until they are acknowledged or their invisible
// time changed, for at most 3 h after the receive. The broker models that
// renewal without a timer: the messages stay invisible, and the handle the
// receive gave stays good for AckMessage and ChangeInvisibleDuration, for
// 3 h from the receive, then they come again (the proxy's client-offline
// release and its retry delay at the bound are not modelled).
//
// # Watching sends
//
// WithSendObserver sees one SendRecord per message of every send request on
// either protocol: which protocol, the message id, when it arrived and what
// the broker did (stored, duplicate, throttled and why, which fault, bad
// request). A test groups the records by message id to see how a client
// retried: how many attempts, how far apart, after which answers.
//
// [Broker.MetricsHandler] and [Broker.WriteMetrics] give the broker's
// counters and gauges in the Prometheus text format, for a scraper or a
// person with curl while a test or the demo runs (`rocketry broker
// --metrics ADDR` serves them): stored, duplicates, copies and ids stored
// twice, throttled by reason,
// throttling spells, backlog per consumer group, cold reads, injected
// faults.
//
// Package brokertest starts a broker, or a cluster of them, for a test, as
// httptest does.
package broker
