// Scenario 5 (docs/clients.md): election.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { Dlock, Election } from '../src/index.js';
import { sharedCluster, cleanupAll, Child, waitFor, PATIENCE_MS } from './lib/harness.js';

after(cleanupAll);

test('s5 election: the leader is killed, the other takes over with a greater token; observers (events and polling) see both', async () => {
  const cl = sharedCluster();
  const name = 's5:leader';
  const d = new Dlock(cl.conninfo());
  const e = new Election(d, name, { ttl: 2 });
  const ac = new AbortController();
  const byEvents = e.observe({ signal: ac.signal });
  const byPolling = e.observe({ signal: ac.signal, listen: false, pollInterval: 0.2 });
  const seen = { events: [], polling: [] };
  const collect = async (obs, into) => { for await (const l of obs) into.push(l); };
  const done = [collect(byEvents, seen.events), collect(byPolling, seen.polling)];
  try {
  await waitFor(() => byEvents.mode && byPolling.mode, PATIENCE_MS, 'the observers to start');
  assert.equal(byEvents.mode, 'listen', 'dlock.notify is on: events are followed');
  assert.equal(byPolling.mode, 'poll');

  // Candidates with a ttl of 3 s, which a loaded machine renews in time.
  const a = new Child('candidate.js', [cl.conninfo(), name, 'candidate-a', '3']);
  const la = await a.waitEvent((ev) => ev.event === 'leader', PATIENCE_MS, 'a to lead');
  const b = new Child('candidate.js', [cl.conninfo(), name, 'candidate-b', '3']);
  await b.waitEvent((ev) => ev.event === 'campaigning', PATIENCE_MS, 'b to campaign');
  const current = await e.leader();
  assert.equal(current.owner, 'candidate-a');
  assert.equal(current.token, BigInt(la.token));
  a.signal('SIGKILL');
  const lb = await b.waitEvent((ev) => ev.event === 'leader', PATIENCE_MS, 'b to take over');
  assert.ok(BigInt(lb.token) > BigInt(la.token), 'the new leader has a greater token');
  const want = [['candidate-a', BigInt(la.token)], ['candidate-b', BigInt(lb.token)]];
  const got = (list) => list.map((l) => [l.owner, l.token]);
  await waitFor(() => seen.events.length >= 2 && seen.polling.length >= 2, PATIENCE_MS, 'both observers to see both leaders');
  assert.deepEqual(got(seen.events), want, 'the event observer saw both, once each, in token order');
  assert.deepEqual(got(seen.polling), want, 'the polling observer saw both, once each, in token order');
  assert.equal((await e.leader()).owner, 'candidate-b');
  } finally {
    ac.abort();
    await Promise.all(done);
    d.close();
  }
});
