"""dramatiq 1.18.0 with its PostgreSQL broker, dramatiq-pg 0.12.0, run as the `dramatiq` CLI.

A message is a row of `dramatiq.queue` (`state` queued, consumed, done or rejected). A consumer
claims a message with one statement (`CONSUME_ONE` in `dramatiq_pg/broker.py`): `state = 'consumed'`
where the row is queued or consumed AND `pg_try_advisory_lock(<the message's lock>)` succeeds on
the consumer's own session, which keeps the lock until its message is acknowledged. A consumer
looks for pending (queued or consumed) messages when it starts and then at random. The recovery
dramatiq-pg documents is its `recover` command (`dramatiq_pg/cli.py`: consumed messages older than
`--minage` back to queued); the recovering worker (`--recover`) runs that statement every
--sweep-s with --stall-s as the minimum age, as an operator's cron would, more often.

The worker is the `dramatiq` CLI (one process, one thread): `worker` re-executes this file's
module under it, passing the audit's arguments in the environment. The harness pauses the whole
process group. Outcomes: success returns (ack: `done`); fail raises an exception the actor does not
retry (nack: `rejected`); retry raises one it retries (dramatiq's Retries middleware re-enqueues
the message after 0.1 s).
"""

import json
import os
import sys
import threading

import common

ENV = "FP_AUDIT_ARGV"


def broker_for(args):
    import dramatiq
    from dramatiq.middleware import default_middleware
    from dramatiq_pg import PostgresBroker

    # dramatiq-pg names its sessions itself: keep the harness's name (the commit triggers' writer).
    # Prometheus's exposition server is left out: two workers on one host would share its port.
    sep = "&" if "?" in args.dsn else "?"
    url = "%s%sapplication_name=%s" % (args.dsn, sep, os.environ.get("PGAPPNAME", "fp-audit"))
    middleware = [m() for m in default_middleware if m.__name__ != "Prometheus"]
    broker = PostgresBroker(url=url, results=False, middleware=middleware)
    dramatiq.set_broker(broker)
    return broker


def recover_loop(args, broker):
    """dramatiq-pg's `recover` statement, every --sweep-s (the operator's cron, tightened)."""
    import time

    from dramatiq_pg.cli import QUERIES
    from dramatiq_pg.utils import transaction

    while True:
        with transaction(broker.pool) as curs:
            curs.execute(QUERIES.RECOVER, ("%s seconds" % args.stall_s,))
        time.sleep(args.sweep_s)


def declare(args):
    import dramatiq

    broker_for(args)

    def retry_when(retries, exc):
        return isinstance(exc, common.RetryJob) and retries < 3

    @dramatiq.actor(actor_name="audit_job", retry_when=retry_when, min_backoff=100, max_backoff=100)
    def audit_job():
        common.body(common.ARGS, "dramatiq message", None)

    return audit_job


def main(args):
    common.ARGS = args
    if args.cmd == "setup":
        from dramatiq_pg.schema import generate_init_sql
        from dramatiq_pg.utils import transaction

        broker = broker_for(args)
        with transaction(broker.pool) as curs:
            curs.execute(generate_init_sql("dramatiq", ""))
        common.emit("setup")
    elif args.cmd == "enqueue":
        message = declare(args).send()
        common.emit("enqueued", job=message.message_id)
    else:
        # Run under the dramatiq CLI, which imports this module by name: same pid, its own processes.
        os.environ[ENV] = json.dumps(sys.argv[1:])
        folder = os.path.dirname(os.path.abspath(__file__))
        argv = [sys.executable, "-m", "dramatiq", "lib_dramatiq_pg", "--processes", "1", "--threads", "1",
                "--path", folder]
        os.execv(sys.executable, argv)


if __name__ == "__main__":
    main(common.parse(sys.argv[1:]))
elif ENV in os.environ:
    # Imported by the dramatiq CLI's worker process: the broker, the actor and (B) the recovery.
    common.ARGS = common.parse(json.loads(os.environ[ENV]))
    common.emit("ready", worker=common.ARGS.name)
    audit_job = declare(common.ARGS)
    broker = audit_job.broker
    if common.ARGS.recover:
        threading.Thread(target=recover_loop, args=(common.ARGS, broker), daemon=True).start()
