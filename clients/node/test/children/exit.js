// Child of the rules test: takes a lease (renewed at least once), a set and
// a permit, releases them, and prints {"event":"done"}; the process must
// then exit by itself (no timer or connection of the client keeps it alive).
// Should it still run a second later, it prints what keeps it alive
// ({"event":"alive"}, from a timer that does not keep it alive itself).
import { withLease, withLeases, withPermit } from '../../src/index.js';

const [conninfo] = process.argv.slice(2);
const emit = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const renewals = await withLease(conninfo, 'rules:exit', { ttl: 6 }, async (lease) => {
  while (lease.renewals < 1) await new Promise((r) => setTimeout(r, 50));
  return lease.renewals;
});
await withLeases(conninfo, ['rules:exit:a', 'rules:exit:b'], { ttl: 60 }, () => null);
await withPermit(conninfo, 'rules:exit:p', { permits: 2, ttl: 60 }, () => null);
emit({ event: 'done', renewals });
setTimeout(() => emit({ event: 'alive', resources: process.getActiveResourcesInfo() }), 1000).unref();
