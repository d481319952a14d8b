// Child of scenario 5: a candidate that campaigns and, once leader, prints
// {"event":"leader","token":...} and holds the leadership until killed.
import { Election } from '../../src/index.js';

const [conninfo, name, owner, ttl] = process.argv.slice(2);
const emit = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const election = new Election(conninfo, name, { ttl: Number(ttl), owner });
emit({ event: 'campaigning' });
const lease = await election.campaign();
emit({ event: 'leader', token: String(lease.token) });
lease.signal.addEventListener('abort', () => emit({ event: 'lost', reason: lease.signal.reason && lease.signal.reason.reason }));
setInterval(() => {}, 1000);
