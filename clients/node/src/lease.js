// A held lease (one name, a set of names, or a permit): its deadline on the
// monotonic clock, its background renewal, its loss, its release and its
// fenced transactions.
import { DlockError, LeaseLost, mapStale } from './errors.js';
import { isConnectionError, timedQuery } from './connect.js';
import { mutation } from './testing.js';

const now = () => performance.now();

// clock_timestamp() after the call (the target list is evaluated in order).
// (`at`: the server's clock just after the call; intervals are sent as text, e.g. '1.5 s')
const RENEW_ONE = `SELECT dlock_renew($1::text, $2::bigint, $3::interval) AS ok,
  clock_timestamp() AS at`;
const RENEW_EACH = `SELECT dlock_renew_each($1::text[], $2::bigint[], $3::interval) AS ok,
  clock_timestamp() AS at`;
const RELEASE_ONE = 'SELECT dlock_release($1::text, $2::bigint) AS ok';
const RELEASE_EACH = 'SELECT dlock_release_each($1::text[], $2::bigint[]) AS ok';

const MODES = new Set(['latest', 'live', 'seen']);

/**
 * Runs `fn(client)` in a transaction on `client` that starts with
 * `SELECT dlock_check(name, token, mode)` for each pair, and commits. A
 * rejected check or write (55T01) becomes StaleToken; the transaction is
 * rolled back on any error.
 * @template T
 * @param {import('pg').ClientBase | import('pg').Pool} client
 * @param {{name: string, token: bigint|string|number}[]} pairs
 * @param {(client: any) => Promise<T>|T} fn
 * @param {{mode?: 'latest'|'live'|'seen', beforeCommit?: () => void}} [opts]
 * @returns {Promise<T>}
 */
export async function fencedTransaction(client, pairs, fn, opts = {}) {
  const mode = opts.mode ?? 'latest';
  if (!MODES.has(mode)) throw new TypeError(`fenced: mode must be latest, live or seen, not "${mode}"`);
  if (typeof fn !== 'function') throw new TypeError('fenced: fn must be a function');
  if (!pairs.length) throw new TypeError('fenced: no lease to check');
  // A pool: one of its connections for the transaction.
  if (typeof client.connect === 'function' && typeof client.release !== 'function' && 'totalCount' in client) {
    const c = await client.connect();
    try {
      const result = await fencedTransaction(c, pairs, fn, opts);
      c.release();
      return result;
    } catch (err) {
      // A connection that failed is destroyed, not given back to the pool.
      c.release(err instanceof Error && !(err instanceof DlockError) && isConnectionError(err) ? err : undefined);
      throw err;
    }
  }
  await client.query('BEGIN');
  try {
    for (const p of pairs) {
      await client.query('SELECT dlock_check($1::text, $2::bigint, $3::text)', [p.name, String(p.token), mode]);
    }
    const result = await fn(client);
    if (opts.beforeCommit) opts.beforeCommit();
    const c = await client.query('COMMIT');
    if (c && c.command === 'ROLLBACK') {
      throw Object.assign(new Error('fenced: the transaction was rolled back (a statement in it failed)'), { code: '25P02' });
    }
    return result;
  } catch (err) {
    try {
      await client.query('ROLLBACK');
    } catch {
      /* the connection is gone: nothing to roll back */
    }
    throw mapStale(err);
  }
}

/**
 * A lease held by this process: one name, a set of names, or a permit.
 * Renewed in the background every ttl/3 until released or lost.
 */
