"""Another process that takes a lease over: acquires NAME (waiting up to
WAIT s) and prints its token as a JSON line, then releases.

usage: child_acquire.py CONNINFO NAME TTL WAIT
"""

import json
import sys

import dlock

conninfo, name, ttl, wait = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
try:
    with dlock.Client(conninfo) as client, client.lease(name, ttl=ttl, wait=wait) as lease:
        print(json.dumps({"event": "acquired", "token": lease.token}), flush=True)
except dlock.NotAcquired:
    print(json.dumps({"event": "not-acquired"}), flush=True)
