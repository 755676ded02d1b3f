"""saq 0.26.4 (its PostgresQueue), configured as its documentation says.

Stall recovery, fast: a job enqueued with `heartbeat` (--stall-s, whole seconds) is "stuck" once
its stored `touched` is older than that; the job body heartbeats with `job.update()` every
--heartbeat-s, as saq's documentation asks of long jobs, and the job timeout is off. At production
(--heartbeat-s 0) the job keeps saq's defaults, no heartbeat and `timeout` = --stall-s (10 s), so a
job is stuck once it has run that long. A worker's upkeep `sweep`
(every `timers["sweep"]`, --sweep-s: 1 s fast, the default 60 s at production) aborts stuck jobs, waits up to 5 s for the owner to confirm,
then re-queues those with retries left. Only one worker sweeps at a time: the sweep takes a
session-level advisory lock and keeps it. The recovering worker (B) sweeps; the paused worker (A)
runs no sweep, so it cannot be the one holding the sweep lock (a paused sweeper would stop every
recovery: nothing here measures that). Dequeue polls every 0.25 s (saq's re-queue does not NOTIFY).
Outcomes: success returns; checkpoint writes saq's progress record (`job.update(progress=0.5)`: the
job's `progress` field, stored in the `job` column of `saq_jobs` by `PostgresQueue._update`) and
returns; retry raises (the job has 3 attempts); fail raises after the body set
its own job's `retries` to the attempts made, so saq finishes it `failed` instead of retrying
(saq retries every exception while attempts remain; it has no final-failure exception).
"""

import asyncio
import logging
import sys

from saq import Worker
from saq.queue.postgres import PostgresQueue

import common

FUNCTION = "audit_job"
ATTEMPTS = 3


class NoSweepQueue(PostgresQueue):
    """A worker that does not run saq's recovery: its sweep does nothing."""

    async def sweep(self, lock=60, abort=5.0):
        return []


def make_queue(args, recover):
    cls = PostgresQueue if recover else NoSweepQueue
    return cls.from_url(args.dsn, name="audit", min_size=1, max_size=4)


async def audit_job(ctx):
    job = ctx["job"]
    loop = asyncio.get_running_loop()

    def heartbeat():
        asyncio.run_coroutine_threadsafe(job.update(), loop).result(timeout=10)

    def progress():
        # saq's progress record: `job.update(progress=...)` -> Queue.update -> PostgresQueue._update,
        # which rewrites the whole stored job by key.
        asyncio.run_coroutine_threadsafe(job.update(progress=0.5), loop).result(timeout=10)

    tick = heartbeat if common.ARGS.heartbeat_s > 0 else None
    try:
        await asyncio.to_thread(common.body, common.ARGS, job.key, tick, progress)
    except common.FailJob:
        job.retries = job.attempts
        raise


async def say_sweep_lock(queue, name):
    """Whether this worker's sweep holds saq's sweep lock, once its first sweeps have run (an event:
    secondary evidence of which worker recovers)."""
    await asyncio.sleep(1.5)
    common.emit("sweep_lock", worker=name, held=bool(getattr(queue, "_has_sweep_lock", False)))


async def main(args):
    common.ARGS = args
    logging.basicConfig(stream=sys.stderr, level=logging.INFO)
    recover = args.cmd == "worker" and args.recover
    queue = make_queue(args, recover)
    await queue.connect()
    try:
        if args.cmd == "setup":
            common.emit("setup")
        elif args.cmd == "enqueue":
            stall = max(1, round(args.stall_s))
            beats = args.heartbeat_s > 0
            job = await queue.enqueue(FUNCTION, timeout=0 if beats else stall, heartbeat=stall if beats else 0,
                                      retries=ATTEMPTS, ttl=3600)
            common.emit("enqueued", job=job.key)
        else:
            worker = Worker(queue, functions=[(FUNCTION, audit_job)], id=args.owner, concurrency=1,
                            timers={"sweep": args.sweep_s, "abort": 1, "schedule": 1, "worker_info": 10},
                            poll_interval=0.25)
            common.emit("ready", worker=args.name)
            if recover:
                asyncio.get_running_loop().create_task(say_sweep_lock(queue, args.name))
            await worker.start()
    finally:
        await queue.disconnect()


if __name__ == "__main__":
    asyncio.run(main(common.parse(sys.argv[1:])))
