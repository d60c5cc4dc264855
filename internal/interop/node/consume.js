'use strict';
// consume.js sends FIFO and timed messages with the official Apache
// RocketMQ Node.js client's Producer and reads them back with its
// SimpleConsumer (npm rocketmq-client-nodejs, pinned in package-lock.json),
// then prints one JSON summary on stdout. The Go test in the parent
// directory runs it against rocketry's bundled broker and checks the
// summary: every group in send order, nothing missing or doubled, no timed
// message received before its delivery time.
//
// Usage:
//
//   node consume.js --endpoint 127.0.0.1:8081 --fifo-topic f --timed-topic d \
//     --group g --groups 4 --per-group 25 --timed 5 --timed-delay-ms 1500 \
//     --invisible-ms 1000 --await-ms 1000 --skip-ack-every 7 --timeout-ms 30000
//
// The groups' messages are sent one after another within a group (each
// send waits for the previous one's receipt), the groups side by side.
// The consumer receives from both topics in turn, and acknowledges every
// message at once, except the first delivery of every --skip-ack-every-th
// message it receives, which it leaves to come back after its invisible
// time. Every delivery and acknowledgement is logged in one sequence
// ("seq"), so that the test can check that a group's next message never
// came before the previous one was acknowledged.
//
// Exit status: 0 with the summary (see "error" for a run that did not
// finish); 2 for bad arguments; 3 when a client did not start.

const { parseArgs } = require('node:util');

const { CLIENT_PACKAGE, intArg, stderrLogger, describeError, finish } = require('./common');

