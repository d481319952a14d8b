// dlock: fenced leases on PostgreSQL's dlock extension, for node-postgres.
// See README.md (and docs/clients.md in the dlock repository) for the rules.
export { Dlock, withLease, withLeases, withPermit, acquire, acquireAll, acquirePermit, clientFor } from './client.js';
export { Lease, fencedTransaction } from './lease.js';
export { Election, Observer } from './election.js';
export { DlockError, LeaseLost, StaleToken, NotAcquired, NoAnswer } from './errors.js';
import { parseConninfo } from './conninfo.js';
import { openClient } from './connect.js';
export { parseConninfo };

/**
 * Opens a pg.Client through a connection string with several hosts and
 * target_session_attrs (tried in order, each within its connect_timeout).
 * @param {string | import('./conninfo.js').ConnConfig} conninfo
 * @param {{budgetMs?: number, applicationName?: string}} [opts]
 * @returns {Promise<import('pg').Client>}
 */
export function connect(conninfo, opts) {
  return openClient(typeof conninfo === 'string' ? parseConninfo(conninfo) : conninfo, opts);
}

/**
 * Runs fn(client) in a transaction on the application's client, fenced by
 * the lease: `lease.fenced(client, fn, opts)`.
 * @template T
 * @param {any} client
 * @param {import('./lease.js').Lease} lease
 * @param {(client: any) => Promise<T>|T} fn
 * @param {{mode?: 'latest'|'live'|'seen'}} [opts]
 * @returns {Promise<T>}
 */
export function fenced(client, lease, fn, opts) {
  return lease.fenced(client, fn, opts);
}
