"""A candidate of scenario 5: campaigns for NAME and, once leader, prints
its token and holds the leadership until it is killed.

usage: child_candidate.py CONNINFO NAME OWNER TTL
"""

import json
import sys
import time

import dlock

conninfo, name, owner, ttl = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
print(json.dumps({"event": "campaigning"}), flush=True)
election = dlock.Election(conninfo, name, ttl=ttl, owner=owner)
with election.campaign() as lease:
    print(json.dumps({"event": "leader", "token": lease.token, "owner": owner}), flush=True)
    while True:
        lease.check()
        time.sleep(0.1)
