'use strict';
// tx.js drives transactions and recall with the official Apache RocketMQ
// Node.js client (npm rocketmq-client-nodejs, pinned in package-lock.json)
// and reads the topic back with its SimpleConsumer, then prints one JSON
// summary on stdout. The Go test in the parent directory (tx_test.go) runs
// it against rocketry's bundled broker and checks the summary.
//
// Usage:
//
//   node tx.js --endpoint 127.0.0.1:8081 --topic t --timed-delay-ms 1500 \
//     --await-ms 200 --timeout-ms 30000
//
// It sends, each message in its own transaction (the client allows one):
// "commit" then commits it, "rollback" then rolls it back,
// "orphan-commit" and "orphan-rollback" and ends neither: the broker's
// check asks the producer's transaction checker, which answers COMMIT or
// ROLLBACK from the message's key. Then two timed messages, "recalled"
// and "kept", due in --timed-delay-ms, and recalls "recalled" with its
// receipt's recall handle (and tries a malformed handle). The consumer
// receives and acknowledges until "commit", "orphan-commit" and "kept"
// are acknowledged, then receives once more; the test checks that nothing
// else came.
//
// Exit status: 0 with the summary (see "error" for a run that did not
// finish); 2 for bad arguments; 3 when a client did not start.

const { parseArgs } = require('node:util');

const { CLIENT_PACKAGE, intArg, stderrLogger, describeError, finish } = require('./common');

function readConfig() {
  const { values } = parseArgs({
    options: {
      endpoint: { type: 'string' },
      topic: { type: 'string' },
      group: { type: 'string', default: 'interop-tx-consumer' },
      'timed-delay-ms': { type: 'string', default: '1500' },
      'await-ms': { type: 'string', default: '200' },
      'timeout-ms': { type: 'string', default: '30000' },
      verbose: { type: 'boolean', default: false },
    },
  });
  for (const name of [ 'endpoint', 'topic' ]) {
    if (!values[name]) throw new TypeError(`--${name} is required`);
  }
  return {
    endpoint: values.endpoint,
    topic: values.topic,
    group: values.group,
    timedDelayMs: intArg(values, 'timed-delay-ms', 0),
    awaitMs: intArg(values, 'await-ms', 1),
    timeoutMs: intArg(values, 'timeout-ms', 1),
    verbose: values.verbose,
  };
}

async function main() {
  const summary = { client: { package: CLIENT_PACKAGE, version: require(`${CLIENT_PACKAGE}/package.json`).version } };
  let cfg;
  try {
    cfg = readConfig();
  } catch (err) {
    summary.error = err.message;
    return finish(summary, 2);
  }
  const { Producer, SimpleConsumer } = require(CLIENT_PACKAGE);
  const { TransactionResolution } = require(`${CLIENT_PACKAGE}/proto/apache/rocketmq/v2/definition_pb`);
  const logger = stderrLogger(cfg.verbose);

  summary.checks = [];
  const checker = {
    async check(view) {
      const key = (view.keys || [])[0];
      const resolution = key === 'orphan-commit' ? 'COMMIT' : 'ROLLBACK';
      summary.checks.push({ key, messageId: view.messageId, resolution, atMs: Date.now() });
      return TransactionResolution[resolution];
    },
  };
  const producer = new Producer({ endpoints: cfg.endpoint, namespace: '', topics: [ cfg.topic ], checker, logger });
  const consumer = new SimpleConsumer({
    endpoints: cfg.endpoint,
    namespace: '',
    consumerGroup: cfg.group,
    subscriptions: new Map([[ cfg.topic, '*' ]]),
    awaitDuration: cfg.awaitMs,
    logger,
  });
  try {
    await producer.startup();
    await consumer.startup();
  } catch (err) {
    summary.error = `startup: ${err.message}`;
    summary.startupError = describeError(err.cause || err);
    return finish(summary, 3);
  }

  summary.sent = [];
  summary.errors = [];
  const step = async (name, fn) => {
    try {
      await fn();
    } catch (err) {
      summary.errors.push({ step: name, error: describeError(err) });
    }
  };
  const sendTx = async (key, end) => {
    const tx = producer.beginTransaction();
    const r = await producer.send({ topic: cfg.topic, tag: 'tx', keys: [ key ], body: Buffer.from(key) }, tx);
    summary.sent.push({ key, messageId: r.messageId, transactionId: r.transactionId });
    if (end === 'commit') await tx.commit();
    if (end === 'rollback') await tx.rollback();
  };
  await step('commit', () => sendTx('commit', 'commit'));
  await step('rollback', () => sendTx('rollback', 'rollback'));
  await step('orphan-commit', () => sendTx('orphan-commit', null));
  await step('orphan-rollback', () => sendTx('orphan-rollback', null));

  const at = new Date(Date.now() + cfg.timedDelayMs);
  const handles = {};
  for (const key of [ 'recalled', 'kept' ]) {
    await step(key, async () => {
      const r = await producer.send({ topic: cfg.topic, tag: 'timed', keys: [ key ], deliveryTimestamp: at, body: Buffer.from(key) });
      handles[key] = r.recallHandle;
      summary.sent.push({ key, messageId: r.messageId, recallHandle: r.recallHandle, deliverAtMs: at.getTime() });
    });
  }
  await step('recall', async () => {
    const r = await producer.recallMessage(cfg.topic, handles.recalled);
    summary.recalled = { messageId: r.messageId };
  });
  try {
    await producer.recallMessage(cfg.topic, 'bm90IGEgaGFuZGxl');
    summary.badRecallError = null;
  } catch (err) {
    summary.badRecallError = describeError(err);
  }

  // Receive until the three visible messages are acknowledged, then once
  // more.
  const want = new Set([ 'commit', 'orphan-commit', 'kept' ]);
  const acked = new Set();
  summary.events = [];
  summary.receiveErrors = [];
  const deadline = Date.now() + cfg.timeoutMs;
  let extra = 1;
  while (Date.now() < deadline && (acked.size < want.size || extra-- > 0)) {
    let views;
    try {
      views = await consumer.receive(16, 10000);
    } catch (err) {
      summary.receiveErrors.push(describeError(err));
      await new Promise(resolve => setTimeout(resolve, 100));
      continue;
    }
    for (const v of views) {
      const key = (v.keys || [])[0];
      summary.events.push({ kind: 'receive', key, messageId: v.messageId, atMs: Date.now() });
      try {
        await consumer.ack(v);
        acked.add(key);
        summary.events.push({ kind: 'ack', key, messageId: v.messageId });
      } catch (err) {
        summary.events.push({ kind: 'ackError', key, messageId: v.messageId, error: describeError(err) });
      }
    }
  }
  if (acked.size < want.size) {
    summary.error = `acknowledged ${[ ...acked ].join(', ')} of ${[ ...want ].join(', ')} in ${cfg.timeoutMs} ms`;
  }
  for (const c of [ consumer, producer ]) {
    try {
      let t;
      await Promise.race([
        c.shutdown(),
        new Promise((_, reject) => { t = setTimeout(() => reject(new Error('shutdown() did not finish in 5000 ms')), 5000); }),
      ]).finally(() => clearTimeout(t));
    } catch (err) {
      summary.shutdownError = describeError(err);
    }
  }
  finish(summary, 0);
}

main().catch(err => {
  process.stderr.write(`tx.js: ${err && err.stack || err}\n`);
  process.exit(1);
});