export class Lease {
  /**
   * @param {import('./client.js').Dlock} dlock
   * @param {object} f
   */
  constructor(dlock, f) {
    this._dlock = dlock;
    this._set = f.set;
    /** @type {string[]} */
    this.names = f.names;
    /** @type {bigint[]} */
    this.tokens = f.tokens;
    /** The (first) lock name. */
    this.name = f.names[0];
    /** The (first) fencing token. */
    this.token = f.tokens[0];
    /** For a permit, its slot number (1 … permits); else undefined. */
    this.slot = f.slot;
    /** The ttl in seconds. */
    this.ttl = f.ttl;
    this._ttlMs = f.ttl * 1000;
    this._ttlText = `${f.ttl.toFixed(6)} s`;
    /** The server's expiry after the last grant or renew (server clock). */
    this.expiresAt = f.expiresAt;
    /** Local deadline, performance.now() milliseconds: last successful acquire or renew sent, plus ttl. */
    this.deadline = f.sentAt + this._ttlMs;
    this._lastSent = f.sentAt;
    /** Successful renewals so far. */
    this.renewals = 0;
    /** The last renewal error (cleared by a successful renew). */
    this.lastError = null;
    /** After release: true when the release returned true; false when unconfirmed; null before. */
    this.confirmed = null;
    /** @type {LeaseLost | null} */
    this.lostError = null;
    this._state = 'held';
    /** @type {AbortController | null} made at the first use of `signal` */
    this._controller = null;
    this._abortReason = undefined;
    this._progressMs = f.progressTimeout ? f.progressTimeout * 1000 : 0;
    this._lastProgress = now();
    this._timers = { renew: null, deadline: null, progress: null };
    this._inFlight = false;
    this._renewWaiters = [];
    this._failing = false;
    this._pause = 50;
    this._lossPromise = null;
    this._lossReject = null;
    // Bound, so that they can be destructured from the scope's argument.
    this.progress = this.progress.bind(this);
    this.check = this.check.bind(this);
    this.fenced = this.fenced.bind(this);
    this.release = this.release.bind(this);
    this._onTimer = this._onTimer.bind(this);
  }

  /** @internal a promise rejected with the LeaseLost when the lease is lost (for the scopes) */
  get lossPromise() {
    if (!this._lossPromise) {
      this._lossPromise = new Promise((_, reject) => { this._lossReject = reject; });
      this._lossPromise.catch(() => {});
      if (this.lostError && this._state === 'lost' && !mutation.noLossSignal) this._lossReject(this.lostError);
    }
    return this._lossPromise;
  }

  /** Aborts when the lease is lost (reason: the LeaseLost) or the scope is cancelled. */
  get signal() {
    if (!this._controller) {
      this._controller = new AbortController();
      if (this._abortReason !== undefined) this._controller.abort(this._abortReason);
    }
    return this._controller.signal;
  }

  /** Aborts the signal (made at its first use; the first reason wins). */
  _abort(reason) {
    if (this._abortReason !== undefined) return;
    this._abortReason = reason;
    if (this._controller) this._controller.abort(reason);
  }

  /** True once the lease is lost (the clock is read first). */
  get lost() {
    if (this._state === 'held') this._checkClock();
    return this._state === 'lost';
  }

  /** Throws the LeaseLost error when the lease is lost (reading the clock first). */
  check() {
    if (this.lost) throw this.lostError;
    if (this._state === 'released') throw new Error(`lease "${this.name}" was released`);
  }

  /**
   * Reports that the body is making progress (the progressTimeout deadline
   * starts again). Throws LeaseLost when the lease is lost.
   */
  progress() {
    this.check();
    this._lastProgress = now();
  }

  /**
   * Runs fn(client) in a transaction on the application's client that first
   * checks this lease's token(s) with dlock_check in `mode` (default
   * latest), so that every write in it is fenced. Throws LeaseLost before
   * starting when the lease is lost (and rolls back when it was lost by the
   * time fn returns), StaleToken when the server rejects the token.
   * @template T
   * @param {any} client  a pg.Client, a PoolClient or a pg.Pool
   * @param {(client: any) => Promise<T>|T} fn
   * @param {{mode?: 'latest'|'live'|'seen'}} [opts]
   * @returns {Promise<T>}
   */
  async fenced(client, fn, opts = {}) {
    this.check();
    const pairs = this.names.map((name, i) => ({ name, token: this.tokens[i] }));
    return fencedTransaction(client, pairs, fn, { mode: opts.mode, beforeCommit: () => this.check() });
  }

