// Scenario 1 (docs/clients.md): pause.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { sharedCluster, Child, cleanupAll, PATIENCE_MS } from './lib/harness.js';

after(cleanupAll);

/**
 * A child holds a lease (ttl 4 s) and writes fenced rows; it is stopped
 * (SIGSTOP) past its ttl while this process takes the lease over and writes.
 * Returns what happened on resume.
 */
export async function pauseScenario(env = {}) {
  const cl = sharedCluster();
  const db = `s1_${process.pid}_${Math.floor(Math.random() * 1e6)}`;
  await cl.createDb(db);
  cl.db = db;
  await cl.query(`CREATE TABLE s1_rows (id serial PRIMARY KEY, writer text, fence_token bigint);
    CREATE TRIGGER s1_fence BEFORE INSERT OR UPDATE ON s1_rows FOR EACH ROW EXECUTE FUNCTION dlock_fence('s1:lock', 'fence_token')`);
  const child = new Child('pause.js', [cl.conninfo(), 's1:lock', '4'], env);
  const acquired = await child.waitEvent((e) => e.event === 'acquired', PATIENCE_MS, 'the child to acquire');
  const tokenA = BigInt(acquired.token);
  child.send({ cmd: 'write' });
  const wrote = await child.waitEvent((e) => e.event === 'wrote', PATIENCE_MS, 'the child to write');
  assert.equal(BigInt(wrote.token), tokenA, 'the child writes with its token');
  child.signal('SIGSTOP');
  const stoppedAt = child.events.length;
  // The newer holder: waits for the expiry, takes the lease over and writes.
  const other = await cl.client(db);
  const r = await other.query("SELECT dlock_acquire('s1:lock', '30 s', '10 s', 'newer holder') AS token");
  assert.notEqual(r.rows[0].token, null, 'the lease is taken over');
  const tokenB = BigInt(r.rows[0].token);
  assert.ok(tokenB > tokenA);
  await other.query('BEGIN');
  await other.query("SELECT dlock_check('s1:lock', $1)", [String(tokenB)]);
  await other.query('INSERT INTO s1_rows (writer) VALUES ($1)', ['newer']);
  await other.query('COMMIT');
  child.signal('SIGCONT');
  return { cl, db, child, tokenA, tokenB, stoppedAt, other };
}

test('s1 pause: a paused holder learns the loss first, its fenced write is rejected, the newer rows stay', async () => {
  const { cl, child, tokenA, tokenB, stoppedAt, other } = await pauseScenario();
  const aborted = await child.waitEvent((e) => e.event === 'aborted', 3000, 'the signal to abort on resume', stoppedAt);
  assert.equal(aborted.reason, 'deadline');
  assert.equal(aborted.error, 'LeaseLost');
  const afterResume = child.events.slice(stoppedAt);
  assert.equal(afterResume[0].event, 'aborted', `the loss is the first thing the child learns on resume: ${JSON.stringify(afterResume)}`);
  const scope = await child.waitEvent((e) => e.event === 'scope', 3000, 'the scope to end', stoppedAt);
  assert.equal(scope.ok, false, 'the scope does not succeed');
  assert.equal(scope.error, 'LeaseLost');
  // Its next fenced write: refused by the lease (LeaseLost) before the transaction,
  // and by the server (StaleToken) when sent with the old token anyway.
  let from = child.events.length;
  child.send({ cmd: 'write' });
  const e1 = await child.waitEvent((e) => e.event === 'write-error' || e.event === 'wrote', 5000, 'the fenced write', from);
  assert.equal(e1.event, 'write-error');
  assert.equal(e1.error, 'LeaseLost');
  from = child.events.length;
  child.send({ cmd: 'raw-write' });
  const e2 = await child.waitEvent((e) => e.event === 'write-error' || e.event === 'wrote', 5000, 'the fenced write with the old token', from);
  assert.equal(e2.event, 'write-error', 'the stale write is rejected');
  assert.equal(e2.error, 'StaleToken');
  assert.equal(e2.code, '55T01');
  child.send({ cmd: 'finish' });
  // The newer holder's rows stay; nothing was written with the old token after them.
  const rows = (await cl.query('SELECT writer, fence_token FROM s1_rows ORDER BY id')).rows;
  assert.deepEqual(rows.map((x) => [x.writer, BigInt(x.fence_token)]), [['child', tokenA], ['newer', tokenB]]);
  // The child never touched the newer lease (no release, no renew).
  const lease = (await cl.query("SELECT token, live, renewed_at = acquired_at AS never_renewed FROM dlock_leases WHERE lock_name = 's1:lock'")).rows[0];
  assert.equal(BigInt(lease.token), tokenB);
  assert.equal(lease.live, true);
  assert.equal(lease.never_renewed, true);
  await other.query("SELECT dlock_release('s1:lock', $1)", [String(tokenB)]);
});
