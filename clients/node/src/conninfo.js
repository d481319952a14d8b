// Connection strings: libpq's keyword/value form and URL form, with several
// hosts (host=a,b port=1,2 / postgresql://a:1,b:2/db) and
// target_session_attrs, which node-postgres does not support itself.

const TSA = new Set(['any', 'read-write', 'read-only', 'primary', 'standby', 'prefer-standby']);

/**
 * @typedef {object} HostPort
 * @property {string} host  a host name, an address or a Unix socket directory
 * @property {number} port
 *
 * @typedef {object} ConnConfig  a parsed connection target
 * @property {HostPort[]} hosts
 * @property {string} [user]
 * @property {string} [password]
 * @property {string} [database]
 * @property {string} [applicationName]
 * @property {string} [options]
 * @property {number} [connectTimeout]  seconds per host
 * @property {string} targetSessionAttrs
 * @property {any} [ssl]
 */

/** Splits libpq's keyword/value form into a map. */
function parseKeywords(s) {
  const out = {};
  let i = 0;
  const n = s.length;
  const ws = (c) => c === ' ' || c === '\t' || c === '\n' || c === '\r';
  while (i < n) {
    while (i < n && ws(s[i])) i++;
    if (i >= n) break;
    let key = '';
    while (i < n && s[i] !== '=' && !ws(s[i])) key += s[i++];
    while (i < n && ws(s[i])) i++;
    if (s[i] !== '=') throw new TypeError(`connection string: missing "=" after "${key}"`);
    i++;
    while (i < n && ws(s[i])) i++;
    let val = '';
    if (s[i] === "'") {
      i++;
      for (;;) {
        if (i >= n) throw new TypeError('connection string: unterminated quoted value');
        if (s[i] === '\\' && i + 1 < n) { val += s[i + 1]; i += 2; continue; }
        if (s[i] === "'") { i++; break; }
        val += s[i++];
      }
    } else {
      while (i < n && !ws(s[i])) {
        if (s[i] === '\\' && i + 1 < n) { val += s[i + 1]; i += 2; continue; }
        val += s[i++];
      }
    }
    out[key] = val;
  }
  return out;
}

