"""DBOS 3.4.0 (dbos-transact-py), configured as its documentation says.

The job is a workflow enqueued on a DBOS queue (worker_concurrency 1, polled every 0.2 s) whose
one step runs the job body: the step's side effect is the START/END the fake tools record. DBOS has
no heartbeat and no stall threshold: a workflow left PENDING by an executor is recovered when an
executor starts under that executor id (startup recovery), or by an explicit recovery call for that
executor id (what DBOS Conductor or an operator does for an executor it believes dead). The
recovering worker (`--recover`) makes that call at once for every other executor holding a PENDING
workflow; a worker started under the paused one's executor id (the same-name restart) recovers it
at startup by itself. Every process uses one application_version, as recovery across processes
requires. Outcomes: success returns; fail raises from the step (steps are not retried by default),
so the workflow ends in ERROR.
"""

import os
import sys
import time

from dbos import DBOS, DBOSClient

import common

QUEUE = "audit"
RECOVERY_BOUND_S = 30.0


def config(args, executor_id=None):
    # DBOS names its sessions "dbos_transact" unless told otherwise; the audit's commit triggers need
    # the process's own application_name (PGAPPNAME, set by the harness).
    engine = {"connect_args": {"application_name": os.environ.get("PGAPPNAME", "dbos_transact")}}
    c = {"name": "fenceproof-audit", "system_database_url": args.dsn, "application_version": "audit",
         "db_engine_kwargs": engine}
    if executor_id:
        c["executor_id"] = executor_id
    return c


def recover_others(args):
    """The explicit recovery call, for every executor but this one that holds a PENDING workflow."""
    deadline = time.monotonic() + RECOVERY_BOUND_S
    while time.monotonic() < deadline:
        owners = {w.executor_id for w in DBOS.list_workflows(status="PENDING") if w.executor_id != args.owner}
        if owners:
            handles = DBOS._recover_pending_workflows(sorted(owners))
            common.emit("recovered", executors=sorted(owners), workflows=[h.workflow_id for h in handles])
            return
        time.sleep(0.25)


def worker(args):
    DBOS(config=config(args, args.owner))

    @DBOS.step()
    def work():
        common.body(args, DBOS.workflow_id)
        return args.name

    @DBOS.workflow(name="audit_job")
    def audit_job(outcome):
        return work()

    DBOS.launch()
    DBOS.register_queue(QUEUE, worker_concurrency=1, polling_interval_sec=0.2)
    common.emit("ready", worker=args.name)
    if args.recover:
        recover_others(args)
    while True:
        time.sleep(1)


def main(args):
    if args.cmd == "setup":
        DBOS(config=config(args))
        DBOS.launch()  # creates and migrates the system database's schema
        DBOS.destroy()
        common.emit("setup")
    elif args.cmd == "enqueue":
        client = DBOSClient(system_database_url=args.dsn)
        h = client.enqueue({"queue_name": QUEUE, "workflow_name": "audit_job", "app_version": "audit"}, args.outcome)
        common.emit("enqueued", job=h.get_workflow_id())
        client.destroy()
    else:
        worker(args)


if __name__ == "__main__":
    main(common.parse(sys.argv[1:]))
