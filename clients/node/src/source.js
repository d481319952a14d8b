// Where acquires and releases run: the application's pg.Pool, or
// connections this library opens itself from a connection string (several
// hosts and target_session_attrs allowed).
import { configFromPgOptions, parseConninfo } from './conninfo.js';
import { destroyClient, isAlive, openClient, refClient } from './connect.js';

/**
 * @typedef {object} Borrowed
 * @property {import('pg').Client} client
 * @property {(destroy?: boolean) => void} done  gives the connection back (or destroys it)
 */

/** Acquires and releases through the application's pg.Pool. */
export class PoolSource {
  constructor(pool, renewalConfig) {
    this.pool = pool;
    /** the connection target of the renewal connection and the listeners */
    this.config = renewalConfig ?? configFromPgOptions(pool.options || {});
  }

  /** @returns {Promise<Borrowed>} */
  borrow(budgetMs = Infinity) {
    return new Promise((resolve, reject) => {
      let settled = false;
      // A timer only when the pool may make us wait (no idle connection).
      const timer = Number.isFinite(budgetMs) && !(this.pool.idleCount > 0)
        ? setTimeout(() => {
          if (settled) return;
          settled = true;
          reject(Object.assign(new Error(`no connection from the pool within ${Math.round(budgetMs)} ms`), { code: undefined }));
        }, Math.max(1, budgetMs))
        : null;
      this.pool.connect((err, client, release) => {
        if (settled) { if (!err) release(); return; }
        settled = true;
        if (timer) clearTimeout(timer);
        if (err) { reject(err); return; }
        resolve({
          client,
          done: (destroy) => {
            if (destroy || client.__dlockDead) {
              destroyClient(client);
              release(true);
            } else release();
          },
        });
      });
    });
  }

  close() {}
}

/** Acquires and releases on connections of its own, opened from a ConnConfig. */
export class ConninfoSource {
  /** @param {import('./conninfo.js').ConnConfig} config */
  constructor(config) {
    this.config = config;
    /** @type {import('pg').Client[]} */
    this.idle = [];
    this.maxIdle = 4;
    this.idleTimer = null;
  }

  static from(conninfo) {
    return new ConninfoSource(typeof conninfo === 'string' ? parseConninfo(conninfo) : conninfo);
  }

  /** @returns {Promise<Borrowed>} */
  async borrow(budgetMs = Infinity) {
    let client;
    while (this.idle.length) {
      const c = this.idle.pop();
      if (isAlive(c)) { client = c; break; }
      destroyClient(c);
    }
    if (!client) client = await openClient(this.config, { budgetMs });
    refClient(client, true);
    return {
      client,
      done: (destroy) => {
        if (destroy || !isAlive(client) || this.idle.length >= this.maxIdle) {
          destroyClient(client);
          return;
        }
        refClient(client, false);
        this.idle.push(client);
        this.armIdleTimer();
      },
    };
  }

  /** Idle connections are closed after 10 s without use. */
  armIdleTimer() {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = setTimeout(() => this.close(), 10000);
    this.idleTimer.unref();
  }

  close() {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
    for (const c of this.idle.splice(0)) {
      c.end().catch(() => {});
      refClient(c, false);
    }
  }
}
