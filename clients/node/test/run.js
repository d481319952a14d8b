#!/usr/bin/env node
// Runs the suite: starts the cluster the scenarios share, runs every test
// file with Node's test runner (TAP), stops everything it started (also
// what a crashed test file left behind), and prints the counts line
// "client: N passed, M failed" last.
import { spawn, execFileSync } from 'node:child_process';
import { readdirSync, existsSync, readFileSync, mkdtempSync } from 'node:fs';
import path from 'node:path';

// Everything this run starts lives in a directory of its own under
// DLOCK_CLIENT_WORKDIR: the sweep stops only what is in it.
const top = process.env.DLOCK_CLIENT_WORKDIR;
if (!top) throw new Error('DLOCK_CLIENT_WORKDIR is not set');
process.env.DLOCK_CLIENT_WORKDIR = mkdtempSync(path.join(top, 'node-run-'));
const { startCluster, cleanupAll, TESTDIR, WORKDIR, BINDIR } = await import('./lib/harness.js');

const t0 = performance.now();
const only = process.argv.slice(2);
const files = readdirSync(TESTDIR)
  .filter((f) => f.endsWith('.test.js'))
  .filter((f) => !only.length || only.some((o) => f.startsWith(o)))
  .sort()
  .map((f) => path.join(TESTDIR, f));

function sweep() {
  // Servers and poolers a crashed test file may have left running.
  for (const d of readdirSync(WORKDIR)) {
    const dir = path.join(WORKDIR, d);
    if (existsSync(path.join(dir, 'data', 'postmaster.pid'))) {
      try { execFileSync(path.join(BINDIR, 'pg_ctl'), ['-D', path.join(dir, 'data'), '-m', 'immediate', '-w', 'stop'], { stdio: 'ignore', timeout: 30000 }); } catch { /* */ }
    }
    const pb = path.join(dir, 'pgbouncer.pid');
    if (existsSync(pb)) {
      try { process.kill(Number(readFileSync(pb, 'utf8').trim()), 'SIGKILL'); } catch { /* */ }
    }
  }
}

let passed = 0;
let failed = 0;
let child;
const onSignal = (sig) => {
  if (child) child.kill('SIGKILL');
  cleanupAll().finally(() => { sweep(); process.exit(sig === 'SIGINT' ? 130 : 143); });
};
process.on('SIGINT', onSignal);
process.on('SIGTERM', onSignal);

try {
  const shared = await startCluster('shared');
  let killed = false;
  const out = await new Promise((resolve) => {
    let text = '';
    const major = Number(process.versions.node.split('.')[0]);
    const flags = major >= 20 ? ['--test-concurrency=2', '--test-force-exit'] : [];
    child = spawn(process.execPath, ['--test', ...flags, '--test-reporter=tap', ...files], {
      env: { ...process.env, DLOCK_TEST_SHARED: JSON.stringify({ dir: shared.dir, port: shared.port }) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const guard = setTimeout(() => { killed = true; child.kill('SIGKILL'); }, 150000);
    child.stdout.on('data', (d) => { text += d; process.stdout.write(d); });
    child.stderr.on('data', (d) => { process.stdout.write(d); });
    child.on('exit', (code) => {
      clearTimeout(guard);
      if (killed) process.stdout.write('\n# run.js: the suite took more than 150 s and was killed\n');
      resolve({ text, code });
    });
  });
  const num = (k) => { const m = new RegExp(`^# ${k} (\\d+)$`, 'm').exec(out.text); return m ? Number(m[1]) : null; };
  const pass = num('pass');
  const fail = num('fail');
  if (pass === null || fail === null || killed) {
    // No summary (the runner was killed or crashed): count the top-level results seen.
    passed = (out.text.match(/^ok \d+ /gm) || []).length;
    failed = (out.text.match(/^not ok \d+ /gm) || []).length + 1;
  } else {
    passed = pass;
    failed = fail + (num('cancelled') || 0);
    if (out.code !== 0 && failed === 0) failed = 1;
  }
} catch (err) {
  console.log(`# run.js: ${err && err.stack || err}`);
  failed += 1;
} finally {
  await cleanupAll();
  sweep();
}
console.log(`# wall time ${((performance.now() - t0) / 1000).toFixed(1)} s`);
console.log(`client: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
