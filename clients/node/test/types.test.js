// The TypeScript declarations (index.d.ts): tsc --noEmit on a typed usage
// file that imports the package by name (its "exports" map), with lines
// that must be type errors.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import path from 'node:path';
import { TESTDIR } from './lib/harness.js';

test('types: index.d.ts type-checks a typed usage file (tsc --noEmit)', async () => {
  const tsc = path.join(TESTDIR, '..', 'node_modules', 'typescript', 'bin', 'tsc');
  try {
    await promisify(execFile)(process.execPath, [tsc, '--noEmit', '-p', path.join(TESTDIR, 'types', 'tsconfig.json')], { timeout: 300000 });
  } catch (err) {
    assert.fail(`tsc failed:\n${err.stdout}${err.stderr}`);
  }
});
