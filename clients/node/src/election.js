// Leader election: a lease on one name. campaign waits until this candidate
// holds it, resign releases it, leader reads dlock_leases, observe yields
// each new leader (NOTIFY events checked by the listener's rule, or
// polling).
import { randomBytes } from 'node:crypto';
import { clientFor } from './client.js';
import { LeaseLost, NotAcquired } from './errors.js';
import { destroyClient, isAlive, openClient, refClient, timedQuery } from './connect.js';

const LEADER = `SELECT owner, token, expires_at FROM dlock_leases WHERE lock_name = $1 AND live`;

/**
 * @typedef {object} Leader
 * @property {string} name  the election's lock name
 * @property {string} owner  the leader's owner label
 * @property {bigint} token  its fencing token
 * @property {Date} expiresAt  when its lease expires unless renewed
 */

function toLeader(name, row) {
  return row ? { name, owner: row.owner, token: BigInt(row.token), expiresAt: row.expires_at } : null;
}


export class Election {
  /**
   * @param {import('./client.js').Dlock | import('pg').Pool | string} source
   * @param {string} name  the election's lock name
   * @param {{ttl: number, owner?: string, progressTimeout?: number}} opts
   */
  constructor(source, name, opts) {
    if (typeof name !== 'string' || !name) throw new TypeError('Election: name must be a non-empty string');
    if (!opts || !(opts.ttl > 0)) throw new TypeError('Election: ttl must be a positive number of seconds');
    this._dlock = clientFor(source);
    this.name = name;
    this.ttl = opts.ttl;
    this.owner = opts.owner;
    this.progressTimeout = opts.progressTimeout;
    /** @type {import('./lease.js').Lease | null} */
    this.lease = null;
  }

  /**
   * Waits until this candidate is the leader (holds the election's lease),
   * and returns the lease (renewed in the background like any other; its
   * token fences the leader's writes; its signal aborts if leadership is
   * lost). `wait` (seconds) bounds the wait: NotAcquired after it; without
   * it, campaign waits until `signal` aborts.
   * @param {{signal?: AbortSignal, wait?: number}} [opts]
   */
  async campaign(opts = {}) {
    if (this.lease && !this.lease.lost && this.lease.confirmed === null) return this.lease;
    const limit = opts.wait;
    const start = performance.now();
    for (;;) {
      if (opts.signal && opts.signal.aborted) throw opts.signal.reason;
      const left = limit === undefined ? 30 : Math.max(0, limit - (performance.now() - start) / 1000);
      try {
        this.lease = await this._dlock.acquire(this.name, {
          ttl: this.ttl, wait: Math.min(left, 30), owner: this.owner, signal: opts.signal, progressTimeout: this.progressTimeout,
        });
        return this.lease;
      } catch (err) {
        // LeaseLost: granted, but lost before it could be confirmed by a renew; campaign again.
        if (!(err instanceof NotAcquired) && !(err instanceof LeaseLost)) throw err;
        if (limit !== undefined && (performance.now() - start) / 1000 >= limit) throw new NotAcquired([this.name], limit);
      }
    }
  }

  /**
   * Gives up leadership: releases the lease (see Lease.release).
   * @returns {Promise<{confirmed: boolean}>}
   */
  async resign() {
    const lease = this.lease;
    if (!lease) return { confirmed: false };
    this.lease = null;
    return lease.release();
  }

  /**
   * The current leader, read from dlock_leases, or null when the lease is
   * not live.
   * @returns {Promise<Leader|null>}
   */
  async leader() {
    const b = await this._dlock._source.borrow(30000);
    try {
      const r = await b.client.query(LEADER, [this.name]);
      b.done();
      return toLeader(this.name, r.rows[0]);
    } catch (err) {
      b.done(true);
      throw err;
    }
  }

  /**
   * Yields each new leader once, in token order (vacancies are not
   * reported). Follows the dlock NOTIFY events when dlock.notify is on and
   * LISTEN works on the connection, else polls dlock_leases every
   * `pollInterval` s. Stops when `signal` aborts or `close()` is called.
   * @param {{signal?: AbortSignal, listen?: boolean, pollInterval?: number}} [opts]
   * @returns {Observer}
   */
  observe(opts = {}) {
    return new Observer(this, opts);
  }
}

/** The async iterator of Election.observe(). */
export class Observer {
  constructor(election, opts) {
    this._e = election;
    this._config = election._dlock.config;
    this._signal = opts.signal;
    this._listenWanted = opts.listen !== false;
    this._pollMs = (opts.pollInterval ?? 1) * 1000;
    /** 'listen' or 'poll' once set up; null before. */
    this.mode = null;
    this._last = -1n;
    this._queue = [];
    this._waiter = null;
    this._closed = false;
    this._client = null;
    this._notifierPid = undefined;
    this._dirty = true;
    this._kick = null;
    this._onAbort = () => this.close();
    if (this._signal) {
      if (this._signal.aborted) this._closed = true;
      else this._signal.addEventListener('abort', this._onAbort, { once: true });
    }
    this._run().catch((err) => { this._fail(err); });
  }

  [Symbol.asyncIterator]() {
    return this;
  }

