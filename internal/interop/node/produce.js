'use strict';
// produce.js sends messages to a RocketMQ 5 gRPC endpoint with the official
// Apache RocketMQ Node.js client (npm rocketmq-client-nodejs, pinned in
// package-lock.json) and prints one JSON summary on stdout. The Go test in
// the parent directory runs it against rocketry's bundled broker; the
// package documentation there (doc.go) says what the client expects from a
// broker and how it retries.
//
// Usage (flags win over the environment):
//
//   node produce.js --endpoint 127.0.0.1:8081 --topic t --count 300 \
//     --concurrency 8 --max-attempts 3 [--property KEY=VALUE ...] [--tls] \
//     [--access-key AK --secret-key SK]
//
//   ROCKETMQ_ENDPOINT, ROCKETMQ_TOPIC, ROCKETMQ_COUNT, ROCKETMQ_CONCURRENCY,
//   ROCKETMQ_MAX_ATTEMPTS, ROCKETMQ_STARTUP_TIMEOUT_MS, ROCKETMQ_VERBOSE=1,
//   ROCKETMQ_TLS=1, ROCKETMQ_ACCESS_KEY, ROCKETMQ_SECRET_KEY
//
// --access-key and --secret-key sign every call (the client's
// sessionCredentials: {accessKey, accessSecret}), for a broker with ACL on.
//
// --tls dials TLS (the client's sslEnabled), verifying the server's
// certificate: grpc-js trusts the PEM file GRPC_DEFAULT_SSL_ROOTS_FILE_PATH
// names instead of its default roots, which is how a test trusts its own
// certificate (NODE_EXTRA_CA_CERTS does not reach grpc-js's roots).
//
// --property adds a user property to every message; "--property =x" (an
// empty name, which the client does not check) makes a broker refuse each
// message with 40007 ILLEGAL_MESSAGE_PROPERTY_KEY.
//
// The client has no hook for its attempts, so the script wraps the one
// method every send attempt goes through (producer.rpcClientManager
// .sendMessage) and records each call: when it began, how long it took and
// what came back. The client's own warnings and errors go to stderr.
//
// Exit status: 0 when every message was sent or failed with an error from
// the client (see "failed" in the summary); 2 for bad arguments; 3 when the
// producer did not start (no Settings on Telemetry in time, or a failed
// route query). The summary is printed in every case.

const { parseArgs } = require('node:util');
const { performance } = require('node:perf_hooks');

const CLIENT_PACKAGE = 'rocketmq-client-nodejs';

function fail(summary, status, message) {
  summary.error = message;
  process.stdout.write(JSON.stringify(summary) + '\n', () => process.exit(status));
}

function intArg(name, value, min) {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min) {
    throw new RangeError(`--${name} ${JSON.stringify(value)} is not an integer >= ${min}`);
  }
  return n;
}

function readConfig() {
  const { values } = parseArgs({
    options: {
      endpoint: { type: 'string', default: process.env.ROCKETMQ_ENDPOINT },
      topic: { type: 'string', default: process.env.ROCKETMQ_TOPIC },
      count: { type: 'string', default: process.env.ROCKETMQ_COUNT ?? '100' },
      concurrency: { type: 'string', default: process.env.ROCKETMQ_CONCURRENCY ?? '8' },
      'max-attempts': { type: 'string', default: process.env.ROCKETMQ_MAX_ATTEMPTS ?? '3' },
      'startup-timeout-ms': { type: 'string', default: process.env.ROCKETMQ_STARTUP_TIMEOUT_MS ?? '10000' },
      verbose: { type: 'boolean', default: process.env.ROCKETMQ_VERBOSE === '1' },
      tls: { type: 'boolean', default: process.env.ROCKETMQ_TLS === '1' },
      property: { type: 'string', multiple: true, default: [] },
      'access-key': { type: 'string', default: process.env.ROCKETMQ_ACCESS_KEY ?? '' },
      'secret-key': { type: 'string', default: process.env.ROCKETMQ_SECRET_KEY ?? '' },
    },
  });
  const properties = new Map();
  for (const p of values.property) {
    const eq = p.indexOf('=');
    if (eq < 0) throw new TypeError(`--property ${JSON.stringify(p)} is not KEY=VALUE`);
    properties.set(p.slice(0, eq), p.slice(eq + 1));
  }
  if (!values.endpoint) throw new TypeError('--endpoint (or ROCKETMQ_ENDPOINT) is required');
  if (!values.topic) throw new TypeError('--topic (or ROCKETMQ_TOPIC) is required');
  return {
    endpoint: values.endpoint,
    topic: values.topic,
    count: intArg('count', values.count, 0),
    concurrency: intArg('concurrency', values.concurrency, 1),
    maxAttempts: intArg('max-attempts', values['max-attempts'], 1),
    startupTimeoutMs: intArg('startup-timeout-ms', values['startup-timeout-ms'], 1),
    verbose: values.verbose,
    tls: values.tls,
    properties,
    accessKey: values['access-key'],
    secretKey: values['secret-key'],
  };
}

