// Child of scenario 1: holds a lease (ttl from argv) and writes fenced rows
// when told on stdin; prints JSON lines: acquired, wrote, aborted (the
// signal, with its reason), write-error, scope (the scope's outcome).
import readline from 'node:readline';
import { withLease, fencedTransaction, connect } from '../../src/index.js';
import { mutation } from '../../src/testing.js';

const [conninfo, name, ttl] = process.argv.slice(2);
for (const m of (process.env.DLOCK_NODE_TEST_MUTATION || '').split(',').filter(Boolean)) mutation[m] = true;
const emit = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const client = await connect(conninfo);
const insert = (c) => c.query('INSERT INTO s1_rows (writer) VALUES ($1) RETURNING fence_token', ['child']);
const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();

let theLease;
withLease(conninfo, name, { ttl: Number(ttl) }, async (lease) => {
  theLease = lease;
  emit({ event: 'acquired', token: String(lease.token) });
  lease.signal.addEventListener('abort', () => {
    emit({ event: 'aborted', reason: lease.signal.reason && lease.signal.reason.reason, error: lease.signal.reason && lease.signal.reason.name });
  });
  for (;;) {
    const { value, done } = await lines.next();
    if (done) return 'eof';
    const cmd = JSON.parse(value).cmd;
    if (cmd === 'finish') return 'finished';
    try {
      const r = cmd === 'raw-write'
        ? await fencedTransaction(client, [{ name, token: lease.token }], insert)
        : await lease.fenced(client, insert);
      emit({ event: 'wrote', cmd, token: r.rows[0].fence_token });
    } catch (err) {
      emit({ event: 'write-error', cmd, error: err.name, reason: err.reason, code: err.code });
    }
  }
}).then(
  (value) => emit({ event: 'scope', ok: true, value, confirmed: theLease && theLease.confirmed }),
  (err) => emit({ event: 'scope', ok: false, error: err.name, reason: err.reason, message: err.message }),
);

// After the scope: wait for "exit".
process.stdin.on('end', () => process.exit(0));
setInterval(() => {}, 1000).unref();
