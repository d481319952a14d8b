#!/usr/bin/env node
// The Node client's bench (bench/workloads/86-client-node.sh): prints
// "key value" lines.
//
//   cycle:   one acquire + release through the client (Dlock on a pg.Pool
//            of one connection) against the same two SQL calls
//            (dlock_acquire, dlock_release) on one pg.Client, on random
//            names, in alternating rounds; per-cycle µs (medians) and the
//            ratio client / SQL.
//   renewal: single leases and one set held with a short ttl; the
//            dlock_renew and dlock_renew_each calls the server counted
//            (pg_stat_user_functions, track_functions = all in the
//            renewal sessions) per renewal the leases made.
// The connection comes from the PG* environment variables.
import pg from 'pg';
import { Dlock } from '../src/index.js';

const args = Object.fromEntries(process.argv.slice(2).map((a) => a.replace(/^--/, '').split('=')));
const rounds = Number(args.rounds || 16);
const cycles = Number(args.cycles || 250);
const names = 100000;
const out = (k, v) => process.stdout.write(`${k} ${v}\n`);
const rnd = () => `bench:node:${1 + Math.floor(Math.random() * names)}`;
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const n = s.length; return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2; };

const pool = new pg.Pool({ max: 1 });
const d = new Dlock(pool);
const raw = new pg.Client();
await raw.connect();

const own = new Dlock(''); // its own connections, from the PG* environment variables

async function clientSide(n, client = d) {
  const t = performance.now();
  for (let i = 0; i < n; i++) {
    const lease = await client.acquire(rnd(), { ttl: 30 });
    await lease.release();
  }
  return ((performance.now() - t) * 1000) / n;
}

async function sqlSide(n) {
  const t = performance.now();
  for (let i = 0; i < n; i++) {
    const name = rnd();
    const r = await raw.query("SELECT dlock_acquire($1, '30 s') AS token", [name]);
    if (r.rows[0].token !== null) await raw.query('SELECT dlock_release($1, $2)', [name, r.rows[0].token]);
  }
  return ((performance.now() - t) * 1000) / n;
}

// Warm-up, then alternating rounds (A B C, C B A, ...).
const sides = {
  client: (n) => clientSide(n, d),
  own: (n) => clientSide(n, own),
  sql: (n) => sqlSide(n),
};
const times = { client: [], own: [], sql: [] };
const cpu = { client: [], own: [], sql: [] };
for (const k of Object.keys(sides)) await sides[k](200);
for (let i = 0; i < rounds; i++) {
  const order = i % 2 === 0 ? ['client', 'own', 'sql'] : ['sql', 'own', 'client'];
  for (const k of order) {
    const c0 = process.cpuUsage();
    times[k].push(await sides[k](cycles));
    const c1 = process.cpuUsage(c0);
    cpu[k].push((c1.user + c1.system) / cycles);
  }
}
out('cycles_per_round', cycles);
out('rounds', rounds);
for (const k of Object.keys(times)) {
  out(`${k}_us`, median(times[k]).toFixed(1));
  out(`${k}_min`, Math.min(...times[k]).toFixed(1));
  out(`${k}_max`, Math.max(...times[k]).toFixed(1));
}
for (const k of Object.keys(cpu)) out(`${k}_cpu_us`, median(cpu[k]).toFixed(1));
for (const k of ['client', 'own']) {
  out(`${k}_cpu_ratio`, (median(cpu[k]) / median(cpu.sql)).toFixed(3));
  out(`${k}_ratio`, (median(times[k]) / median(times.sql)).toFixed(3));
  const rs = times[k].map((x, i) => x / times.sql[i]);
  out(`${k}_ratio_min`, Math.min(...rs).toFixed(3));
  out(`${k}_ratio_max`, Math.max(...rs).toFixed(3));
}
own.close();

// Renewal: what it costs in statements.
const calls = async () => {
  const r = await raw.query(`SELECT funcname, calls FROM pg_stat_user_functions WHERE funcname IN ('dlock_renew', 'dlock_renew_each')`);
  const m = { dlock_renew: 0, dlock_renew_each: 0 };
  for (const row of r.rows) m[row.funcname] = Number(row.calls);
  return m;
};
await raw.query('SELECT pg_stat_clear_snapshot()');
const before = await calls();
const rd = new Dlock(''); // from the environment; PGOPTIONS sets track_functions = all
const singles = await Promise.all([1, 2, 3, 4, 5].map((i) => rd.acquire(`bench:node:renew:${i}`, { ttl: 1.5 })));
const set = await rd.acquireAll(Array.from({ length: 10 }, (_, i) => `bench:node:set:${i}`), { ttl: 1.5 });
await new Promise((r) => setTimeout(r, 3200));
for (const l of [...singles, set]) await l.release();
const singleRenewals = singles.reduce((a, l) => a + l.renewals, 0);
const setRenewals = set.renewals;
// The renewal backend reports its counts when it exits (it closed with the last release).
let after;
const end = performance.now() + 15000;
for (;;) {
  await raw.query('SELECT pg_stat_clear_snapshot()');
  after = await calls();
  if ((after.dlock_renew - before.dlock_renew >= singleRenewals && after.dlock_renew_each - before.dlock_renew_each >= setRenewals) || performance.now() > end) break;
  await new Promise((r) => setTimeout(r, 100));
}
out('single_leases', singles.length);
out('single_renewals', singleRenewals);
out('renew_calls', after.dlock_renew - before.dlock_renew);
out('renew_per_lease_renewal', ((after.dlock_renew - before.dlock_renew) / singleRenewals).toFixed(2));
out('set_names', set.names.length);
out('set_renewals', setRenewals);
out('renew_each_calls', after.dlock_renew_each - before.dlock_renew_each);
out('renew_each_per_set_renewal', ((after.dlock_renew_each - before.dlock_renew_each) / setRenewals).toFixed(2));
await raw.end();
await pool.end();
