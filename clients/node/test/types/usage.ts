// Typed usage of the package, checked by tsc --noEmit (test/types.test.js).
// The @ts-expect-error lines must be errors: the declarations are not `any`.
import {
  Dlock, withLease, withLeases, withPermit, acquire, Election, fenced, fencedTransaction,
  LeaseLost, StaleToken, NotAcquired, parseConninfo, type Lease, type Leader, type PoolLike, type ClientLike,
} from 'dlock';

declare const pool: PoolLike;
declare const client: ClientLike;

export async function usage(): Promise<void> {
  const n: number = await withLease(pool, 'report', { ttl: 30, wait: 5 }, async ({ token, name, expiresAt, signal, progress, fenced: f }) => {
    const t: bigint = token;
    const s: string = name;
    const d: Date = expiresAt;
    signal.throwIfAborted();
    progress();
    await f(client, async (c) => c.query('INSERT INTO t VALUES ($1)', [s]), { mode: 'live' });
    return Number(t) + d.getTime();
  });
  const dl = new Dlock('host=a,b port=5432,5433 target_session_attrs=read-write', { owner: 'me' });
  const lease: Lease = await dl.acquire('x', { ttl: 10, progressTimeout: 2, onRelease: (r) => { const c: boolean = r.confirmed; void c; } });
  const { confirmed } = await lease.release();
  const ok: boolean = confirmed;
  await withLeases(dl, ['a', 'b'], { ttl: 5 }, (set) => set.tokens.length);
  await withPermit(pool, 'backup', { permits: 4, ttl: 60 }, (p) => p.slot);
  const l2 = await acquire('postgresql://a:5432,b:5432/app?target_session_attrs=read-write', 'y', { ttl: 3 });
  await fenced(client, l2, () => 1);
  await fencedTransaction(client, [{ name: 'y', token: l2.token }], () => 1);
  const e = new Election(pool, 'leader', { ttl: 10 });
  const mine: Lease = await e.campaign({ signal: AbortSignal.timeout(1000) });
  const who: Leader | null = await e.leader();
  for await (const l of e.observe({ signal: AbortSignal.timeout(1000), pollInterval: 0.5 })) {
    const tok: bigint = l.token;
    void tok;
  }
  await e.resign();
  try { /* ... */ } catch (err) {
    if (err instanceof LeaseLost) { const r: 'renewed-false' | 'deadline' | 'no-progress' | 'released-false' = err.reason; void r; }
    if (err instanceof StaleToken) { const c: '55T01' = err.code; void c; }
    if (err instanceof NotAcquired) { const w: number = err.wait; void w; }
  }
  const cfg = parseConninfo('host=a');
  const port: number = cfg.hosts[0].port;
  void [n, ok, mine, who, port];

  // @ts-expect-error ttl is required
  await withLease(pool, 'x', { wait: 1 }, () => 1);
  // @ts-expect-error tokens are bigint, not number
  const bad: number = lease.token;
  // @ts-expect-error permits is required for a permit
  await withPermit(pool, 'backup', { ttl: 60 }, () => 1);
  // @ts-expect-error no such fence mode
  await lease.fenced(client, () => 1, { mode: 'newest' });
  // @ts-expect-error the body's value type is kept
  const s2: string = await withLease(pool, 'x', { ttl: 1 }, () => 1);
  void [bad, s2];
}
