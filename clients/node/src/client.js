// The Dlock client: acquires (one name, a set, a permit) through the
// application's pg.Pool or connections of its own, one renewal connection
// for all its leases, and the lease scopes.
import { NotAcquired, LeaseLost } from './errors.js';
import { parseConninfo, configFromPgOptions } from './conninfo.js';
import { cancelQuery, isConnectionError, timedQuery } from './connect.js';
import { ConninfoSource, PoolSource } from './source.js';
import { RenewalConnection } from './renewal.js';
import { Lease } from './lease.js';

const now = () => performance.now();

// The target list is evaluated in order: clock_timestamp() reads the
// server's clock just after the grant (the lease's expires_at is the grant
// time plus ttl), so expiresAt is that reading plus ttl.
// (`at`: the server's clock just after the call; intervals are sent as text, e.g. '1.5 s')
const AT = 'clock_timestamp() AS at';
const ACQUIRE_ONE = `SELECT dlock_acquire($1::text, $2::interval, $3::interval, $4::text) AS token,
  ${AT}`;
const ACQUIRE_ALL = `SELECT dlock_acquire_all($1::text[], $2::interval, $3::interval, $4::text) AS tokens,
  ${AT}`;
const ACQUIRE_ANY = `SELECT x.lock_name, x.token, ${AT}
  FROM (SELECT * FROM dlock_acquire_any($1::text[], $2::interval, $3::interval, $4::text) OFFSET 0) x`;

function isPool(x) {
  return x && typeof x === 'object' && typeof x.connect === 'function' && typeof x.query === 'function' && 'totalCount' in x;
}

function checkTtl(opts, what) {
  const ttl = opts.ttl;
  if (typeof ttl !== 'number' || !(ttl > 0) || !Number.isFinite(ttl)) throw new TypeError(`${what}: ttl must be a positive number of seconds`);
  const wait = opts.wait ?? 0;
  if (typeof wait !== 'number' || !(wait >= 0) || !Number.isFinite(wait)) throw new TypeError(`${what}: wait must be a number of seconds >= 0`);
  const pt = opts.progressTimeout;
  if (pt !== undefined && (typeof pt !== 'number' || !(pt > 0))) throw new TypeError(`${what}: progressTimeout must be a positive number of seconds`);
  return { ttl, wait };
}

/** Seconds as interval input text (never in exponent notation). */
export function secs(x) {
  return `${x.toFixed(6)} s`;
}

function refSleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

/**
 * A dlock client: where acquires and releases run (the application's
 * pg.Pool, or connections of its own from a connection string), and one
 * renewal connection of its own for all its leases.
 */
export class Dlock {
  /**
   * @param {import('pg').Pool | string} source  a pg.Pool, or a connection string (keyword/value or URL; several hosts and target_session_attrs allowed)
   * @param {{ renewalConninfo?: string, owner?: string }} [options]
   */
  constructor(source, options = {}) {
    const renewalConfig = options.renewalConninfo ? parseConninfo(options.renewalConninfo) : undefined;
    if (isPool(source)) this._source = new PoolSource(source, renewalConfig);
    else if (typeof source === 'string') this._source = new ConninfoSource(parseConninfo(source));
    else if (source && typeof source === 'object' && !Array.isArray(source)) this._source = new ConninfoSource(configFromPgOptions(source));
    else throw new TypeError('Dlock: source must be a pg.Pool or a connection string');
    this._renewal = new RenewalConnection(renewalConfig ?? this._source.config);
    this.owner = options.owner;
  }

  /** The backend pid of the renewal connection (null while none is open). */
  get renewalPid() {
    return this._renewal.pid;
  }

  /** The connection target of the renewal connection (and of election observers). */
  get config() {
    return this._renewal.config;
  }

