// The renewal connection: one per Dlock client, of its own (never one the
// application uses), opened through the ConnConfig (several hosts,
// target_session_attrs), replaced after a connection error or an attempt
// without answer, and closed when no lease is held.
import { NoAnswer } from './errors.js';
import { destroyClient, isAlive, isConnectionError, openClient, refClient, timedQuery } from './connect.js';

const now = () => performance.now();

export class RenewalConnection {
  /** @param {import('./conninfo.js').ConnConfig} config */
  constructor(config) {
    this.config = config;
    /** @type {import('pg').Client | null} */
    this.client = null;
    this.connecting = null;
    this.users = 0;
  }

  /** The backend pid of the current renewal connection, or null. */
  get pid() {
    return isAlive(this.client) ? this.client.processID : null;
  }

  hold() {
    this.users++;
    if (this.client) refClient(this.client, true);
  }

  unhold() {
    this.users = Math.max(0, this.users - 1);
    if (this.users === 0 && this.client) {
      const c = this.client;
      this.client = null;
      refClient(c, false);
      const t = setTimeout(() => destroyClient(c), 2000);
      t.unref();
      c.end().then(() => clearTimeout(t), () => destroyClient(c));
    }
  }

  async get(budgetMs) {
    if (isAlive(this.client)) return this.client;
    if (this.client) { destroyClient(this.client); this.client = null; }
    if (!this.connecting) {
      const app = `${this.config.applicationName || 'dlock-node'} (dlock renewal)`;
      this.connecting = openClient(this.config, { budgetMs, applicationName: app }).then(
        (c) => {
          this.connecting = null;
          if (this.users === 0) { c.end().catch(() => destroyClient(c)); throw new Error('no lease is held'); }
          this.client = c;
          return c;
        },
        (e) => { this.connecting = null; throw e; },
      );
    }
    return this.connecting;
  }

  /**
   * One statement on the renewal connection, abandoned after budgetMs
   * (connect time included). A connection error or no answer closes the
   * connection, so that the next attempt opens a new one; an error from a
   * server that stays writable keeps it.
   */
  async query(text, values, budgetMs, what) {
    const start = now();
    const c = await this.get(budgetMs);
    const left = budgetMs - (now() - start);
    if (left <= 0) throw new NoAnswer(what, budgetMs);
    try {
      return await timedQuery(c, text, values, left, what);
    } catch (err) {
      if (isConnectionError(err)) {
        if (this.client === c) this.client = null;
        destroyClient(c);
      }
      throw err;
    }
  }
}
