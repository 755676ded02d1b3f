"""procrastinate 3.10.0, configured as its documentation says.

Stall recovery: workers send heartbeats (every --heartbeat-s, `update_heartbeat_interval`: 0.5 s
fast, procrastinate's default 10 s at production); the documented recipe for stalled jobs is a
periodic task that calls `job_manager.get_stalled_jobs()` and `job_manager.retry_job()` for each.
The recipe runs here as a loop in the recovering worker's process every --sweep-s (0.25 s fast, 5 s
at production, where the recipe's cron says every 10 minutes) with `seconds_since_heartbeat` =
--stall-s (2 s fast, the default 30 s at production); the calls are the recipe's own.
A starting worker also prunes the workers whose heartbeat is older than its `stalled_worker_timeout`,
and a pruned worker can claim no job again (a job's `worker_id` references its worker's row). That
timeout keeps procrastinate's default (30 s): the recovering worker starts just after the harness
pauses A, and with the stall threshold there it pruned A or not by whether its own start took longer
than A's heartbeat age (under load it did), which decided whether A could run its own stale retry
again. With the default it never prunes A, as a worker already running when A stalled would not.
Outcomes: success returns; fail raises an exception the task's retry strategy does not retry;
retry raises one it does (`RetryStrategy(retry_exceptions=...)`).
"""

import asyncio
import sys

import procrastinate

import common

QUEUE = "audit"
# The startup prune of stalled workers (procrastinate's default): see the module's docstring.
PRUNE_AFTER_S = 30.0


def make_app(dsn):
    return procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))


def register(app, args):
    retry = procrastinate.RetryStrategy(max_attempts=5, retry_exceptions={common.RetryJob})

    @app.task(name="audit_job", queue=QUEUE, pass_context=True, retry=retry)
    async def audit_job(context):
        await asyncio.to_thread(common.body, args, context.job.id)

    return audit_job


async def recover(app, stall_s, every_s):
    while True:
        for job in await app.job_manager.get_stalled_jobs(seconds_since_heartbeat=stall_s):
            common.emit("recovered", job=str(job.id))
            await app.job_manager.retry_job(job)
        await asyncio.sleep(every_s)


async def main(args):
    app = make_app(args.dsn)
    task = register(app, args)
    async with app.open_async():
        if args.cmd == "setup":
            await app.schema_manager.apply_schema_async()
            common.emit("setup")
        elif args.cmd == "enqueue":
            common.emit("enqueued", job=str(await task.defer_async()))
        else:
            recovery = asyncio.create_task(recover(app, args.stall_s, args.sweep_s)) if args.recover else None
            common.emit("ready", worker=args.name)
            await app.run_worker_async(queues=[QUEUE], concurrency=1, name=args.owner,
                                       update_heartbeat_interval=args.heartbeat_s, stalled_worker_timeout=PRUNE_AFTER_S,
                                       fetch_job_polling_interval=0.2)
            if recovery:
                recovery.cancel()


if __name__ == "__main__":
    asyncio.run(main(common.parse(sys.argv[1:])))
