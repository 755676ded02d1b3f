"""The control: the spec's own protocol (fenceproof's migrations, the fenced fp_* functions) used as
a job queue, so it stands in the same table as the libraries.

The job is a run (agent_runs) with its lease row (worker_leases). A worker takes a run whose lease
is free or expired with fp_lease_acquire (a new epoch), renews it every --heartbeat-s (TTL/4) with fp_lease_renew,
and writes every status change with fp_run_transition under its owner and epoch: pending -> running
when it starts, running -> running (a checkpoint naming the new owner) when it takes over, then
running -> succeeded or failed. Retry gives the run back with fp_lease_release. Stall recovery is
the lease's expiry (TTL = the audit's stall threshold). A worker whose renewal was refused still
tries its final write here, on purpose: the control shows the database refusing it, not the worker
being polite.
"""

import json
import sys
import threading
import time
import uuid

import psycopg

import common


def connect(dsn):
    return psycopg.connect(dsn, autocommit=True, connect_timeout=10)


def enqueue(dsn):
    run = str(uuid.uuid4())
    with connect(dsn) as c, c.transaction():
        c.execute("INSERT INTO agent_tasks (task_id) VALUES ('audit') ON CONFLICT DO NOTHING")
        c.execute("INSERT INTO agent_runs (run_id, task_id, status) VALUES (%s, 'audit', 'pending')", (run,))
        c.execute("INSERT INTO worker_leases (run_id) VALUES (%s)", (run,))
        c.execute("UPDATE agent_tasks SET active_run_id = %s WHERE task_id = 'audit'", (run,))
    common.emit("enqueued", job=run)


def transition(c, run, owner, epoch, expected, frm, to, checkpoint):
    return c.execute(
        "SELECT outcome, revision, detail FROM fp_run_transition(%s::uuid, %s, %s, %s, %s, %s, %s::jsonb,"
        " NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
        (run, owner, epoch, expected, frm, to, None if checkpoint is None else json.dumps(checkpoint))).fetchone()


def heartbeat(dsn, run, owner, epoch, ttl_ms, lost, every_s):
    with connect(dsn) as c:
        while not lost.is_set():
            time.sleep(every_s)
            if c.execute("SELECT 1 FROM fp_lease_renew(%s::uuid, %s, %s, %s)", (run, owner, epoch, ttl_ms)).fetchone() is None:
                common.emit("lease_lost", job=run, epoch=epoch)
                lost.set()


def worker(args):
    ttl_ms = int(args.stall_s * 1000)
    owner = "audit-%s" % args.owner  # the same-name restart reuses it: the epoch fences, not the name
    c = connect(args.dsn)
    common.emit("ready", worker=args.name)
    while True:
        row = c.execute(
            "SELECT r.run_id, r.status, r.revision FROM agent_runs r JOIN worker_leases l USING (run_id)"
            " WHERE r.status IN ('pending', 'running') AND (l.owner IS NULL OR l.expires_at <= clock_timestamp())"
            " LIMIT 1").fetchone()
        got = row and c.execute("SELECT epoch FROM fp_lease_acquire(%s::uuid, %s, %s)",
                                (str(row[0]), owner, ttl_ms)).fetchone()
        if not got:
            time.sleep(0.2)
            continue
        run, status, revision, epoch = str(row[0]), row[1], row[2], got[0]
        lost = threading.Event()
        threading.Thread(target=heartbeat, args=(args.dsn, run, owner, epoch, ttl_ms, lost, args.heartbeat_s or args.stall_s / 4), daemon=True).start()
        frm = "pending" if status == "pending" else "running"
        outcome, revision, _ = transition(c, run, owner, epoch, revision, frm, "running", {"owner": owner})
        if outcome != "ok":
            common.emit("refused", job=run, write="start", outcome=outcome)
            continue
        def checkpoint(run=run, epoch=epoch, revision=revision):
            # A progress record naming this worker, written as the protocol writes one: a
            # running -> running transition under the worker's owner and epoch.
            out, _, _ = transition(c, run, owner, epoch, revision, "running", "running", {"progress": args.name})
            common.emit("written", job=run, write="checkpoint", outcome=out)
            return out

        try:
            common.body(args, run, checkpoint=checkpoint)
            outcome, _, _ = transition(c, run, owner, epoch, revision, "running", "succeeded", None)
            common.emit("written", job=run, write="succeeded", outcome=outcome)
        except common.FailJob:
            outcome, _, _ = transition(c, run, owner, epoch, revision, "running", "failed", None)
            common.emit("written", job=run, write="failed", outcome=outcome)
        except common.RetryJob:
            n = c.execute("SELECT fp_lease_release(%s::uuid, %s, %s)", (run, owner, epoch)).fetchone()[0]
            common.emit("written", job=run, write="release", outcome="ok" if n == 1 else "lease_lost")
        lost.set()


if __name__ == "__main__":
    a = common.parse(sys.argv[1:])
    if a.cmd == "setup":
        common.emit("setup")  # the harness cloned the database from its migrated template
    elif a.cmd == "enqueue":
        enqueue(a.dsn)
    else:
        worker(a)
