// Rules of docs/clients.md that no numbered scenario covers on its own.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { Dlock, NotAcquired, parseConninfo } from '../src/index.js';
import { sharedCluster, cleanupAll, now, Child, PATIENCE_MS } from './lib/harness.js';
import { within } from './lib/checks.js';

after(cleanupAll);

test('rules: an acquire that waited longer than a third of the ttl (even longer than the ttl) renews before the body starts', async () => {
  const cl = sharedCluster();
  const d = new Dlock(cl.conninfo());
  // Held elsewhere for 4 s, never released: the acquire waits for its expiry.
  // (A ttl of 3 s: the renew before the body has a second to answer, which a
  // loaded machine needs.)
  await cl.query("SELECT dlock_acquire('rules:waited', '4 s')");
  const t0 = now();
  const ttl = 3;
  const seen = await d.withLease('rules:waited', { ttl, wait: 10 }, async (lease) => ({
    waited: now() - t0,
    renewals: lease.renewals,
    left: lease.deadline - now(),
    lost: lease.lost,
  }));
  assert.ok(seen.waited > ttl * 1000, `the acquire waited longer than the ttl (${Math.round(seen.waited)} ms)`);
  assert.equal(seen.lost, false);
  assert.ok(seen.renewals >= 1, 'renewed before the body');
  assert.ok(seen.left >= (ttl * 1000 * 2) / 3 - 50, `the body starts with two thirds of the ttl left (${Math.round(seen.left)} ms)`);
  // A lease still held after wait: NotAcquired.
  await cl.query("SELECT dlock_acquire('rules:held', '30 s')");
  const t1 = now();
  await assert.rejects(d.withLease('rules:held', { ttl, wait: 0.3 }, () => assert.fail('the body must not run')), NotAcquired);
  assert.ok(now() - t1 >= 250, 'waited');
  d.close();
});

test('rules: connection strings with several hosts and target_session_attrs', () => {
  const kw = parseConninfo("host=db1,db2 port=5433,5434 dbname=app user='u s' target_session_attrs=read-write connect_timeout=3");
  assert.deepEqual(kw.hosts, [{ host: 'db1', port: 5433 }, { host: 'db2', port: 5434 }]);
  assert.equal(kw.user, 'u s');
  assert.equal(kw.database, 'app');
  assert.equal(kw.targetSessionAttrs, 'read-write');
  assert.equal(kw.connectTimeout, 3);
  const url = parseConninfo('postgresql://me:p%40ss@a:1,[::1]:2,b/db?target_session_attrs=read-write&application_name=x');
  assert.deepEqual(url.hosts, [{ host: 'a', port: 1 }, { host: '::1', port: 2 }, { host: 'b', port: 5432 }]);
  assert.equal(url.password, 'p@ss');
  assert.equal(url.applicationName, 'x');
  assert.throws(() => parseConninfo('host=a,b,c port=1,2'), /3 hosts but 2 ports/);
  assert.throws(() => parseConninfo('host=a target_session_attrs=writable'), /target_session_attrs/);
});

test('rules: nothing of the client keeps the process alive once every lease is released', async () => {
  const child = new Child('exit.js', [sharedCluster().conninfo()]);
  const done = await child.waitEvent((e) => e.event === 'done', PATIENCE_MS, 'the child to finish its leases');
  assert.ok(done.renewals >= 1);
  // A timer or connection left behind would keep the child alive for ever
  // (a renewal, a ref'd socket) or for 20 s and more (the set's and the
  // permit's renewal and deadline timers, ttl 60 s): 15 s tells them apart
  // from a slow exit on a loaded machine.  The child reports what keeps
  // it alive a second after 'done', should it still run.
  const { code } = await within(15000, child.exited, 'the child to exit by itself').catch((err) => {
    const alive = child.events.find((e) => e.event === 'alive');
    if (alive) err.message += ` (still alive a second after done, kept by ${alive.resources.join(', ')})`;
    throw err;
  });
  assert.equal(code, 0);
});

test('rules: expiresAt is the server expiry of the last grant or renew', async () => {
  const cl = sharedCluster();
  const d = new Dlock(cl.conninfo());
  const ttl = 6; // renewed after 2 s; a loaded machine keeps it without a loss
  const t0 = now();
  const lease = await d.acquire('rules:expires', { ttl });
  const granted = lease.expiresAt.getTime();
  const server = async () => (await cl.query("SELECT expires_at FROM dlock_leases WHERE lock_name = 'rules:expires'")).rows[0].expires_at.getTime();
  // expiresAt is the server's clock read just after the grant or renew,
  // plus the ttl: never earlier than the row's expires_at (pg reads
  // timestamps to the microsecond, Date keeps milliseconds: -1), and later
  // by no more than that call lasted, which is less than the time since t0
  // (the acquire and every renew since were sent and answered after it).
  // expiresAt is read before and after the row, a renew may land between.
  const close = async (what) => {
    let seen;
    for (let i = 0; i < 3; i++) {
      const e1 = lease.expiresAt.getTime();
      const row = await server();
      const e2 = lease.expiresAt.getTime();
      const bound = now() - t0;
      seen = { e1: e1 - row, e2: e2 - row, bound: Math.round(bound) };
      if ([seen.e1, seen.e2].some((diff) => diff >= -1 && diff <= bound + 1)) return;
    }
    assert.fail(`${what}: expiresAt - expires_at = ${seen.e1} ms (read before the row), ${seen.e2} ms (after), not in [-1, ${seen.bound}] ms`);
  };
  await close('after the grant');
  while (lease.renewals < 1) await new Promise((r) => setTimeout(r, 20));
  assert.ok(lease.expiresAt.getTime() > granted, 'moved by the renewal');
  await close('after a renewal');
  assert.deepEqual(await lease.release(), { confirmed: true });
  d.close();
});