/** Splits the URL form into a map of libpq keywords. */
function parseUrl(s) {
  const m = /^postgres(?:ql)?:\/\/([^/?#]*)(?:\/([^?#]*))?(?:\?([^#]*))?/.exec(s);
  if (!m) throw new TypeError('connection string: not a postgresql:// URL');
  const out = {};
  let netlocs = m[1];
  const at = netlocs.lastIndexOf('@');
  if (at >= 0) {
    const userinfo = netlocs.slice(0, at);
    netlocs = netlocs.slice(at + 1);
    const colon = userinfo.indexOf(':');
    if (colon >= 0) {
      out.user = decodeURIComponent(userinfo.slice(0, colon));
      out.password = decodeURIComponent(userinfo.slice(colon + 1));
    } else if (userinfo) out.user = decodeURIComponent(userinfo);
  }
  if (netlocs) {
    const hosts = [];
    const ports = [];
    for (const part of netlocs.split(',')) {
      let host = part;
      let port = '';
      if (part.startsWith('[')) {
        const end = part.indexOf(']');
        host = part.slice(1, end);
        if (part[end + 1] === ':') port = part.slice(end + 2);
      } else {
        const c = part.lastIndexOf(':');
        if (c >= 0) { host = part.slice(0, c); port = part.slice(c + 1); }
      }
      hosts.push(decodeURIComponent(host));
      ports.push(port);
    }
    out.host = hosts.join(',');
    if (ports.some((p) => p !== '')) out.port = ports.join(',');
  }
  if (m[2]) out.dbname = decodeURIComponent(m[2]);
  if (m[3]) {
    for (const kv of m[3].split('&')) {
      if (!kv) continue;
      const eq = kv.indexOf('=');
      const k = decodeURIComponent(eq >= 0 ? kv.slice(0, eq) : kv);
      const v = decodeURIComponent((eq >= 0 ? kv.slice(eq + 1) : '').replace(/\+/g, ' '));
      out[k] = v;
    }
  }
  return out;
}

function sslFrom(mode) {
  if (!mode || mode === 'disable' || mode === 'allow' || mode === 'prefer') return undefined;
  if (mode === 'require') return { rejectUnauthorized: false };
  return {};
}

/**
 * Builds a ConnConfig from libpq keywords (missing ones from the PG*
 * environment variables, as libpq does).
 * @param {Record<string,string|undefined>} kw
 * @returns {ConnConfig}
 */
export function configFromKeywords(kw) {
  const env = process.env;
  const get = (k, e) => (kw[k] !== undefined && kw[k] !== '' ? kw[k] : e ? env[e] : undefined);
  const hostList = (get('host', 'PGHOST') || get('hostaddr') || 'localhost').split(',');
  const portList = String(get('port', 'PGPORT') || '5432').split(',');
  if (portList.length !== 1 && portList.length !== hostList.length) {
    throw new TypeError(`connection string: ${hostList.length} hosts but ${portList.length} ports`);
  }
  const hosts = hostList.map((h, i) => {
    const p = Number(portList.length === 1 ? portList[0] : portList[i] || '5432');
    if (!Number.isInteger(p) || p <= 0 || p > 65535) throw new TypeError(`connection string: bad port "${portList[i]}"`);
    return { host: h || 'localhost', port: p };
  });
  const tsa = get('target_session_attrs', 'PGTARGETSESSIONATTRS') || 'any';
  if (!TSA.has(tsa)) throw new TypeError(`connection string: unknown target_session_attrs "${tsa}"`);
  const ct = get('connect_timeout', 'PGCONNECT_TIMEOUT');
  return {
    hosts,
    user: get('user', 'PGUSER'),
    password: get('password', 'PGPASSWORD'),
    database: get('dbname', 'PGDATABASE'),
    applicationName: get('application_name', 'PGAPPNAME'),
    options: get('options', 'PGOPTIONS'),
    connectTimeout: ct !== undefined && Number(ct) > 0 ? Math.max(2, Number(ct)) : undefined,
    targetSessionAttrs: tsa,
    ssl: sslFrom(get('sslmode', 'PGSSLMODE')),
  };
}

/**
 * Parses a connection string, keyword/value (`host=a,b port=5432,5433
 * dbname=app target_session_attrs=read-write`) or URL
 * (`postgresql://a:5432,b:5433/app?target_session_attrs=read-write`).
 * @param {string} s
 * @returns {ConnConfig}
 */
export function parseConninfo(s) {
  if (typeof s !== 'string') throw new TypeError('connection string must be a string');
  const kw = /^postgres(?:ql)?:\/\//.test(s) ? parseUrl(s) : parseKeywords(s);
  return configFromKeywords(kw);
}

/**
 * The ConnConfig of a node-postgres Pool or Client configuration object (a
 * pg.Pool's `options`): its connectionString when it has one (several hosts
 * allowed), else its host, port, user, database and password.
 * @param {Record<string, any>} o
 * @returns {ConnConfig}
 */
export function configFromPgOptions(o) {
  const kw = o.connectionString
    ? (/^postgres(?:ql)?:\/\//.test(o.connectionString) ? parseUrl(o.connectionString) : parseKeywords(o.connectionString))
    : {};
  const set = (k, v) => { if (v !== undefined && v !== null && kw[k] === undefined) kw[k] = String(v); };
  set('host', o.host);
  set('port', o.port);
  set('user', o.user);
  set('dbname', o.database);
  if (typeof o.password === 'string') set('password', o.password);
  set('application_name', o.application_name);
  set('options', o.options);
  if (o.connectionTimeoutMillis > 0) set('connect_timeout', Math.ceil(o.connectionTimeoutMillis / 1000));
  const cfg = configFromKeywords(kw);
  if (o.ssl !== undefined && cfg.ssl === undefined) cfg.ssl = o.ssl;
  return cfg;
}