  /** @internal one acquire call, retried on connection errors until `wait` ends */
  async _acquire(kind, names, opts, what) {
    const { ttl, wait } = checkTtl(opts, what);
    const signal = opts.signal;
    if (signal && signal.aborted) throw signal.reason;
    const owner = opts.owner ?? this.owner ?? null;
    const start = now();
    const waitMs = wait * 1000;
    let pause = 50;
    let result;
    let sentAt;
    for (;;) {
      sentAt = now();
      const waitLeft = Math.max(0, waitMs - (sentAt - start)) / 1000;
      let b;
      let onAbort;
      try {
        b = await this._source.borrow(Math.max(waitLeft * 1000, 10000));
        sentAt = now();
        const client = b.client;
        if (signal) {
          onAbort = () => { cancelQuery(client); };
          signal.addEventListener('abort', onAbort, { once: true });
        }
        const text = kind === 'one' ? ACQUIRE_ONE : kind === 'all' ? ACQUIRE_ALL : ACQUIRE_ANY;
        const arg = kind === 'one' ? names[0] : names;
        const r = await timedQuery(client, text, [arg, secs(ttl), secs(waitLeft), owner], waitLeft * 1000 + Math.max(10000, ttl * 1000), `acquire of ${names[0]}`);
        b.done();
        b = null;
        result = r.rows[0] || null;
      } catch (err) {
        if (b) b.done(isConnectionError(err));
        if (signal && signal.aborted) throw signal.reason;
        if (!isConnectionError(err) || now() - start + pause >= waitMs) throw err;
        await refSleep(pause);
        pause = Math.min(pause * 2, 1000);
        continue;
      } finally {
        if (onAbort) signal.removeEventListener('abort', onAbort);
      }
      break;
    }
    let tokens = null;
    let got = names;
    if (result) {
      if (kind === 'one') tokens = result.token == null ? null : [BigInt(result.token)];
      else if (kind === 'all') tokens = result.tokens == null ? null : result.tokens.map((t) => BigInt(t));
      else { tokens = [BigInt(result.token)]; got = [result.lock_name]; }
    }
    if (!tokens) throw new NotAcquired(names, wait);
    const lease = new Lease(this, {
      set: kind === 'all',
      names: got,
      tokens,
      ttl,
      sentAt,
      expiresAt: new Date(result.at.getTime() + ttl * 1000),
      progressTimeout: opts.progressTimeout,
      slot: kind === 'any' ? Number(got[0].slice(got[0].lastIndexOf(':') + 1)) : undefined,
    });
    if (signal && signal.aborted) {
      await lease.release().catch(() => {});
      throw signal.reason;
    }
    // The body starts with at least two thirds of the ttl left: after an
    // acquire that waited longer than a third of the ttl, renew first. Its
    // deadline (from the send) may even have passed if the acquire waited
    // longer than the ttl; but no work has been done under the lease yet,
    // and a renew that returns true proves the token still holds a live
    // lease. So this first renew is retried until the latest possible
    // server expiry (the answer's arrival plus the ttl), and its success
    // sets the deadline (its own send plus the ttl) as any renew does.
    const receivedAt = now();
    if (receivedAt - sentAt > (ttl * 1000) / 3) {
      lease.deadline = receivedAt + ttl * 1000;
      lease._start();
      await lease._renewNow();
    } else lease._start();
    return lease;
  }

  /**
   * Acquires the lease on `name` (dlock_acquire), waiting up to `wait`
   * seconds; throws NotAcquired when it is still held then. The lease is
   * renewed in the background until `lease.release()`.
   * @param {string} name
   * @param {import('../index.js').LeaseOptions} opts
   * @returns {Promise<Lease>}
   */
  acquire(name, opts) {
    if (typeof name !== 'string' || !name) throw new TypeError('acquire: name must be a non-empty string');
    return this._acquire('one', [name], opts, 'acquire');
  }

  /**
   * Acquires every name of `names` or none (dlock_acquire_all): one lease
   * set, renewed with one dlock_renew_each per renewal.
   * @param {string[]} names
   * @param {import('../index.js').LeaseOptions} opts
   * @returns {Promise<Lease>}
   */
  acquireAll(names, opts) {
    if (!Array.isArray(names) || !names.length || names.some((n) => typeof n !== 'string' || !n)) {
      throw new TypeError('acquireAll: names must be a non-empty array of non-empty strings');
    }
    return this._acquire('all', names, opts, 'acquireAll');
  }

  /**
   * Acquires one of the permits `base:1` … `base:N` (dlock_acquire_any),
   * the first free one in that order.
   * @param {string} base
   * @param {import('../index.js').PermitOptions} opts
   * @returns {Promise<Lease>}
   */
  acquirePermit(base, opts) {
    const n = opts && opts.permits;
    if (!Number.isInteger(n) || n < 1) throw new TypeError('acquirePermit: permits must be a whole number >= 1');
    const names = Array.from({ length: n }, (_, i) => `${base}:${i + 1}`);
    return this._acquire('any', names, opts, 'acquirePermit');
  }

