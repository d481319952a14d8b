// Scenario 9 (docs/clients.md): the mutation check. Scenario checks run
// again with a planted bug and must fail.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mutation } from '../src/testing.js';
import { LeaseLost } from '../src/index.js';
import { sharedCluster, cleanupAll } from './lib/harness.js';
import { checkRenewalConnectionTerminated, checkProgressDeadline } from './lib/checks.js';

after(cleanupAll);

test('s9 mutation check: with renewal disabled, scenario 2 fails', async () => {
  mutation.noRenewal = true;
  try {
    await assert.rejects(checkRenewalConnectionTerminated(sharedCluster(), 's9:norenew'), (err) => {
      // Lost at its deadline (or no renewal seen): the check saw the bug.
      assert.ok(err instanceof LeaseLost && err.reason === 'deadline' || /renewal/.test(err.message), `unexpected failure: ${err.stack}`);
      return true;
    });
  } finally {
    mutation.noRenewal = false;
  }
});

test('s9 mutation check: with the loss signal never sent, scenario 7 (progress) fails', async () => {
  mutation.noLossSignal = true;
  try {
    await assert.rejects(checkProgressDeadline(sharedCluster(), 's9:nosignal'), (err) => {
      assert.match(err.message, /not settled within/, `unexpected failure: ${err.stack}`);
      return true;
    });
  } finally {
    mutation.noLossSignal = false;
  }
});
