"""django-q2 1.11.1 with its ORM broker on PostgreSQL (Django 5.2, psycopg 3).

A queued task is a row of `django_q_ormq` (its signed payload and a `lock` timestamp). The broker's
`dequeue` takes rows whose `lock` passed and moves `lock` to now + `retry` (--stall-s: 2 s fast,
django-q2's default 60 s at production; the broker polls every --sweep-s, its default 0.2 s): a visibility timeout with no heartbeat, so a task not acknowledged within `retry` is
delivered again to whichever cluster pulls next; stall recovery is built in and `--recover`
changes nothing. The monitor saves the result into `django_q_task` (keyed by the task's id) and
acknowledges by deleting the `django_q_ormq` row by its primary key.

One process per worker: the cluster's own pusher, worker and monitor functions
(`django_q.pusher.pusher`, `django_q.worker.worker`, `django_q.monitor.monitor`) run as three
threads of this process, joined by in-process queues, instead of the child processes django-q2's
Sentinel forks, so that the harness's pause of one process pauses the whole cluster. The task
timeout is unset: a SIGALRM timeout cannot run outside the main thread, and the audit's job
outlasts `retry` on purpose (django-q2's documentation asks for timeout < retry, which a paused
cluster cannot keep either: its guard is paused with it).
Outcomes: success returns; fail raises in a task enqueued with `ack_failure=True` (the failure is
acknowledged: final); retry raises in a task without it (not acknowledged: delivered again after
`retry`).
"""

import queue
import sys
import threading
from urllib.parse import unquote, urlparse

import common

CLUSTER = "audit"


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
        Q_CLUSTER={"name": CLUSTER, "orm": "default", "workers": 1, "retry": max(1, round(args.stall_s)),
                   "poll": args.sweep_s, "bulk": 1, "max_attempts": 0, "catch_up": False},
    )
    import django

    django.setup()


def audit_job():
    common.body(common.ARGS, "django_q2 task", None)


def cluster(args):
    from django_q.brokers import get_broker
    from django_q.monitor import monitor
    from django_q.pusher import pusher
    from django_q.worker import worker
    from multiprocessing import Value

    tasks, results, stop = queue.Queue(), queue.Queue(), threading.Event()
    timer = Value("f", -1)
    threads = [
        threading.Thread(target=pusher, args=(tasks, stop, get_broker()), name="pusher", daemon=True),
        threading.Thread(target=worker, args=(tasks, results, timer, None), name="worker", daemon=True),
        threading.Thread(target=monitor, args=(results, get_broker()), name="monitor", daemon=True),
    ]
    for t in threads:
        t.start()
    common.emit("ready", worker=args.name)
    for t in threads:
        t.join()


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