  /** @see withLease */
  withLease(name, opts, fn) {
    return scope(() => this.acquire(name, opts), opts, fn);
  }

  /** @see withLeases */
  withLeases(names, opts, fn) {
    return scope(() => this.acquireAll(names, opts), opts, fn);
  }

  /** @see withPermit */
  withPermit(base, opts, fn) {
    return scope(() => this.acquirePermit(base, opts), opts, fn);
  }

  /**
   * Closes the connections this client keeps idle. Held leases are not
   * released (release them first); their renewal connection closes when the
   * last one ends.
   */
  close() {
    this._source.close();
  }
}

/**
 * The lease scope: acquire, run the body with the lease, release.
 * @template T
 */
async function scope(acquireFn, opts, fn) {
  if (typeof fn !== 'function') throw new TypeError('the body must be a function');
  const lease = await acquireFn();
  // Cancelling the scope aborts the body's signal (the lease stays held until the body settles).
  if (opts.signal) lease._link(opts.signal);
  const body = Promise.resolve().then(() => fn(lease));
  body.catch(() => {});
  let outcome;
  try {
    outcome = await Promise.race([
      body.then((value) => ({ ok: true, value }), (error) => ({ ok: false, error })),
      lease.lossPromise,
    ]);
  } catch (lost) {
    // Lost: at once, without waiting for the body (whose signal has aborted).
    report(opts, lease);
    throw lost;
  }
  if (!outcome.ok) {
    // The body's error wins over whatever the release says.
    try {
      await lease.release();
    } catch {
      /* lost or unconfirmed: the body's error is what the caller sees */
    }
    report(opts, lease);
    throw outcome.error;
  }
  try {
    await lease.release();
  } finally {
    report(opts, lease);
  }
  return outcome.value;
}

function report(opts, lease) {
  if (typeof opts.onRelease === 'function') {
    try {
      opts.onRelease({ confirmed: lease.confirmed === true, lost: lease.lostError, lease });
    } catch {
      /* the callback's own error does not change the scope's outcome */
    }
  }
}

// ---- functions on a source: one Dlock client per pool or connection string

const byObject = new WeakMap();
const byString = new Map();

/**
 * The Dlock client of a source: `source` itself when it is one, else the
 * one client this module keeps per pg.Pool or connection string (so that
 * one renewal connection serves all their leases).
 * @param {Dlock | import('pg').Pool | string} source
 * @returns {Dlock}
 */
export function clientFor(source) {
  if (source instanceof Dlock) return source;
  if (typeof source === 'string') {
    let d = byString.get(source);
    if (!d) { d = new Dlock(source); byString.set(source, d); }
    return d;
  }
  if (source && typeof source === 'object') {
    let d = byObject.get(source);
    if (!d) { d = new Dlock(source); byObject.set(source, d); }
    return d;
  }
  throw new TypeError('source must be a Dlock, a pg.Pool or a connection string');
}

/**
 * Runs `fn(lease)` while holding the lease on `name`: acquires it (waiting
 * up to `opts.wait` s; NotAcquired otherwise), renews it every ttl/3 on a
 * connection of its own, releases it when fn settles, and resolves with
 * fn's value. When the lease is lost, `lease.signal` aborts with the
 * LeaseLost as its reason and the scope rejects with it at once.
 * @template T
 * @param {Dlock | import('pg').Pool | string} source
 * @param {string} name
 * @param {import('../index.js').LeaseOptions} opts
 * @param {(lease: Lease) => Promise<T>|T} fn
 * @returns {Promise<T>}
 */
export function withLease(source, name, opts, fn) {
  return clientFor(source).withLease(name, opts, fn);
}

/** As withLease, for a set of names acquired all-or-none. */
export function withLeases(source, names, opts, fn) {
  return clientFor(source).withLeases(names, opts, fn);
}

/** As withLease, for one of the permits `base:1` … `base:opts.permits`. */
export function withPermit(source, base, opts, fn) {
  return clientFor(source).withPermit(base, opts, fn);
}

/** Acquires a lease without a scope: release it with `lease.release()`. */
export function acquire(source, name, opts) {
  return clientFor(source).acquire(name, opts);
}

/** Acquires a set without a scope. */
export function acquireAll(source, names, opts) {
  return clientFor(source).acquireAll(names, opts);
}

/** Acquires a permit without a scope. */
export function acquirePermit(source, base, opts) {
  return clientFor(source).acquirePermit(base, opts);
}

export { LeaseLost };
