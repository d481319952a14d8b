// Scenario 7 (docs/clients.md): leaving the body.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { Dlock, withLease, LeaseLost } from '../src/index.js';
import { sharedCluster, cleanupAll } from './lib/harness.js';
import { checkProgressDeadline, within } from './lib/checks.js';

after(cleanupAll);

async function leaseRow(cl, name) {
  return (await cl.query('SELECT token, released, live FROM dlock_leases WHERE lock_name = $1', [name])).rows[0];
}

test('s7 leaving the body: an exception releases the lease and is re-raised; cancelling releases it; no progress loses it', async () => {
  const cl = sharedCluster();
  const d = new Dlock(cl.conninfo());
  // (ttls of 10 s: no scope here is about the ttl, none loses its lease on a loaded machine)
  // An exception in the body: released (confirmed), the exception re-raised as it is.
  const boom = new Error('boom');
  let released;
  let token;
  await assert.rejects(
    withLease(d, 's7:exception', { ttl: 10, onRelease: (r) => { released = r; } }, async (lease) => { token = lease.token; throw boom; }),
    (err) => err === boom,
  );
  assert.equal(released.confirmed, true, 'the release is confirmed');
  let row = await leaseRow(cl, 's7:exception');
  assert.equal(BigInt(row.token), token);
  assert.equal(row.released, true, 'released, not left to expire');

  // Cancelling the body (the caller's AbortSignal): the body's signal aborts, the lease is released.
  const ac = new AbortController();
  const reason = new Error('cancelled by the caller');
  let started;
  const started$ = new Promise((r) => { started = r; });
  const scope = withLease(d, 's7:cancel', { ttl: 10, signal: ac.signal }, async (lease) => {
    token = lease.token;
    started();
    await new Promise((_, reject) => lease.signal.addEventListener('abort', () => reject(lease.signal.reason)));
  });
  await started$;
  ac.abort(reason);
  await assert.rejects(within(20000, scope, 'the cancelled scope'), (err) => err === reason);
  row = await leaseRow(cl, 's7:cancel');
  assert.equal(BigInt(row.token), token);
  assert.equal(row.released, true, 'a cancelled body releases its lease');

  // A body that returns under a live lease: its value, released.
  assert.equal(await withLease(d, 's7:value', { ttl: 10 }, async () => 42), 42);
  assert.equal((await leaseRow(cl, 's7:value')).released, true);
  d.close();

  // A body that stops reporting progress loses the lease at its progress deadline.
  await checkProgressDeadline(cl, 's7:progress');
  assert.ok(LeaseLost);
});
