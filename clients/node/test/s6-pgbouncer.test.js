// Scenario 6 (docs/clients.md): PgBouncer in transaction mode.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { Dlock, Election } from '../src/index.js';
import { sharedCluster, cleanupAll, startPgbouncer, waitFor, onCleanup, PATIENCE_MS } from './lib/harness.js';
import { within } from './lib/checks.js';

after(cleanupAll);

test('s6 pgbouncer in transaction mode: renewals, a confirmed release, a fenced transaction, observe polls', async () => {
  const cl = sharedCluster();
  const db = `s6_${process.pid}`;
  await cl.createDb(db);
  await cl.query(`CREATE TABLE s6_rows (id serial PRIMARY KEY, note text, fence_token bigint);
    CREATE TRIGGER s6_fence BEFORE INSERT OR UPDATE ON s6_rows FOR EACH ROW EXECUTE FUNCTION dlock_fence('s6:lease', 'fence_token')`, [], db);
  const pb = await startPgbouncer(cl);
  // The application's pool, through the pooler; renewal and observers open
  // their own connections from the pool's options (the pooler too).
  const pool = new pg.Pool({ host: '127.0.0.1', port: pb.port, user: 'postgres', database: db, max: 3 });
  pool.on('error', () => {});
  onCleanup(() => pool.end().catch(() => {}));
  const d = new Dlock(pool);
  let released;
  // ttl 3 s: renewed each second through the pooler, in time on a loaded machine too.
  const token = await d.withLease('s6:lease', { ttl: 3, onRelease: (r) => { released = r; } }, async (lease) => {
    await waitFor(() => lease.renewals >= 3 || lease.lost, 20000, 'three renewals through the pooler');
    assert.equal(lease.lost, false);
    const r = await lease.fenced(pool, (c) => c.query('INSERT INTO s6_rows (note) VALUES ($1) RETURNING fence_token', ['pooled']));
    assert.equal(BigInt(r.rows[0].fence_token), lease.token, 'the fenced write carries the token');
    return lease.token;
  });
  assert.equal(released.confirmed, true, 'the release is confirmed');
  const row = (await cl.query("SELECT token, released FROM dlock_leases WHERE lock_name = 's6:lease'", [], db)).rows[0];
  assert.equal(BigInt(row.token), token);
  assert.equal(row.released, true);

  // observe: LISTEN does not work behind the pooler, so it polls.
  const e = new Election(d, 's6:leader', { ttl: 3, owner: 'pooled leader' });
  const ac = new AbortController();
  const obs = e.observe({ signal: ac.signal, pollInterval: 0.2 });
  const seen = [];
  const loop = (async () => { for await (const l of obs) seen.push(l); })();
  onCleanup(() => ac.abort());
  await waitFor(() => obs.mode, PATIENCE_MS, 'the observer to start');
  assert.equal(obs.mode, 'poll', 'the observer falls back to polling');
  const lease = await e.campaign({ wait: 5 });
  await waitFor(() => seen.length >= 1, PATIENCE_MS, 'the observer to see the leader');
  assert.equal(seen[0].token, lease.token);
  assert.equal(seen[0].owner, 'pooled leader');
  assert.deepEqual(await e.resign(), { confirmed: true });
  ac.abort();
  await within(PATIENCE_MS, loop, 'the observer to stop');
  d.close();
});
