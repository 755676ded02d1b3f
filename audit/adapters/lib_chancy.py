"""chancy 0.26.0, configured as its documentation says.

Stall recovery: workers write a heartbeat (`heartbeat_poll_interval`, --heartbeat-s: 1 s fast, 30 s
at production) and the Recovery plugin, run by the leader (Leadership plugin), moves `running` jobs
of workers silent longer than `heartbeat_timeout` (--stall-s, whole seconds: 2 s fast, 90 s at
production) back to `pending` with a new claim. The recovering worker runs Recovery every
--sweep-s, and Leadership with a 1 s poll fast or its defaults at production; the paused worker runs no
plugins, so leadership never has to pass from it first. The queue uses chancy's AsyncExecutor.
Outcomes: success returns; fail and retry raise (a job pushed with max_attempts 1 fails for good,
with 3 it is retried: `--outcome` at enqueue picks which).
"""

import asyncio
import logging
import sys

from chancy import Chancy, Queue, QueuedJob, Worker, job
from chancy.plugins.leadership import Leadership
from chancy.plugins.recovery import Recovery

import common

QUEUE = "audit"


@job(queue=QUEUE)
async def audit_job(*, context: QueuedJob):
    await asyncio.to_thread(common.body, common.ARGS, context.id)


async def main(args):
    common.ARGS = args
    recover = args.cmd == "worker" and args.recover
    leadership = Leadership() if args.settings == "production" else Leadership(poll_interval=1, timeout=2)
    plugins = [leadership, Recovery(poll_interval=max(1, round(args.sweep_s)))] if recover else []
    log = logging.getLogger("chancy.audit")  # to stderr: stdout carries the adapter's events only
    log.addHandler(logging.StreamHandler(sys.stderr))
    log.setLevel(logging.INFO)
    async with Chancy(args.dsn, plugins=plugins, no_default_plugins=True, log=log) as chancy:
        if args.cmd == "setup":
            await chancy.migrate()
            await chancy.declare(Queue(QUEUE, concurrency=1, executor="chancy.executors.asyncex.AsyncExecutor",
                                       polling_interval=1))
            common.emit("setup")
        elif args.cmd == "enqueue":
            attempts = 3 if args.outcome == "retry" else 1
            ref = await chancy.push(audit_job.job.with_max_attempts(attempts))
            common.emit("enqueued", job=str(ref.identifier))
        else:
            stall = max(1, round(args.stall_s))
            async with Worker(chancy, worker_id=args.owner, heartbeat_poll_interval=max(1, round(args.heartbeat_s)),
                              heartbeat_timeout=stall) as worker:
                common.emit("ready", worker=args.name)
                await worker.wait_for_shutdown()


if __name__ == "__main__":
    sys.modules.setdefault("lib_chancy", sys.modules["__main__"])
    asyncio.run(main(common.parse(sys.argv[1:])))
