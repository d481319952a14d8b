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

/**
 * Runs test files with Node's test runner (TAP), echoing its output;
 * returns the counts of its summary (or of the results seen, plus one
 * failure, when it has none: killed or crashed).
 */
function runPhase(phaseFiles, concurrency, env) {
  return new Promise((resolve) => {
    let text = '';
    let killed = false;
    const major = Number(process.versions.node.split('.')[0]);
    const flags = major >= 20 ? [`--test-concurrency=${concurrency}`, '--test-force-exit'] : [];
    child = spawn(process.execPath, ['--test', ...flags, '--test-reporter=tap', ...phaseFiles], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const guard = setTimeout(() => { killed = true; child.kill('SIGKILL'); }, 150000);
    child.stdout.on('data', (d) => { text += d; process.stdout.write(d); });
    child.stderr.on('data', (d) => { process.stdout.write(d); });
    child.on('exit', (code) => {
      clearTimeout(guard);
      child = null;
      if (killed) process.stdout.write('\n# run.js: the tests took more than 150 s and were killed\n');
      const num = (k) => { const m = new RegExp(`^# ${k} (\\d+)$`, 'm').exec(text); return m ? Number(m[1]) : null; };
      const pass = num('pass');
      const fail = num('fail');
      if (pass === null || fail === null || killed) {
        resolve({
          passed: (text.match(/^ok \d+ /gm) || []).length,
          failed: (text.match(/^not ok \d+ /gm) || []).length + 1,
        });
      } else {
        const f = fail + (num('cancelled') || 0);
        resolve({ passed: pass, failed: code !== 0 && f === 0 ? 1 : f });
      }
    });
  });
}

try {
  // The type check first, alone: tsc takes a CPU for seconds, which the
  // scenarios' timings should not share.
  const alone = files.filter((f) => path.basename(f) === 'types.test.js');
  const rest = files.filter((f) => !alone.includes(f));
  if (alone.length) {
    const r = await runPhase(alone, 1, {});
    passed += r.passed;
    failed += r.failed;
  }
  if (rest.length) {
    const shared = await startCluster('shared');
    const r = await runPhase(rest, 2, { DLOCK_TEST_SHARED: JSON.stringify({ dir: shared.dir, port: shared.port }) });
    passed += r.passed;
    failed += r.failed;
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