  // ---- renewal -----------------------------------------------------------

  /** @internal a scope's caller signal: its abort aborts this lease's signal */
  _link(callerSignal) {
    const onAbort = () => this._abort(callerSignal.reason);
    if (callerSignal.aborted) onAbort();
    else callerSignal.addEventListener('abort', onAbort, { once: true });
    this._unlinkCaller = () => callerSignal.removeEventListener('abort', onAbort);
  }

  _start() {
    this._dlock._renewal.hold();
    if (this._progressMs) this._armProgress();
    this._schedule(this._lastSent + this._ttlMs / 3);
  }

  /** The next renewal attempt at `at` (performance.now() ms). */
  _schedule(at) {
    clearTimeout(this._timers.renew);
    this._timers.renew = setTimeout(this._onTimer, Math.max(0, at - now()));
  }

  /**
   * The deadline timer runs while a renewal is due (from the first attempt
   * until a success): before it, the renewal timer (at ttl/3) comes first
   * and reads the clock itself.
   */
  _armDeadline() {
    clearTimeout(this._timers.deadline);
    this._timers.deadline = setTimeout(() => this._checkClock(), Math.max(0, this.deadline - now()) + 1);
  }

  _armProgress() {
    clearTimeout(this._timers.progress);
    const due = this._lastProgress + this._progressMs - now();
    this._timers.progress = setTimeout(() => {
      if (this._state !== 'held') return;
      if (now() - this._lastProgress >= this._progressMs) this._lose('no-progress');
      else this._armProgress();
    }, Math.max(0, due) + 1);
  }

  /** Reads the clock: loses the lease when the deadline (or the progress deadline) passed. */
  _checkClock() {
    if (this._state !== 'held') return this._state === 'lost';
    const t = now();
    if (t >= this.deadline) { this._lose('deadline'); return true; }
    if (this._progressMs && t - this._lastProgress >= this._progressMs) { this._lose('no-progress'); return true; }
    return false;
  }

  /** Renews at once (and waits for the outcome): after an acquire that waited past a third of the ttl. */
  _renewNow() {
    return new Promise((resolve, reject) => {
      this._renewWaiters.push({ resolve, reject });
      if (!this._inFlight) {
        clearTimeout(this._timers.renew);
        this._onTimer();
      }
    });
  }

  _settleWaiters(err) {
    for (const w of this._renewWaiters.splice(0)) (err ? w.reject(err) : w.resolve());
  }

  /** The renewal timer: the clock first, then one attempt. */
  _onTimer() {
    this._timers.renew = null;
    if (this._state !== 'held' || this._checkClock()) return;
    if (!this._timers.deadline) this._armDeadline();
    if (mutation.noRenewal) return; // the deadline timer ends it
    this._attempt().catch((err) => {
      // Not expected (the attempt handles its errors): retry as after any error.
      this.lastError = err;
      if (this._state === 'held') this._schedule(now() + 50);
    });
  }

  async _attempt() {
    const ttl = this._ttlMs;
    const sent = now();
    const left = this.deadline - sent;
    let ok;
    let serverAt;
    this._inFlight = true;
    try {
      const r = this._set
        ? await this._dlock._renewal.query(RENEW_EACH, [this.names, this.tokens.map(String), this._ttlText], left / 2, `renew of ${this.name}`)
        : await this._dlock._renewal.query(RENEW_ONE, [this.name, String(this.token), this._ttlText], left / 2, `renew of ${this.name}`);
      const row = r.rows[0];
      ok = this._set ? Array.isArray(row.ok) && row.ok.every((v) => v === true) : row.ok === true;
      serverAt = row.at;
    } catch (err) {
      this._inFlight = false;
      // The clock first: a loss wins over any error.
      if (this._state !== 'held' || this._checkClock()) return;
      this.lastError = err;
      const leftNow = this.deadline - now();
      this._pause = this._failing ? Math.min(this._pause * 2, 1000) : 50;
      this._pause = Math.max(50, Math.min(this._pause, leftNow / 4));
      this._failing = true;
      this._schedule(now() + this._pause);
      return;
    }
    this._inFlight = false;
    // An answer: the clock is read before it is trusted.
    if (this._state !== 'held' || this._checkClock()) return;
    if (!ok) { this._lose('renewed-false'); return; }
    this._lastSent = sent;
    this.deadline = sent + ttl;
    this.expiresAt = new Date(serverAt.getTime() + ttl);
    this.renewals++;
    this.lastError = null;
    this._failing = false;
    this._pause = 50;
    clearTimeout(this._timers.deadline);
    this._timers.deadline = null;
    this._schedule(sent + ttl / 3);
    this._settleWaiters(null);
  }

