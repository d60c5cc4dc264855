'use strict';
// push.js sends messages with the official Apache RocketMQ Node.js
// client's Producer and consumes them with its PushConsumer (npm
// rocketmq-client-nodejs, pinned in package-lock.json), then prints one
// JSON summary on stdout. The Go test in the parent directory runs it
// against rocketry's bundled broker and checks the summary and the
// broker: every message received, once, and acknowledged.
//
// Usage:
//
//   node push.js --endpoint 127.0.0.1:8081 --topic t --group g \
//     --messages 50 --linger-ms 3000 --timeout-ms 30000
//
// The consumer is started first, then the producer sends --messages
// messages 8 at a time. The listener records every delivery and answers
// SUCCESS, so that the client acknowledges it. Once every message came,
// the script waits --linger-ms more for a message that comes again, then
// shuts both clients down.
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
      group: { type: 'string', default: 'interop-push' },
      messages: { type: 'string', default: '50' },
      'linger-ms': { type: 'string', default: '3000' },
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
    messages: intArg(values, 'messages', 1),
    lingerMs: intArg(values, 'linger-ms', 0),
    timeoutMs: intArg(values, 'timeout-ms', 1),
    verbose: values.verbose,
  };
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

async function main() {
  const summary = { client: { package: CLIENT_PACKAGE, version: require(`${CLIENT_PACKAGE}/package.json`).version } };
  let cfg;
  try {
    cfg = readConfig();
  } catch (err) {
    summary.error = err.message;
    return finish(summary, 2);
  }
  let step = 'startup';
  setTimeout(() => {
    summary.error = `stuck in ${step} after ${cfg.timeoutMs + 30000} ms`;
    summary.stuck = step;
    finish(summary, 4);
  }, cfg.timeoutMs + 30000);
  const { Producer, PushConsumer, ConsumeResult } = require(CLIENT_PACKAGE);
  const logger = stderrLogger(cfg.verbose);

  summary.deliveries = [];
  const seen = new Set();
  const started = Date.now();
  const consumer = new PushConsumer({
    endpoints: cfg.endpoint,
    namespace: '',
    consumerGroup: cfg.group,
    subscriptions: new Map([[ cfg.topic, '*' ]]),
    logger,
    messageListener: {
      consume(v) {
        summary.deliveries.push({ messageId: v.messageId, attempt: v.deliveryAttempt, atMs: Date.now() - started });
        seen.add(v.messageId);
        return ConsumeResult.SUCCESS;
      },
    },
  });
  const producer = new Producer({ endpoints: cfg.endpoint, namespace: '', topics: [ cfg.topic ], logger });
  try {
    await consumer.startup();
    await producer.startup();
  } catch (err) {
    summary.error = `startup: ${err.message}`;
    summary.startupError = describeError(err.cause || err);
    return finish(summary, 3);
  }
  const settings = consumer.getPushConsumerSettings();
  summary.settings = { receiveBatchSize: settings.getReceiveBatchSize(), longPollingTimeoutMs: settings.getLongPollingTimeout(), fifo: settings.isFifo() };

  step = 'send';
  summary.sent = [];
  summary.sendErrors = [];
  for (let i = 0; i < cfg.messages; i += 8) {
    await Promise.all(Array.from({ length: Math.min(8, cfg.messages - i) }, async (_, j) => {
      try {
        const r = await producer.send({ topic: cfg.topic, tag: 'push', keys: [ `push-${i + j}` ], body: Buffer.from(`push ${i + j}`) });
        summary.sent.push(r.messageId);
      } catch (err) {
        summary.sendErrors.push(describeError(err));
      }
    }));
  }

  step = 'consume';
  const deadline = Date.now() + cfg.timeoutMs;
  while (summary.sent.some(id => !seen.has(id)) && Date.now() < deadline) {
    await sleep(50);
  }
  if (summary.sent.some(id => !seen.has(id))) {
    summary.error = `received ${summary.sent.filter(id => seen.has(id)).length} of ${summary.sent.length} messages in ${cfg.timeoutMs} ms`;
  }
  step = 'linger';
  await sleep(cfg.lingerMs);

  step = 'shutdown';
  for (const c of [ consumer, producer ]) {
    try {
      let t;
      await Promise.race([
        c.shutdown(),
        new Promise((_, reject) => { t = setTimeout(() => reject(new Error('shutdown() did not finish in 15000 ms')), 15000); }),
      ]).finally(() => clearTimeout(t));
    } catch (err) {
      summary.shutdownError = describeError(err);
    }
  }
  finish(summary, 0);
}

main().catch(err => {
  process.stderr.write(`push.js: ${err && err.stack || err}\n`);
  process.exit(1);
});
