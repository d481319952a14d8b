// Scenario 3 (docs/clients.md): server restart and outage.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { Dlock, LeaseLost } from '../src/index.js';
import { startCluster, cleanupAll, waitFor, now } from './lib/harness.js';
import { within } from './lib/checks.js';

after(cleanupAll);

test('s3 server restart and outage: a restart shorter than the ttl is survived; an outage past the ttl loses the lease by its deadline', async () => {
  const cl = await startCluster('s3');
  const d = new Dlock(cl.conninfo('connect_timeout=2'));
  // A restart shorter than the ttl (15 s: a loaded machine's restart takes
  // seconds, and it must take less than two thirds of the ttl).
  const lease = await d.acquire('s3:restart', { ttl: 15 });
  const t0 = now();
  await cl.restart();
  const restartMs = now() - t0;
  assert.ok(restartMs < 10000, `the restart is shorter than two thirds of the ttl (${Math.round(restartMs)} ms)`);
  const r0 = lease.renewals;
  await waitFor(() => lease.renewals >= r0 + 2 || lease.lost, 30000, 'renewals after the restart');
  assert.equal(lease.lost, false, `the lease survives the restart (${lease.lostError})`);
  const row = (await cl.query("SELECT token, live FROM dlock_leases WHERE lock_name = 's3:restart'")).rows[0];
  assert.equal(BigInt(row.token), lease.token);
  assert.equal(row.live, true);
  assert.deepEqual(await lease.release(), { confirmed: true });

  // A server down past the ttl: lost no later than the deadline (plus scheduling slack).
  const l2 = await d.acquire('s3:outage', { ttl: 2 });
  await waitFor(() => l2.renewals >= 1, 3000, 'a first renewal');
  const lost = new Promise((resolve) => l2.signal.addEventListener('abort', () => resolve(now())));
  await cl.stop('fast');
  const deadlineAtStop = l2.deadline;
  const lostAt = await within(15000, lost, 'the loss during the outage');
  assert.ok(l2.lostError instanceof LeaseLost);
  assert.equal(l2.lostError.reason, 'deadline');
  assert.ok(l2.deadline <= deadlineAtStop + 1, 'no renewal succeeded during the outage');
  assert.ok(lostAt >= l2.deadline, 'not before the deadline');
  // (scheduling slack: a loaded machine starves the process for seconds)
  assert.ok(lostAt - l2.deadline < 10000, `reported at the deadline (+${Math.round(lostAt - l2.deadline)} ms)`);
  await assert.rejects(l2.release(), LeaseLost, 'a lost lease is not released');
  assert.equal(l2.confirmed, false);
  d.close();
});
