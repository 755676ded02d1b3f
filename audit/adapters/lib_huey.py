"""huey 3.5.4 on PostgreSQL through its SQL storage (`huey.contrib.sql_huey.SqlHuey`, peewee), run as
huey's own consumer (`huey.bin.huey_consumer`, its defaults: one worker thread).

A task is a row of the `task` table (queue, pickled data, priority). A consumer's worker dequeues
with one transaction (`SqlStorage.dequeue`): the first row `FOR UPDATE SKIP LOCKED`, then DELETE of
that row, so the claim is the delete and nothing of the task stays in the queue while it runs.
The outcome goes to the `kv` table (`SqlStorage.put_data`, the result store): the return value on
success, an `Error` on a final failure; a retry re-enqueues the task (a new row). huey has no
heartbeat, no lease and no recovery of a dequeued task, so `--recover` changes nothing and the
stall settings are not used.

The worker execs `python -m huey.bin.huey_consumer lib_huey.huey`, passing the audit's arguments in
the environment, as an operator runs the consumer. Outcomes: success returns True (stored in
`kv`); fail raises (task retries=0: a final failure, its Error stored in `kv`); retry raises huey's
RetryTask (re-enqueued at once).
"""

import json
import os
import sys

import common

ENV = "FP_AUDIT_ARGV"


def huey_for(args):
    from huey.contrib.sql_huey import SqlHuey

    # peewee's URL parser takes the DSN; the sessions carry $PGAPPNAME through libpq.
    return SqlHuey(name="audit", database=args.dsn)


def declare(huey):
    from huey.exceptions import RetryTask

    @huey.task(retries=0)
    def audit_job():
        try:
            common.body(common.ARGS, "huey task", None)
        except common.RetryJob as e:
            raise RetryTask(str(e)) from e
        return True

    return audit_job


def main(args):
    common.ARGS = args
    if args.cmd == "setup":
        # SqlStorage creates its tables (kv, schedule, task, counter) when it is built.
        huey_for(args)
        common.emit("setup")
    elif args.cmd == "enqueue":
        # The task's name in huey's registry is its module's: enqueue through `lib_huey`, the module
        # the consumer imports.
        import importlib

        os.environ[ENV] = json.dumps(sys.argv[1:])
        result = importlib.import_module("lib_huey").audit_job()
        common.emit("enqueued", job=result.id)
    else:
        os.environ[ENV] = json.dumps(sys.argv[1:])
        folder = os.path.dirname(os.path.abspath(__file__))
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (folder, os.environ.get("PYTHONPATH")) if p)
        argv = [sys.executable, "-m", "huey.bin.huey_consumer", "lib_huey.huey"]
        os.execv(sys.executable, argv)


if __name__ == "__main__":
    main(common.parse(sys.argv[1:]))
elif ENV in os.environ:
    # Imported by huey's consumer (`lib_huey.huey`): the instance and its one task.
    common.ARGS = common.parse(json.loads(os.environ[ENV]))
    if common.ARGS.cmd == "worker":
        common.emit("ready", worker=common.ARGS.name)
    huey = huey_for(common.ARGS)
    audit_job = declare(huey)
