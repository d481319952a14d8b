// The scenario checks that scenario 9 runs again under a planted bug: each
// throws (an assertion) when what docs/clients.md promises does not hold.
import assert from 'node:assert/strict';
import { Dlock, withLease, LeaseLost } from '../../src/index.js';
import { waitFor, sleep, now, PATIENCE_MS } from './harness.js';

/** Fails after ms: so that a check never hangs. */
export function within(ms, promise, what) {
  let t;
  return Promise.race([
    promise,
    new Promise((_, rej) => { t = setTimeout(() => rej(new Error(`${what}: not settled within ${ms} ms`)), ms); }),
  ]).finally(() => clearTimeout(t));
}

/**
 * Scenario 2: pg_terminate_backend on the renewal connection's backend; the
 * lease survives with its token and keeps being renewed, and its release is
 * confirmed.
 */
export async function checkRenewalConnectionTerminated(cluster, name) {
  const d = new Dlock(cluster.conninfo());
  // 4 s: the renew after the termination opens a new connection within the
  // lease's remaining time, which a loaded machine was seen to miss with 1.5 s.
  const ttl = 4;
  let lease;
  const value = await within(PATIENCE_MS, withLease(d, name, { ttl }, async (l) => {
    lease = l;
    await waitFor(() => l.renewals >= 1 && d.renewalPid, 2 * ttl * 1000, 'a first renewal');
    const pid = d.renewalPid;
    const r = await cluster.query('SELECT pg_terminate_backend($1) AS ok', [pid]);
    assert.equal(r.rows[0].ok, true, 'the renewal backend was terminated');
    const before = l.renewals;
    // Two more ttls' worth of renewals, on a new connection.
    await waitFor(() => l.renewals >= before + 3, 4 * ttl * 1000, 'renewals after the termination');
    assert.notEqual(d.renewalPid, pid, 'renewals run on a new connection');
    const row = (await cluster.query('SELECT token, live FROM dlock_leases WHERE lock_name = $1', [name])).rows[0];
    assert.equal(BigInt(row.token), l.token, 'the lease keeps its token');
    assert.equal(row.live, true, 'the lease is live');
    assert.equal(l.lost, false);
    assert.equal(l.signal.aborted, false);
    return 'ok';
  }), 'the lease scope');
  assert.equal(value, 'ok');
  assert.equal(lease.confirmed, true, 'the release is confirmed');
  d.close();
}

/**
 * Scenario 7, progress: a body that stops reporting progress loses the
 * lease at its progress deadline (signal aborted, LeaseLost no-progress),
 * and another session takes it over once the server lets it expire.
 */
export async function checkProgressDeadline(cluster, name) {
  const d = new Dlock(cluster.conninfo());
  // A progress timeout of 1.5 s, reported every 0.1 s; a ttl of 6 s (renewed
  // every 2 s), whose deadline would come at least 4 s after the last
  // progress: the loss at the progress deadline is told apart from it with
  // 2.5 s to spare for a loaded machine.
  const ttl = 6;
  const progressTimeout = 1.5;
  let lease;
  let lastProgress;
  let abortedAt;
  const scope = withLease(d, name, { ttl, progressTimeout }, async (l) => {
    lease = l;
    l.signal.addEventListener('abort', () => { abortedAt = now(); });
    for (let i = 0; i < 4; i++) {
      await sleep(100);
      l.progress();
      lastProgress = now();
    }
    await new Promise(() => {}); // hangs: no more progress
  });
  const err = await within(15000, scope.then(() => null, (e) => e), 'the scope of a body without progress');
  const endedAt = now();
  assert.ok(err instanceof LeaseLost, `the scope ends with LeaseLost (got ${err})`);
  assert.equal(err.reason, 'no-progress');
  assert.ok(lease.signal.aborted && lease.signal.reason === err, 'the signal aborted with the LeaseLost');
  assert.ok(abortedAt - lastProgress >= progressTimeout * 1000 - 5, 'not before the progress deadline');
  assert.ok(endedAt - lastProgress < progressTimeout * 1000 + 2500, `at the progress deadline (+${Math.round(endedAt - lastProgress)} ms)`);
  // Another session takes it over at the server's expiry (not renewed after the loss).
  const r = await cluster.query("SELECT dlock_acquire($1, '5 s', $2::interval) AS token", [name, `${ttl + 3} s`]);
  const tookAt = now();
  assert.ok(r.rows[0].token !== null, 'another session takes the lease over');
  assert.ok(BigInt(r.rows[0].token) > lease.token);
  // The server's expiry is at most a ttl after the loss (the last renewal
  // came before it): renewal stopped at the progress deadline.
  assert.ok(tookAt - lastProgress < (progressTimeout + ttl + 2) * 1000, 'renewal stopped at the progress deadline');
  await cluster.query('SELECT dlock_release($1, $2)', [name, r.rows[0].token]);
  d.close();
}