  /** @returns {Promise<IteratorResult<Leader>>} */
  next() {
    if (this._queue.length) return Promise.resolve({ value: this._queue.shift(), done: false });
    if (this._error) { const e = this._error; this._error = null; return Promise.reject(e); }
    if (this._closed) return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve, reject) => { this._waiter = { resolve, reject }; });
  }

  return() {
    this.close();
    return Promise.resolve({ value: undefined, done: true });
  }

  /** Stops observing and closes the connection. */
  close() {
    if (this._closed) return;
    this._closed = true;
    if (this._signal) this._signal.removeEventListener('abort', this._onAbort);
    if (this._client) { const c = this._client; this._client = null; c.end().catch(() => destroyClient(c)); }
    if (this._kick) this._kick();
    if (this._waiter) { const w = this._waiter; this._waiter = null; w.resolve({ value: undefined, done: true }); }
  }

  _fail(err) {
    if (this._closed) return;
    if (this._waiter) { const w = this._waiter; this._waiter = null; w.reject(err); } else this._error = err;
    this.close();
  }

  _push(leader) {
    if (!leader || leader.token <= this._last) return;
    this._last = leader.token;
    if (this._waiter) { const w = this._waiter; this._waiter = null; w.resolve({ value: leader, done: false }); } else this._queue.push(leader);
  }

  _sleep(ms) {
    return new Promise((resolve) => {
      const t = setTimeout(done, ms);
      const self = this;
      function done() { clearTimeout(t); if (self._kick === done) self._kick = null; resolve(); }
      this._kick = done;
    });
  }

  async _read(client) {
    const r = await timedQuery(client, LEADER, [this._e.name], 10000, 'leader read');
    this._push(toLeader(this._e.name, r.rows[0]));
  }

  /** Opens the observer's connection; in listen mode LISTENs and checks that a notification reaches it. */
  async _connect() {
    const c = await openClient(this._config, { budgetMs: 10000, applicationName: `${this._config.applicationName || 'dlock-node'} (dlock observer)` });
    refClient(c, false);
    this._client = c;
    this._notifierPid = undefined;
    if (!this._listenWanted) return 'poll';
    const s = await timedQuery(c, "SELECT current_setting('dlock.notify', true) AS notify", [], 10000, 'dlock.notify');
    if (s.rows[0].notify !== 'on') return 'poll';
    const probe = `dlock_probe_${randomBytes(6).toString('hex')}`;
    let arrived = false;
    let wake;
    const onProbe = (msg) => { if (msg.channel === probe) { arrived = true; if (wake) wake(); } };
    c.on('notification', onProbe);
    await timedQuery(c, `LISTEN ${probe}`, [], 10000, 'LISTEN');
    // Sent from another connection: it arrives only if this session really listens.
    const other = await openClient(this._config, { budgetMs: 10000 });
    try {
      await timedQuery(other, `NOTIFY ${probe}`, [], 10000, 'NOTIFY');
    } finally {
      other.end().catch(() => destroyClient(other));
    }
    if (!arrived) await new Promise((resolve) => { wake = resolve; setTimeout(resolve, 1000).unref(); });
    c.removeListener('notification', onProbe);
    await timedQuery(c, `UNLISTEN ${probe}`, [], 10000, 'UNLISTEN').catch(() => {});
    if (!arrived) return 'poll';
    c.on('notification', (msg) => this._onNotification(msg));
    await timedQuery(c, 'LISTEN dlock', [], 10000, 'LISTEN');
    return 'listen';
  }

  /** The listener's rule (sql-reference.md): accept only the notifier's events. */
  _onNotification(msg) {
    if (msg.channel !== 'dlock') return;
    (this._pending ??= []).push(msg);
    if (this._kick) this._kick();
  }

  async _handlePending(client) {
    const msgs = this._pending || [];
    this._pending = [];
    for (const msg of msgs) {
      if (this._notifierPid === undefined || msg.processId !== this._notifierPid) {
        const r = await timedQuery(client, 'SELECT pid FROM dlock_notifier WHERE datname = current_database()', [], 10000, 'notifier pid');
        this._notifierPid = r.rows.length ? r.rows[0].pid : null;
      }
      if (msg.processId !== this._notifierPid) continue;
      let ev;
      try { ev = JSON.parse(msg.payload); } catch { continue; }
      if (ev.event === 'notifier_exit') { this._notifierPid = undefined; this._dirty = true; continue; }
      if (ev.event === 'overflow' || ev.lock_name === this._e.name) this._dirty = true;
    }
  }

  async _run() {
    let pause = 50;
    while (!this._closed) {
      try {
        if (!isAlive(this._client)) {
          if (this._client) destroyClient(this._client);
          this._client = null;
          this.mode = await this._connect();
          if (this._closed) break;
          this._dirty = true; // re-read after every (re)connection
        }
        const c = this._client;
        if (this.mode === 'listen') await this._handlePending(c);
        if (this._dirty || this.mode === 'poll') {
          this._dirty = false;
          await this._read(c);
        }
        pause = 50;
        if (this._pending && this._pending.length) continue;
        await this._sleep(this.mode === 'poll' ? this._pollMs : Math.max(this._pollMs * 10, 5000));
        if (this.mode === 'listen' && !(this._pending && this._pending.length)) this._dirty = true;
      } catch (err) {
        if (this._closed) break;
        if (this._client) { destroyClient(this._client); this._client = null; }
        await this._sleep(pause);
        pause = Math.min(pause * 2, 1000);
      }
    }
  }
}