// stderrLogger is the client's logger: warnings and errors (each failed
// attempt is one) go to stderr, info only with --verbose. Without a logger
// the client writes to ~/logs/rocketmq.
function stderrLogger(verbose) {
  const { format } = require('node:util');
  // An Error argument is printed as its name and message, not its stack.
  const plain = a => (a instanceof Error ? `${a.name}: ${a.message}` : a);
  const line = (level, args) => process.stderr.write(`${level} ${format(...args.map(plain))}\n`);
  return {
    info: (...args) => verbose && line('INFO', args),
    debug: (...args) => verbose && line('DEBUG', args),
    warn: (...args) => line('WARN', args),
    error: (...args) => line('ERROR', args),
    close: () => {},
  };
}

// describeError turns what a send attempt or send() threw into JSON: a
// RocketMQ status the client raised (code is a apache.rocketmq.v2.Code such
// as 42900 or 50001) or a gRPC error (grpcCode is a gRPC status code).
function describeError(err) {
  if (err && typeof err.code === 'number' && err.code >= 10000) {
    return { name: err.name, code: err.code, message: err.message };
  }
  if (err && typeof err.code === 'number' && 'details' in err) {
    return { name: 'grpc', grpcCode: err.code, message: err.details || err.message };
  }
  return { name: (err && err.name) || 'Error', message: String(err && err.message || err) };
}

// responseResult is the outcome of a send attempt whose RPC succeeded: the
// top-level status and each entry's (the client fails the attempt if any
// entry is not OK, see SendReceipt.processResponseInvocation).
function responseResult(response) {
  const obj = response.toObject();
  const entries = obj.entriesList.map(e => ({
    messageId: e.messageId,
    code: e.status ? e.status.code : undefined,
    message: e.status ? e.status.message : undefined,
  }));
  const bad = entries.find(e => e.code !== 20000);
  return {
    code: bad && bad.code !== undefined ? bad.code : obj.status && obj.status.code,
    status: obj.status ? { code: obj.status.code, message: obj.status.message } : null,
    entries,
  };
}

