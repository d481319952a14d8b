// Test harness: throwaway PostgreSQL clusters (dlock preloaded) and
// PgBouncer instances on free ports under DLOCK_CLIENT_WORKDIR, child
// processes that print JSON lines, polling with a timeout. Everything it
// starts is stopped in teardown (and by run.js's sweep after the run).
import { spawn, execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync, appendFileSync, existsSync, readFileSync, statSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';

const run = promisify(execFile);
export const HERE = path.dirname(fileURLToPath(import.meta.url));
export const TESTDIR = path.dirname(HERE);
export const BINDIR = process.env.DLOCK_PG_BINDIR || '/usr/lib/postgresql/15/bin';
export const WORKDIR = process.env.DLOCK_CLIENT_WORKDIR || '/tmp';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * How long to wait for a child process or a server to get somewhere (start,
 * acquire, finish, replay): a wait for progress, not a measure of time.  A
 * loaded 2-core machine running every server's suites side by side was
 * seen to take more than 10 s to start a Node child and connect it.
 */
export const PATIENCE_MS = 60000;
export const now = () => performance.now();

/** Polls `fn` until it returns a truthy value (returned), or throws after timeoutMs. */
export async function waitFor(fn, timeoutMs, what = 'condition', everyMs = 25) {
  const end = now() + timeoutMs;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${last.message}` : ''}`);
    await sleep(everyMs);
  }
}

/**
 * The ports this suite's servers take: below the kernel's ephemeral range,
 * where an outgoing connection's local end never lands (a port free when
 * picked could otherwise be taken by a client before the server binds it),
 * and apart from the shell tests' (10000-17999) and the Python suite's
 * (18000-24999), so that suites running side by side do not pick each
 * other's ports.
 */
