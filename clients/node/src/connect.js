// Opening connections through a ConnConfig (several hosts, tried in order,
// target_session_attrs checked), timed queries that abandon a connection
// that does not answer, and the query cancel request.
import net from 'node:net';
import pg from 'pg';
import { NoAnswer } from './errors.js';

const now = () => performance.now();

/** Destroys a client's socket at once (client.end() may hang on a dead socket). */
export function destroyClient(client) {
  if (!client) return;
  client.__dlockDead = true;
  try {
    client.connection.stream.destroy();
  } catch {
    /* already gone */
  }
}

/** Whether the socket keeps the process alive (ref) or not (unref). */
export function refClient(client, on) {
  const s = client && client.connection && client.connection.stream;
  if (s && typeof s.ref === 'function') {
    if (on) s.ref();
    else s.unref();
  }
}

/** True while the client's connection may still be used. */
export function isAlive(client) {
  return !!client && !client.__dlockDead && client._queryable !== false && !client._ending;
}

/**
 * True for errors after which the connection must not be reused: no SQLSTATE
 * (socket errors, no answer), connection exceptions (08), operator
 * intervention (57P01..57P05: shutdown, terminate, cannot connect now), a
 * read-only server (25006) and out of resources (53).
 */
export function isConnectionError(err) {
  const code = err && err.code;
  if (typeof code !== 'string' || code.length !== 5) return true;
  return code.startsWith('08') || code.startsWith('57P') || code.startsWith('53') || code === '25006';
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms).unref());
}

/**
 * Runs a query that is abandoned after `ms`: the connection is destroyed and
 * NoAnswer is thrown.
 * @returns {Promise<import('pg').QueryResult>}
 */
export function timedQuery(client, text, values, ms, what = 'query') {
  if (!isAlive(client)) return Promise.reject(Object.assign(new Error('connection is closed'), { code: undefined }));
  return new Promise((resolve, reject) => {
    let done = false;
    const timer = setTimeout(() => {
      if (done) return;
      done = true;
      destroyClient(client);
      reject(new NoAnswer(what, ms));
    }, Math.max(1, ms));
    client.query(text, values).then(
      (r) => { if (!done) { done = true; clearTimeout(timer); resolve(r); } },
      (e) => { if (!done) { done = true; clearTimeout(timer); reject(e); } },
    );
  });
}

/**
 * Sends a CancelRequest for the query running on `client` (the protocol's
 * cancel, over a new socket to the same server; needs no privilege).
 */
export function cancelQuery(client) {
  return new Promise((resolve) => {
    if (!client || client.processID == null) return resolve();
    const host = client.host;
    const port = client.port;
    const sock = host && host.startsWith('/') ? net.connect(`${host}/.s.PGSQL.${port}`) : net.connect(port, host);
    const t = setTimeout(() => { sock.destroy(); resolve(); }, 2000);
    t.unref();
    sock.on('connect', () => {
      const b = Buffer.alloc(16);
      b.writeInt32BE(16, 0);
      b.writeInt32BE(80877102, 4);
      b.writeInt32BE(client.processID, 8);
      b.writeInt32BE(client.secretKey, 12);
      sock.end(b);
    });
    sock.on('close', () => { clearTimeout(t); resolve(); });
    sock.on('error', () => { clearTimeout(t); resolve(); });
  });
}

/**
 * Opens a connection to the first host of `cfg` that answers within its
 * timeout and matches target_session_attrs, trying each host in order.
 * @param {import('./conninfo.js').ConnConfig} cfg
 * @param {{ budgetMs?: number, applicationName?: string }} [opts]
 * @returns {Promise<import('pg').Client>}
 */
export async function openClient(cfg, opts = {}) {
  const start = now();
  const budget = opts.budgetMs ?? Infinity;
  const errors = [];
  const tsa = cfg.targetSessionAttrs;
  const passes = tsa === 'prefer-standby' ? ['standby', 'any'] : [tsa];
  for (const want of passes) {
    for (const hp of cfg.hosts) {
      const left = budget - (now() - start);
      if (left <= 0) break;
      const ms = Math.min(left, cfg.connectTimeout ? cfg.connectTimeout * 1000 : Infinity);
      const client = new pg.Client({
        host: hp.host,
        port: hp.port,
        user: cfg.user,
        password: cfg.password,
        database: cfg.database,
        application_name: opts.applicationName || cfg.applicationName || 'dlock-node',
        options: cfg.options,
        ssl: cfg.ssl,
        keepAlive: true,
        connectionTimeoutMillis: Number.isFinite(ms) ? Math.max(1, Math.ceil(ms)) : 0, // 0: none
      });
      client.on('error', () => { client.__dlockDead = true; });
      client.on('end', () => { client.__dlockDead = true; });
      try {
        await client.connect();
        if (want !== 'any') {
          const q = want === 'read-write' || want === 'read-only'
            ? "SELECT current_setting('transaction_read_only') = 'on' AS ro"
            : 'SELECT pg_is_in_recovery() AS ro';
          const left2 = budget - (now() - start);
          const r = await timedQuery(client, q, [], Number.isFinite(left2) ? Math.max(1, left2) : 30000, 'target_session_attrs check');
          const ro = r.rows[0].ro;
          const ok = want === 'read-write' || want === 'primary' ? !ro : ro;
          if (!ok) {
            destroyClient(client);
            errors.push(`${hp.host}:${hp.port}: session is ${want === 'read-write' || want === 'read-only' ? (ro ? 'read-only' : 'read-write') : (ro ? 'a standby' : 'a primary')}`);
            continue;
          }
        }
        return client;
      } catch (err) {
        destroyClient(client);
        errors.push(`${hp.host}:${hp.port}: ${err.message}`);
      }
    }
  }
  const err = new Error(`could not connect to a server${tsa !== 'any' ? ` with target_session_attrs=${tsa}` : ''}: ${errors.join('; ') || 'no time left'}`);
  err.code = undefined;
  throw err;
}

export { sleep };
