"""pgqueuer 1.6.0, configured as its documentation says.

Stall recovery is built in: a worker's running jobs carry a heartbeat column it refreshes every
half `heartbeat_timeout`, and every worker's dequeue also picks a `picked` job whose heartbeat is
older than `heartbeat_timeout` (--stall-s: 2 s fast, pgqueuer's default 30 s at production). A
dequeue waits up to `dequeue_timeout` for a notification before it looks again (--sweep-s: 0.5 s
fast, the default 30 s at production); the heartbeat's interval is the library's own (half the
timeout), so --heartbeat-s is not passed on. The recovering worker needs nothing extra;
`--recover` changes nothing here.
Outcomes: success returns; fail raises (the entrypoint's default `on_failure="delete"`); retry
raises the library's `RetryRequested`.
"""

import asyncio
import sys
from datetime import timedelta

import psycopg
from pgqueuer import PgQueuer, PsycopgDriver, Queries, RetryRequested

import common

ENTRYPOINT = "audit_job"


async def main(args):
    conn = await psycopg.AsyncConnection.connect(args.dsn, autocommit=True)
    driver = PsycopgDriver(conn)
    if args.cmd == "setup":
        await Queries(driver).install()
        common.emit("setup")
    elif args.cmd == "enqueue":
        ids = await Queries(driver).enqueue(ENTRYPOINT, None)
        common.emit("enqueued", job=str(ids[0]))
    else:
        pgq = PgQueuer(driver)

        @pgq.entrypoint(ENTRYPOINT)
        async def audit_job(job):
            try:
                await asyncio.to_thread(common.body, args, job.id)
            except common.RetryJob as e:
                raise RetryRequested(delay=timedelta(0), reason=str(e)) from e

        common.emit("ready", worker=args.name)
        await pgq.run(dequeue_timeout=timedelta(seconds=args.sweep_s), batch_size=1,
                      heartbeat_timeout=timedelta(seconds=args.stall_s))
    await conn.close()


if __name__ == "__main__":
    asyncio.run(main(common.parse(sys.argv[1:])))