async function main() {
  const t0 = performance.now();
  const ms = () => Math.round((performance.now() - t0) * 1000) / 1000;
  const summary = { client: { package: CLIENT_PACKAGE, version: require(`${CLIENT_PACKAGE}/package.json`).version } };
  let cfg;
  try {
    cfg = readConfig();
  } catch (err) {
    return fail(summary, 2, err.message);
  }
  Object.assign(summary, {
    endpoint: cfg.endpoint, topic: cfg.topic, count: cfg.count,
    concurrency: cfg.concurrency, maxAttempts: cfg.maxAttempts,
  });

  const { Producer } = require(CLIENT_PACKAGE);
  const producer = new Producer({
    endpoints: cfg.endpoint,
    namespace: '',
    topic: cfg.topic, // declared up front: startup waits for the broker's Settings
    maxAttempts: cfg.maxAttempts,
    sslEnabled: cfg.tls,
    logger: stderrLogger(cfg.verbose),
    ...(cfg.accessKey ? { sessionCredentials: { accessKey: cfg.accessKey, accessSecret: cfg.secretKey } } : {}),
  });

  // Settings the broker pushed on Telemetry, as the client decoded them.
  summary.settings = [];
  const onSettings = producer.onSettingsCommand.bind(producer);
  producer.onSettingsCommand = (endpoints, settings) => {
    summary.settings.push({ atMs: ms(), endpoints: String(endpoints), settings: settings.toObject() });
    return onSettings(endpoints, settings);
  };

  // Every send attempt, by message id, in the order the client made them.
  const attempts = new Map();
  const keyToId = new Map();
  const rpc = producer.rpcClientManager;
  const sendMessage = rpc.sendMessage.bind(rpc);
  rpc.sendMessage = async (endpoints, request, timeout) => {
    const ids = request.getMessagesList().map(m => {
      const id = m.getSystemProperties().getMessageId();
      for (const k of m.getSystemProperties().getKeysList()) keyToId.set(k, id);
      return id;
    });
    const startMs = ms();
    const record = result => {
      const a = { atMs: startMs, durationMs: Math.round((ms() - startMs) * 1000) / 1000, endpoints: String(endpoints), batch: ids.length, ...result };
      for (const id of ids) {
        if (!attempts.has(id)) attempts.set(id, []);
        attempts.get(id).push(a);
      }
    };
    try {
      const response = await sendMessage(endpoints, request, timeout);
      record(responseResult(response));
      return response;
    } catch (err) {
      record({ error: describeError(err) });
      throw err;
    }
  };

  let timer;
  const startup = producer.startup();
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(
      `producer.startup() did not finish in ${cfg.startupTimeoutMs} ms (the client waits for a Settings command on Telemetry)`)),
    cfg.startupTimeoutMs);
  });
  try {
    await Promise.race([ startup, timeout ]);
  } catch (err) {
    summary.startupMs = ms();
    summary.startupError = describeError(err.cause || err);
    return fail(summary, 3, `startup: ${err.message}`);
  } finally {
    clearTimeout(timer);
  }
  summary.startupMs = ms();

  const messages = new Array(cfg.count);
  let next = 0;
  const worker = async () => {
    while (next < cfg.count) {
      const i = next++;
      const key = `interop-${i}`;
      const m = { index: i, key };
      const begin = ms();
      try {
        const receipt = await producer.send({
          topic: cfg.topic,
          tag: 'interop',
          keys: [ key ],
          properties: cfg.properties.size ? cfg.properties : undefined,
          body: Buffer.from(JSON.stringify({ index: i })),
        });
        m.ok = true;
        m.receipt = receipt ? { messageId: receipt.messageId, offset: receipt.offset } : null;
      } catch (err) {
        m.ok = false;
        m.error = describeError(err);
      }
      m.messageId = keyToId.get(key) ?? null;
      m.elapsedMs = Math.round((ms() - begin) * 1000) / 1000;
      messages[i] = m;
    }
  };
  const sendStart = ms();
  await Promise.all(Array.from({ length: Math.min(cfg.concurrency, Math.max(cfg.count, 1)) }, worker));
  summary.sendMs = Math.round((ms() - sendStart) * 1000) / 1000;

  for (const m of messages) {
    m.attempts = (m.messageId && attempts.get(m.messageId)) || [];
  }
  summary.sent = messages.filter(m => m.ok).length;
  summary.failed = messages.filter(m => !m.ok).length;
  summary.sendRequests = new Set([].concat(...messages.map(m => m.attempts))).size;
  summary.messages = messages;

  try {
    let t;
    await Promise.race([
      producer.shutdown(),
      new Promise((_, reject) => { t = setTimeout(() => reject(new Error('producer.shutdown() did not finish in 5000 ms')), 5000); }),
    ]).finally(() => clearTimeout(t));
  } catch (err) {
    summary.shutdownError = describeError(err);
  }
  summary.totalMs = ms();
  // The client keeps timers and channels after a failed shutdown: exit.
  process.stdout.write(JSON.stringify(summary) + '\n', () => process.exit(0));
}

main().catch(err => {
  process.stderr.write(`produce.js: ${err && err.stack || err}\n`);
  process.exit(1);
});