  _stopTimers() {
    clearTimeout(this._timers.renew);
    clearTimeout(this._timers.deadline);
    clearTimeout(this._timers.progress);
    this._timers.renew = this._timers.deadline = this._timers.progress = null;
    if (this._unlinkCaller) this._unlinkCaller();
  }

  _lose(reason) {
    if (this._state !== 'held') return;
    this._state = 'lost';
    this.lostError = new LeaseLost(reason, this.names, this.tokens);
    this._stopTimers();
    this._dlock._renewal.unhold();
    this._settleWaiters(this.lostError);
    if (mutation.noLossSignal) return;
    this._abort(this.lostError);
    if (this._lossReject) this._lossReject(this.lostError);
  }

  // ---- release -------------------------------------------------------------

  /**
   * Stops the renewal and releases the lease (dlock_release, or
   * dlock_release_each for a set), retrying on errors until the deadline.
   * Resolves `{confirmed: true}` when the release returned true,
   * `{confirmed: false}` when it got no answer or only errors before the
   * deadline; rejects with LeaseLost when the lease was lost (before, or by
   * a release that returned false). Calling it again returns the same
   * outcome.
   * @returns {Promise<{confirmed: boolean}>}
   */
  release() {
    if (!this._releasing) this._releasing = this._release();
    return this._releasing;
  }

  async _release() {
    if (this._state === 'held') this._checkClock();
    if (this._state === 'lost') { this.confirmed = false; throw this.lostError; }
    this._state = 'releasing';
    this._stopTimers();
    this._dlock._renewal.unhold();
    if (this._renewWaiters.length) this._settleWaiters(new Error('released'));
    const src = this._dlock._source;
    let pause = 50;
    let attempt = 0;
    for (;;) {
      const left = this.deadline - now();
      if (left <= 0) break;
      let b;
      try {
        const budget = left / 2;
        const t0 = now();
        b = await src.borrow(budget);
        const r = this._set
          ? await timedQuery(b.client, RELEASE_EACH, [this.names, this.tokens.map(String)], Math.max(1, budget - (now() - t0)), `release of ${this.name}`)
          : await timedQuery(b.client, RELEASE_ONE, [this.name, String(this.token)], Math.max(1, budget - (now() - t0)), `release of ${this.name}`);
        b.done();
        const row = r.rows[0];
        const ok = this._set ? Array.isArray(row.ok) && row.ok.every((v) => v === true) : row.ok === true;
        if (ok) {
          this.confirmed = true;
          this._state = 'released';
          return { confirmed: true };
        }
        this.confirmed = false;
        this._state = 'lost';
        this.lostError = new LeaseLost('released-false', this.names, this.tokens);
        this._abort(this.lostError);
        throw this.lostError;
      } catch (err) {
        if (err instanceof LeaseLost) throw err;
        if (b) b.done(isConnectionError(err));
        this.lastError = err;
        attempt++;
        const leftNow = this.deadline - now();
        if (leftNow <= 0) break;
        pause = attempt === 1 ? 50 : Math.min(pause * 2, 1000);
        await new Promise((r) => setTimeout(r, Math.max(50, Math.min(pause, leftNow / 4))));
      }
    }
    this.confirmed = false;
    this._state = 'released';
    return { confirmed: false };
  }
}
