"""What every audit adapter shares: its command line, the job body and the events it prints.

An adapter is one small file per job-queue library. The harness runs it as separate processes:

    adapter setup   --dsn DSN                 install the library's schema
    adapter enqueue --dsn DSN                 enqueue the one audited job
    adapter worker  --dsn DSN --name A ...    run the library's own worker until stopped

Every database session of a process carries application_name = $PGAPPNAME (set by the harness,
read by libpq), so the harness's commit triggers tell the writers apart. The job body is the same
for every library: it records START with the fake tools (an fsynced ledger the harness reads),
waits until the harness opens this worker's gate (a file), records END, then ends as the worker was
told: success, fail (a final failure) or retry (the library's own retry request).

Events go to stdout as JSON lines. They are secondary evidence: the verdicts come from the tools'
ledger and the commit triggers.
"""

import argparse
import json
import os
import sys
import time
import urllib.request
import uuid

GATE_TIMEOUT_S = 120.0

# The worker's arguments, for libraries that import the job function by its module path (a second
# module object, so it cannot see the adapter's own globals).
ARGS = None


class FailJob(Exception):
    """The job body failing for good (outcome `fail`)."""


class RetryJob(Exception):
    """The job body asking its library to run it again (outcome `retry`)."""


def emit(event, **fields):
    fields["event"] = event
    fields["pid"] = os.getpid()
    fields["at"] = time.time()
    sys.stdout.write(json.dumps(fields, default=str) + "\n")
    sys.stdout.flush()


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("setup", "enqueue", "worker"):
        s = sub.add_parser(name)
        s.add_argument("--dsn", required=True)
        s.add_argument("--outcome", choices=("success", "fail", "retry", "checkpoint"), default="success",
                       help="how the first worker's execution ends (enqueue: a library may shape the job for it)")
        # The settings the harness runs the library at (audit/src/settings.rs): their name and numbers.
        s.add_argument("--settings", choices=("fast", "production"), default="fast")
        s.add_argument("--stall-s", type=float, default=2.0,
                       help="the library's stall threshold (heartbeat age, claim or visibility timeout) in seconds")
        s.add_argument("--heartbeat-s", type=float, default=0.5,
                       help="how often a live worker proves it is alive, in seconds (0: no heartbeat)")
        s.add_argument("--sweep-s", type=float, default=0.25,
                       help="how often the library's recovery looks for stalled jobs, in seconds")
        if name == "worker":
            s.add_argument("--name", required=True)
            s.add_argument("--owner", default=None,
                           help="the worker's name in the library (default: --name); the same-name restart "
                                "gives the new worker the paused one's")
            s.add_argument("--tools", required=True, help="HOST:PORT of the fake tools")
            s.add_argument("--gates", required=True, help="folder of the gate files")
            s.add_argument("--recover", action="store_true",
                           help="also run the library's stall recovery in this process")
    a = p.parse_args(argv)
    if a.cmd == "worker" and a.owner is None:
        a.owner = a.name
    if min(a.stall_s, a.sweep_s) <= 0 or a.heartbeat_s < 0:
        p.error("--stall-s and --sweep-s must be positive and --heartbeat-s not negative")
    return a


def record(tools, job, worker, phase):
    """One real side effect: a `plain` resource with the fake tools, fsynced before the answer."""
    body = {
        "operation_id": "audit/%s/%s/%s/%s" % (job, worker, phase, uuid.uuid4().hex[:8]),
        "request": {"job": str(job), "worker": worker, "phase": phase, "pid": os.getpid()},
    }
    req = urllib.request.Request("http://%s/tools/plain/create" % tools, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        if r.status not in (200, 201):
            raise RuntimeError("fake tools answered %s" % r.status)


def gate_timeout(args):
    """How long a body waits for its gate: the fast bound, and past a production threshold the
    harness may wait out (a pause, the library's recovery, the other worker's run) before opening it."""
    return GATE_TIMEOUT_S + 4 * (args.stall_s + args.sweep_s)


def wait_gate(gates, worker, tick=None, timeout_s=GATE_TIMEOUT_S, tick_s=None):
    path = os.path.join(gates, worker)
    deadline = time.monotonic() + timeout_s
    tick_s = tick_s or TICK_S
    next_tick = time.monotonic() + tick_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise RuntimeError("gate %s never opened" % path)
        if tick is not None and time.monotonic() >= next_tick:
            try:
                tick()
            except Exception as e:
                # The library stopped this execution (its heartbeat was refused): say so, so the
                # harness stops waiting for an END that will not come; the library handles the rest.
                emit("aborted", worker=worker, reason=repr(e)[:300])
                raise
            next_tick = time.monotonic() + tick_s
        time.sleep(0.02)


TICK_S = 0.5


def body(args, job, tick=None, checkpoint=None):
    """The job's work, blocking: call it from a thread in an async library. Raises FailJob or
    RetryJob when the worker was told to end that way. `tick`, when given, is called every
    --heartbeat-s while the job waits, never when it is 0 (a library whose documentation asks long
    tasks to heartbeat);
    `checkpoint`, when given and the outcome is `checkpoint`, writes the library's own
    checkpoint/progress record once the gate opened, and the job then succeeds."""
    emit("start", job=str(job), worker=args.name)
    record(args.tools, job, args.name, "start")
    wait_gate(args.gates, args.name, tick if args.heartbeat_s > 0 else None, gate_timeout(args), args.heartbeat_s)
    if args.outcome == "checkpoint" and checkpoint is not None:
        try:
            checkpoint()
        except Exception as e:
            # The library refused the checkpoint and stops this execution: say so (no END follows).
            emit("aborted", worker=args.name, reason=repr(e)[:300])
            raise
        emit("written", job=str(job), worker=args.name, write="checkpoint", outcome="returned")
    record(args.tools, job, args.name, "end")
    emit("end", job=str(job), worker=args.name, outcome=args.outcome)
    if args.outcome == "fail":
        raise FailJob("the audit told %s to fail" % args.name)
    if args.outcome == "retry":
        raise RetryJob("the audit told %s to retry" % args.name)
