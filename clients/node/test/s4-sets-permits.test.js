// Scenario 4 (docs/clients.md): sets and permits.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { Dlock, NotAcquired } from '../src/index.js';
import { sharedCluster, cleanupAll, waitFor, sleep, now, functionCalls, PATIENCE_MS } from './lib/harness.js';
import { within } from './lib/checks.js';

after(cleanupAll);

test('s4 sets: all-or-none, renewed with one dlock_renew_each per renewal and no dlock_renew', async () => {
  const cl = sharedCluster();
  const db = `s4_${process.pid}`;
  await cl.createDb(db);
  cl.db = db;
  const d = new Dlock(cl.conninfo());
  const names = ['s4:a', 's4:b', 's4:c'];
  // All or none: one name held elsewhere, none of the set is taken.
  const other = await cl.client(db);
  const held = (await other.query("SELECT dlock_acquire('s4:b', '30 s') AS token")).rows[0].token;
  await assert.rejects(d.acquireAll(names, { ttl: 3 }), NotAcquired);
  const live = (await cl.query("SELECT count(*)::int AS n FROM dlock_leases WHERE lock_name IN ('s4:a', 's4:c') AND live")).rows[0].n;
  assert.equal(live, 0, 'none of the set is held');
  await other.query("SELECT dlock_release('s4:b', $1)", [held]);
  // The whole set, renewed together.
  let renewals;
  let confirmed;
  // 3 s: a loaded machine keeps it (renewed each second).
  await d.withLeases(names, { ttl: 3, onRelease: (r) => { confirmed = r.confirmed; } }, async (set) => {
    assert.deepEqual(set.names, names);
    assert.equal(set.tokens.length, 3);
    const rows = (await cl.query('SELECT lock_name, token FROM dlock_leases WHERE lock_name = ANY($1) AND live ORDER BY lock_name', [names])).rows;
    assert.deepEqual(rows.map((r) => [r.lock_name, BigInt(r.token)]), names.map((n, i) => [n, set.tokens[i]]));
    await waitFor(() => set.renewals >= 3 || set.lost, 20000, 'three renewals of the set');
    assert.equal(set.lost, false);
    renewals = set.renewals;
  });
  assert.equal(confirmed, true, 'the set release is confirmed');
  const released = (await cl.query('SELECT bool_and(released) AS r FROM dlock_leases WHERE lock_name = ANY($1)', [names])).rows[0].r;
  assert.equal(released, true, 'released with the set');
  // The server's function call counts (track_functions = all; flushed within a second or so).
  const each = await waitFor(async () => {
    const n = await functionCalls(cl, db, 'dlock_renew_each');
    return n >= renewals ? n : 0;
  }, 8000, 'the renew_each call counts');
  // One per renewal (an attempt whose answer was lost to a timeout may add one more).
  assert.ok(each >= renewals && each <= renewals + 1, `one dlock_renew_each per renewal (${each} calls, ${renewals} renewals)`);
  assert.equal(await functionCalls(cl, db, 'dlock_renew'), 0, 'no dlock_renew');
  assert.equal(await functionCalls(cl, db, 'dlock_release_each'), 1, 'one dlock_release_each');
  d.close();
});

test('s4 permits: three contenders for two permits, at most two at a time, the third gets the one released', async () => {
  const cl = sharedCluster();
  const d = new Dlock(cl.conninfo());
  let holding = 0;
  let most = 0;
  const log = {};
  let sampling = true;
  let dbMost = 0;
  const sampler = (async () => {
    while (sampling) {
      const n = (await cl.query("SELECT count(*)::int AS n FROM dlock_leases WHERE lock_name LIKE 's4:p:%' AND live")).rows[0].n;
      dbMost = Math.max(dbMost, n);
      await sleep(30);
    }
  })();
  // ttl 3 s, renewed each second: a holds 400 ms, b until c has its permit.
  const ttl = 3;
  let cGot;
  const cHasIt = new Promise((r) => { cGot = r; });
  const contender = (id, hold) => d.withPermit('s4:p', { permits: 2, ttl, wait: 10 }, async (p) => {
    holding++;
    most = Math.max(most, holding);
    log[id] = { got: now(), slot: p.slot, name: p.name, token: p.token, expiresAt: p.expiresAt.getTime(), holding };
    await hold();
    log[id].lastExpiresAt = p.expiresAt.getTime();
    holding--;
    log[id].done = now();
  }).then(() => { log[id].released = now(); });
  const a = contender('a', () => sleep(400));
  const b = contender('b', () => within(PATIENCE_MS, cHasIt, 'the third contender'));
  await waitFor(() => holding === 2, PATIENCE_MS, 'two holders');
  const c = contender('c', async () => { cGot(); await sleep(100); });
  await within(PATIENCE_MS, Promise.all([a, b, c]), 'the three contenders');
  sampling = false;
  await sampler;
  assert.equal(most, 2, 'never more than two holders');
  assert.ok(dbMost <= 2, `never more than two live permits (${dbMost})`);
  assert.deepEqual(new Set([log.a.slot, log.b.slot]), new Set([1, 2]));
  assert.ok(log.c.got >= log.a.done, 'the third gets a permit only after one is released');
  assert.ok(log.c.got < log.b.done, 'the third gets the permit the first released, not the second');
  assert.equal(log.c.slot, log.a.slot);
  assert.equal(log.c.name, `s4:p:${log.a.slot}`);
  // Woken by the release, not by the expiry: granted (the server's clock
  // just after the grant is its expiresAt less the ttl) before a's lease,
  // as last granted or renewed, would have expired.
  assert.ok(log.c.expiresAt - ttl * 1000 < log.a.lastExpiresAt,
    `granted before a's lease would have expired (${log.c.expiresAt - ttl * 1000 - log.a.lastExpiresAt} ms)`);
  d.close();
});
