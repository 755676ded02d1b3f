"""django-q2 1.11.1 with its ORM broker on PostgreSQL (Django 5.2, psycopg 3), run as `qcluster`.

A queued task is a row of `django_q_ormq` (its signed payload and a `lock` timestamp). The broker's
`dequeue` takes rows whose `lock` passed and moves `lock` to now + `retry` (--stall-s: 25 s fast,
django-q2's default 60 s at production; the broker polls every --sweep-s, its default 0.2 s): a
visibility timeout with no heartbeat, so a task not acknowledged within `retry` is delivered again
to whichever cluster pulls next; stall recovery is built in and `--recover` changes nothing. The
monitor saves the result into `django_q_task` (keyed by the task's id: `monitor.save_task`) and
acknowledges by deleting the `django_q_ormq` row by its primary key.

The worker is django-q2's own `qcluster` management command (`Cluster.start`: a Sentinel process
forks the pusher, the worker and the monitor; SIGTERM runs `Cluster.sig_handler` -> `Sentinel.stop`,
which lets the running task finish). The harness pauses the whole process group. `timeout` is set
as django-q2's configuration check asks (`conf.py`: "Retry and timeout are misconfigured" unless
timeout < retry): retry - 5 s (20 s fast, 55 s at production). The worker's `TimeoutHandler` arms
SIGALRM for it, a wall-clock alarm that keeps running while the cluster is paused, and the
Sentinel's guard kills a worker whose task outlived it.
Outcomes: success returns; fail raises in a task enqueued with `ack_failure=True` (the failure is
acknowledged: final); retry raises in a task without it (not acknowledged: delivered again after
`retry`). A body ended by the timeout records its end with the tools and says so (`aborted`) before the
exception goes on.
"""

import sys
from urllib.parse import unquote, urlparse

import common

CLUSTER = "audit"


def retry(args):
    return max(2, round(args.stall_s))


def timeout(args):
    """Shorter than retry, as django-q2 asks: 5 s less (at least 1 s)."""
    return max(1, retry(args) - 5)


def configure(args):
    from django.conf import settings

    u = urlparse(args.dsn)
    db = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": u.path.lstrip("/"),
        "USER": unquote(u.username or ""),
        "PASSWORD": unquote(u.password or ""),
        "HOST": unquote(u.hostname or ""),
        "PORT": str(u.port or ""),
    }
    settings.configure(
        DATABASES={"default": db},
        INSTALLED_APPS=["django_q"],
        USE_TZ=True,
        # django-q2 signs task payloads with it; every process of a cell must share it. A throwaway
        # database's test value, not a secret.
        SECRET_KEY="fenceproof-audit-payload-signing",
        Q_CLUSTER={"name": CLUSTER, "orm": "default", "workers": 1, "retry": retry(args),
                   "timeout": timeout(args), "poll": args.sweep_s, "bulk": 1, "max_attempts": 0,
                   "catch_up": False},
    )
    import django

    django.setup()


def audit_job():
    try:
        common.body(common.ARGS, "django_q2 task", None)
    except BaseException as e:
        # django-q2's TimeoutException (SIGALRM after `timeout`) ends the body without END: say so.
        if not isinstance(e, (common.FailJob, common.RetryJob)):
            # The execution has ended (the library stopped it): the ledger gets its end, so that a
            # later execution is not taken for one running beside it.
            common.record(common.ARGS.tools, "django_q2 task", common.ARGS.name, "end")
            common.emit("aborted", worker=common.ARGS.name, reason=repr(e)[:300])
        raise


def cluster(args):
    """django-q2's own `qcluster` command: it returns once the Sentinel has stopped."""
    from django.core.management import call_command

    common.emit("ready", worker=args.name)
    call_command("qcluster")


def main(args):
    common.ARGS = args
    configure(args)
    if args.cmd == "setup":
        from django.core.management import call_command

        call_command("migrate", "django_q", verbosity=0)
        common.emit("setup")
    elif args.cmd == "enqueue":
        from django_q.tasks import async_task

        task_id = async_task("lib_django_q2.audit_job", ack_failure=(args.outcome == "fail"))
        common.emit("enqueued", job=task_id)
    else:
        cluster(args)


if __name__ == "__main__":
    sys.modules.setdefault("lib_django_q2", sys.modules["__main__"])
    main(common.parse(sys.argv[1:]))