function portBand() {
  let lo = 32768;
  try {
    const v = parseInt(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').split(/\s+/)[0], 10);
    if (Number.isInteger(v)) lo = v;
  } catch { /* keep 32768 */ }
  return [25000, Math.max(lo, 26000)];
}

function canBind(port) {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.unref();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

const usedPorts = new Set();
/** A free TCP port on 127.0.0.1 in this suite's band (bind-tested), never 5432. */
export async function freePort() {
  const [lo, hi] = portBand();
  for (let i = 0; i < 200; i++) {
    const port = lo + Math.floor(Math.random() * (hi - lo));
    if (port === 5432 || usedPorts.has(port)) continue;
    if (await canBind(port)) {
      usedPorts.add(port);
      return port;
    }
  }
  throw new Error('no free port');
}

const teardowns = [];
/** Registers a cleanup run by cleanupAll (in reverse order). */
export function onCleanup(fn) {
  teardowns.push(fn);
}
export async function cleanupAll() {
  while (teardowns.length) {
    const fn = teardowns.pop();
    try { await fn(); } catch { /* keep cleaning */ }
  }
}
process.on('exit', () => {
  for (const fn of teardowns) if (fn.sync) try { fn.sync(); } catch { /* */ }
});

export class Cluster {
  constructor(dir, port) {
    this.dir = dir;
    this.data = path.join(dir, 'data');
    this.port = port;
    this.host = '127.0.0.1';
  }

  /** keyword/value conninfo */
  conninfo(extra = '') {
    return `host=${this.host} port=${this.port} user=postgres dbname=${this.db || 'postgres'}${extra ? ' ' + extra : ''}`;
  }

  get log() { return path.join(this.dir, 'server.log'); }

  async ctl(...args) {
    return run(path.join(BINDIR, 'pg_ctl'), ['-D', this.data, ...args], { timeout: 60000 });
  }

  /**
   * Starts the server. On its first start, a port that another process
   * bound since freePort() picked it is replaced by a new one (up to 5
   * times); a restart keeps its port, which clients know.
   */
  async start() {
    for (let attempt = 0; ; attempt++) {
      const mark = existsSync(this.log) ? statSync(this.log).size : 0;
      try {
        await this.ctl('-l', this.log, '-w', '-t', '60', 'start');
        this.started = true;
        return;
      } catch (err) {
        let tail = '';
        try { tail = readFileSync(this.log, 'utf8').slice(mark); } catch { /* no log */ }
        if (!this.started && attempt < 5 && tail.includes('could not bind')) {
          this.port = await freePort();
          appendFileSync(path.join(this.data, 'postgresql.conf'), `port = ${this.port}\n`);
          continue;
        }
        err.message += `\nserver log since this start:\n${tail.slice(-4000)}`;
        throw err;
      }
    }
  }
  async stop(mode = 'fast') { await this.ctl('-m', mode, '-w', '-t', '60', 'stop'); }
  async restart() { await this.ctl('-l', this.log, '-m', 'fast', '-w', '-t', '60', 'restart'); }
  async promote() { await this.ctl('-w', '-t', '60', 'promote'); }

  /** Stops the server if it runs (immediate), ignoring errors. */
  async kill() {
    if (existsSync(path.join(this.data, 'postmaster.pid'))) {
      await this.ctl('-m', 'immediate', '-w', '-t', '30', 'stop').catch(() => {});
    }
  }

  /** One statement on a new connection (database `db`). */
  async query(sql, params = [], db = this.db || 'postgres') {
    const c = new pg.Client({ host: this.host, port: this.port, user: 'postgres', database: db, connectionTimeoutMillis: 10000 });
    c.on('error', () => {});
    await c.connect();
    try { return await c.query(sql, params); } finally { await c.end().catch(() => {}); }
  }

  async client(db = this.db || 'postgres') {
    const c = new pg.Client({ host: this.host, port: this.port, user: 'postgres', database: db, connectionTimeoutMillis: 10000 });
    c.on('error', () => {});
    await c.connect();
    onCleanup(() => c.end().catch(() => {}));
    return c;
  }

  /** Creates database `name` with dlock in it. */
  async createDb(name) {
    await this.query(`CREATE DATABASE ${name}`);
    await this.query('CREATE EXTENSION dlock', [], name);
  }
}

const BASE_CONF = [
  "shared_preload_libraries = 'dlock'",
  "listen_addresses = '127.0.0.1'",
  'fsync = off',
  'max_connections = 60',
  "log_line_prefix = '%m [%p] %a '",
  'dlock.notify = on',
  'track_functions = all',
];

/** initdb + start a cluster with dlock preloaded; registered for teardown. */
export async function startCluster(label, extraConf = [], { start = true } = {}) {
  const dir = mkdtempSync(path.join(WORKDIR, `${label}-`));
  const port = await freePort();
  const cl = new Cluster(dir, port);
  await run(path.join(BINDIR, 'initdb'), ['-A', 'trust', '-U', 'postgres', '-N', '-E', 'UTF8', '--no-locale', '-D', cl.data], { timeout: 60000 });
  appendFileSync(path.join(cl.data, 'postgresql.conf'), [
    ...BASE_CONF, `port = ${port}`, `unix_socket_directories = '${dir}'`, ...extraConf, '',
  ].join('\n'));
  onCleanup(() => cl.kill());
  if (start) {
    await cl.start();
    await cl.query('CREATE EXTENSION dlock');
  }
  return cl;
}

/** The cluster run.js started for the scenarios that share one (DLOCK_TEST_SHARED). */
export function sharedCluster() {
  const s = process.env.DLOCK_TEST_SHARED;
  if (!s) throw new Error('DLOCK_TEST_SHARED is not set: run the suite with test/run.js');
  const { dir, port } = JSON.parse(s);
  return new Cluster(dir, port);
}

/** A standby of `primary` made with pg_basebackup -R, started. */
export async function startStandby(primary, label) {
  const dir = mkdtempSync(path.join(WORKDIR, `${label}-`));
  const port = await freePort();
  const cl = new Cluster(dir, port);
  await run(path.join(BINDIR, 'pg_basebackup'), ['-h', primary.host, '-p', String(primary.port), '-U', 'postgres', '-D', cl.data, '-R', '-X', 'stream', '--no-sync', '-c', 'fast'], { timeout: 60000 });
  appendFileSync(path.join(cl.data, 'postgresql.conf'), [`port = ${port}`, `unix_socket_directories = '${dir}'`, ''].join('\n'));
  onCleanup(() => cl.kill());
  await cl.start();
  return cl;
}

/** A PgBouncer in transaction mode in front of `cluster`. */
export async function startPgbouncer(cluster, label = 'pgbouncer') {
  const dir = mkdtempSync(path.join(WORKDIR, `${label}-`));
  const port = await freePort();
  writeFileSync(path.join(dir, 'userlist.txt'), '"postgres" ""\n');
  writeFileSync(path.join(dir, 'pgbouncer.ini'), `[databases]
* = host=${cluster.host} port=${cluster.port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = ${port}
unix_socket_dir =
auth_type = trust
auth_file = ${dir}/userlist.txt
admin_users = postgres
pool_mode = transaction
default_pool_size = 4
reserve_pool_size = 0
max_client_conn = 100
logfile = ${dir}/pgbouncer.log
pidfile = ${dir}/pgbouncer.pid
ignore_startup_parameters = extra_float_digits
`);
  const bin = ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer'].find((p) => existsSync(p)) || 'pgbouncer';
  const proc = spawn(bin, [path.join(dir, 'pgbouncer.ini')], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  proc.stderr.on('data', (d) => { err += d; });
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGKILL');
      await new Promise((r) => proc.once('exit', r));
    }
  };
  stop.sync = () => { try { proc.kill('SIGKILL'); } catch { /* */ } };
  onCleanup(stop);
  await waitFor(async () => {
    if (proc.exitCode !== null) throw new Error(`pgbouncer exited: ${err}`);
    const c = new pg.Client({ host: '127.0.0.1', port, user: 'postgres', database: 'postgres', connectionTimeoutMillis: 2000 });
    c.on('error', () => {});
    await c.connect();
    await c.query('SELECT 1');
    await c.end();
    return true;
  }, 15000, 'pgbouncer to accept connections', 50);
  return { port, dir, stop, conninfo: (db) => `host=127.0.0.1 port=${port} user=postgres dbname=${db}` };
}

/** A child process (a test/children script) that prints JSON lines. */
export class Child {
  constructor(script, args = [], env = {}) {
    this.proc = spawn(process.execPath, [path.join(TESTDIR, 'children', script), ...args], {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
    });
    this.events = [];
    this.stderr = '';
    let buf = '';
    this.proc.stdout.on('data', (d) => {
      buf += d;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        try { this.events.push({ ...JSON.parse(line), at: now() }); } catch { this.events.push({ event: 'junk', line, at: now() }); }
      }
    });
    this.proc.stderr.on('data', (d) => { this.stderr += d; });
    this.exited = new Promise((r) => this.proc.once('exit', (code, signal) => r({ code, signal })));
    const kill = async () => {
      if (this.proc.exitCode === null && this.proc.signalCode === null) {
        try { this.proc.kill('SIGCONT'); this.proc.kill('SIGKILL'); } catch { /* */ }
        await this.exited;
      }
    };
    kill.sync = () => { try { this.proc.kill('SIGKILL'); } catch { /* */ } };
    onCleanup(kill);
  }

  send(obj) { this.proc.stdin.write(JSON.stringify(obj) + '\n'); }
  signal(sig) { this.proc.kill(sig); }

  /** Waits for an event matching pred (from index `from` on); returns it. */
  async waitEvent(pred, timeoutMs, what = 'event', from = 0) {
    try {
      return await waitFor(() => this.events.slice(from).find(pred), timeoutMs, what, 10);
    } catch (err) {
      err.message += `\nchild events: ${JSON.stringify(this.events)}\nchild stderr: ${this.stderr.slice(-2000)}`;
      throw err;
    }
  }
}

/** The calls of function `fn` in the current database (pg_stat_user_functions). */
export async function functionCalls(cluster, db, fn) {
  const r = await cluster.query('SELECT coalesce(sum(calls), 0)::int AS n FROM pg_stat_user_functions WHERE funcname = $1', [fn], db);
  return r.rows[0].n;
}

export { readFileSync };