function readConfig() {
  const { values } = parseArgs({
    options: {
      endpoint: { type: 'string' },
      'fifo-topic': { type: 'string' },
      'timed-topic': { type: 'string' },
      group: { type: 'string', default: 'interop-consumer' },
      groups: { type: 'string', default: '4' },
      'per-group': { type: 'string', default: '25' },
      timed: { type: 'string', default: '5' },
      'timed-delay-ms': { type: 'string', default: '1500' },
      'invisible-ms': { type: 'string', default: '10000' },
      'await-ms': { type: 'string', default: '1000' },
      'skip-ack-every': { type: 'string', default: '0' },
      'timeout-ms': { type: 'string', default: '30000' },
      verbose: { type: 'boolean', default: false },
    },
  });
  for (const name of [ 'endpoint', 'fifo-topic', 'timed-topic' ]) {
    if (!values[name]) throw new TypeError(`--${name} is required`);
  }
  return {
    endpoint: values.endpoint,
    fifoTopic: values['fifo-topic'],
    timedTopic: values['timed-topic'],
    group: values.group,
    groups: intArg(values, 'groups', 0),
    perGroup: intArg(values, 'per-group', 0),
    timed: intArg(values, 'timed', 0),
    timedDelayMs: intArg(values, 'timed-delay-ms', 0),
    invisibleMs: intArg(values, 'invisible-ms', 1),
    awaitMs: intArg(values, 'await-ms', 1),
    skipAckEvery: intArg(values, 'skip-ack-every', 0),
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
  // The watchdog: a call of the client that never returns (seen once, with
  // no output, on a loaded machine) ends the run with the summary so far
  // and the step it was in, instead of a kill without either.
  let step = 'startup';
  setTimeout(() => {
    summary.error = `stuck in ${step} after ${cfg.timeoutMs + 15000} ms`;
    summary.stuck = step;
    finish(summary, 4);
  }, cfg.timeoutMs + 15000);
  Object.assign(summary, { groups: cfg.groups, perGroup: cfg.perGroup, timed: cfg.timed });
  const { Producer, SimpleConsumer } = require(CLIENT_PACKAGE);
  const logger = stderrLogger(cfg.verbose);

  const producer = new Producer({ endpoints: cfg.endpoint, namespace: '', topics: [ cfg.fifoTopic, cfg.timedTopic ], logger });
  const consumer = new SimpleConsumer({
    endpoints: cfg.endpoint,
    namespace: '',
    consumerGroup: cfg.group,
    subscriptions: new Map([[ cfg.fifoTopic, '*' ], [ cfg.timedTopic, '*' ]]),
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

  // Send: each group in order, the groups side by side; the timed
  // messages alongside.
  step = 'send';
  summary.sent = [];
  summary.sendErrors = [];
  const sendGroup = async g => {
    for (let i = 0; i < cfg.perGroup; i++) {
      const group = `group-${g}`;
      try {
        const r = await producer.send({
          topic: cfg.fifoTopic, tag: 'fifo', keys: [ `${group}-${i}` ], messageGroup: group,
          body: Buffer.from(JSON.stringify({ group, seq: i })),
        });
        summary.sent.push({ kind: 'fifo', group, seq: i, messageId: r.messageId, sentAtMs: Date.now() });
      } catch (err) {
        summary.sendErrors.push({ group, seq: i, error: describeError(err) });
        return; // never send a group out of order
      }
    }
  };
  const sendTimed = async i => {
    const at = new Date(Date.now() + cfg.timedDelayMs);
    try {
      const r = await producer.send({
        topic: cfg.timedTopic, tag: 'timed', keys: [ `timed-${i}` ], deliveryTimestamp: at,
        body: Buffer.from(JSON.stringify({ timed: i })),
      });
      summary.sent.push({ kind: 'timed', seq: i, messageId: r.messageId, deliverAtMs: at.getTime(), sentAtMs: Date.now() });
    } catch (err) {
      summary.sendErrors.push({ timed: i, error: describeError(err) });
    }
  };
  await Promise.all([
    ...Array.from({ length: cfg.groups }, (_, g) => sendGroup(g)),
    ...Array.from({ length: cfg.timed }, (_, i) => sendTimed(i)),
  ]);

  // Receive until every sent message is acknowledged, or the time is up.
  const want = new Set(summary.sent.map(s => s.messageId));
  const acked = new Set();
  summary.events = [];
  summary.receiveErrors = [];
  let seq = 0;
  let received = 0;
  const deadline = Date.now() + cfg.timeoutMs;
  while (acked.size < want.size && Date.now() < deadline) {
    let views;
    try {
      step = 'receive';
      views = await consumer.receive(16, cfg.invisibleMs);
    } catch (err) {
      summary.receiveErrors.push(describeError(err));
      if (summary.receiveErrors.length >= 20) {
        summary.error = `receive failed ${summary.receiveErrors.length} times; the last: ${err.message}`;
        break;
      }
      await new Promise(resolve => setTimeout(resolve, 100));
      continue;
    }
    for (const v of views) {
      received++;
      const body = JSON.parse(v.body.toString());
      const e = {
        seq: seq++, kind: 'receive', atMs: Date.now(), topic: v.topic, messageId: v.messageId,
        group: v.messageGroup || null, bodySeq: body.seq ?? body.timed, attempt: v.deliveryAttempt,
        deliveryTimestampMs: v.deliveryTimestamp ? v.deliveryTimestamp.getTime() : null,
        corrupted: Boolean(v.corrupted),
      };
      summary.events.push(e);
      if (cfg.skipAckEvery > 0 && v.deliveryAttempt === 1 && received % cfg.skipAckEvery === 0) {
        e.skippedAck = true;
        continue;
      }
      try {
        step = 'ack';
        await consumer.ack(v);
        acked.add(v.messageId);
        summary.events.push({ seq: seq++, kind: 'ack', atMs: Date.now(), messageId: v.messageId, group: e.group, bodySeq: e.bodySeq });
      } catch (err) {
        summary.events.push({ seq: seq++, kind: 'ackError', atMs: Date.now(), messageId: v.messageId, error: describeError(err) });
      }
    }
  }
  if (acked.size < want.size && !summary.error) {
    summary.error = `acknowledged ${acked.size} of ${want.size} messages in ${cfg.timeoutMs} ms`;
  }

  step = 'shutdown';
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
  // The client keeps timers and channels after a failed shutdown: exit.
  finish(summary, 0);
}

main().catch(err => {
  process.stderr.write(`consume.js: ${err && err.stack || err}\n`);
  process.exit(1);
});
