"""Absurd 0.5.1 (absurd-sdk, schema from absurdctl), configured as its documentation says.

A task's attempt is a run; a worker claims a run for `claim_timeout` seconds (--stall-s: 2 s fast,
the SDK's default 120 s at production) and a long task extends its claim with `ctx.heartbeat()`
(every --heartbeat-s while the job waits). Stall recovery is built into claiming: every `claim_task` call first fails runs whose claim
expired (`$ClaimTimeout`) and, attempts remaining, a new run is created, which any worker claims.
So `--recover` changes nothing here. The schema is the SQL `absurdctl init` applies (bundled in
absurdctl), run through psycopg. Outcomes: success returns; fail and retry raise (Absurd retries a
raising task while attempts remain: the job has 2 attempts for success and fail, the expired claim
taking one, and 5 for retry); checkpoint completes a step (`ctx.step`) before returning.
"""

import sys

import absurdctl
import psycopg
from absurd_sdk import Absurd

import common

QUEUE = "audit"
TASK = "audit_job"


def worker(args):
    app = Absurd(args.dsn, queue_name=QUEUE)

    @app.register_task(TASK)
    def audit_job(params, ctx):
        common.body(args, ctx.task_id, tick=ctx.heartbeat,
                    checkpoint=lambda: ctx.step("progress", lambda: {"by": args.name}))
        return {"by": args.name}

    common.emit("ready", worker=args.name)
    app.start_worker(worker_id=args.owner, claim_timeout=max(1, round(args.stall_s)), poll_interval=0.2)


def main(args):
    if args.cmd == "setup":
        with psycopg.connect(args.dsn, autocommit=True) as c:
            c.execute(absurdctl.BUNDLED_SCHEMA_SQL)
        Absurd(args.dsn, queue_name=QUEUE).create_queue(QUEUE)
        common.emit("setup")
    elif args.cmd == "enqueue":
        attempts = 5 if args.outcome == "retry" else 2
        r = Absurd(args.dsn, queue_name=QUEUE).spawn(TASK, {"outcome": args.outcome}, max_attempts=attempts,
                                                        queue=QUEUE)
        common.emit("enqueued", job=str(r["task_id"]))
    else:
        worker(args)


if __name__ == "__main__":
    main(common.parse(sys.argv[1:]))
