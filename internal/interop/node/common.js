'use strict';
// common.js holds what consume.js and tx.js share: the client's package
// name, integer flags, the client's log on stderr, how an error is written
// in a summary, and the summary's last write.

const CLIENT_PACKAGE = 'rocketmq-client-nodejs';

function intArg(values, name, min) {
  const n = Number(values[name]);
  if (!Number.isInteger(n) || n < min) {
    throw new RangeError(`--${name} ${JSON.stringify(values[name])} is not an integer >= ${min}`);
  }
  return n;
}

function stderrLogger(verbose) {
  const { format } = require('node:util');
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

function describeError(err) {
  if (err && typeof err.code === 'number') {
    return { name: err.name, code: err.code, message: err.message || err.details };
  }
  return { name: (err && err.name) || 'Error', message: String(err && err.message || err) };
}

function finish(summary, status) {
  process.stdout.write(JSON.stringify(summary) + '\n', () => process.exit(status));
}

module.exports = { CLIENT_PACKAGE, intArg, stderrLogger, describeError, finish };
