// Scenario 2 (docs/clients.md): renewal connection terminated.
import { test, after } from 'node:test';
import { sharedCluster, cleanupAll } from './lib/harness.js';
import { checkRenewalConnectionTerminated } from './lib/checks.js';

after(cleanupAll);

test('s2 renewal connection terminated: the lease survives with its token and keeps being renewed', async () => {
  await checkRenewalConnectionTerminated(sharedCluster(), 's2:lease');
});
