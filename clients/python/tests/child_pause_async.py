"""Scenario 1's child, asyncio: holds a lease (ttl 4 s) and writes fenced
rows; after the parent's SIGSTOP and SIGCONT, its body (awaiting a line on
stdin) must be cancelled before it reads anything, the scope must end with
LeaseLost, and a later write with its token must be rejected.  Prints JSON
lines.

usage: child_pause_async.py CONNINFO NAME TABLE MUTATION
"""

import asyncio
import json
import sys

import psycopg

import dlock
import dlock.aio
import mutations

conninfo, name, table, mutation = sys.argv[1:5]
mutations.apply(mutation)


def say(**kw):
    print(json.dumps(kw), flush=True)


async def main():
    conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
    token = None
    try:
        async with dlock.aio.Client(conninfo) as client:
            async with client.lease(name, ttl=4) as lease:
                token = lease.token
                say(event="acquired", token=token)
                for _ in range(3):
                    async with lease.fenced(conn) as tx:
                        await tx.execute(f"INSERT INTO {table} (writer) VALUES ('old')")
                say(event="wrote", rows=3)
                try:
                    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
                except asyncio.CancelledError:
                    say(event="body", cancelled=True, lost=lease.lost.is_set(), reason=lease.lost_reason)
                    raise
                say(event="body", cancelled=False, line=line.strip(), lost=lease.lost.is_set())
                async with lease.fenced(conn) as tx:
                    await tx.execute(f"INSERT INTO {table} (writer) VALUES ('old-late')")
                say(event="fenced", error=None)
        say(event="scope", error=None)
    except dlock.LeaseLost as e:
        say(event="scope", error="LeaseLost", reason=e.reason)
    except dlock.StaleToken:
        say(event="scope", error="StaleToken")
    try:
        with dlock.fence_errors():
            await conn.execute(f"INSERT INTO {table} (writer, fence_token) VALUES ('old-late', %s)", (token,))
        say(event="write", error=None)
    except dlock.StaleToken as e:
        say(event="write", error="StaleToken", message=str(e))
    await conn.close()


asyncio.run(main())
