"""django-tasks 0.12.0 (the backport of Django's Tasks framework) with its database backend,
django-tasks-db 0.13.0, on PostgreSQL (Django 5.2, psycopg 3), run as its own `db_worker` command.

A task is a row of `django_tasks_database_dbtaskresult` (`DBTaskResult`). The worker's loop
(`db_worker.Worker.run`) takes a READY row with `select_for_update(skip_locked=True)` and claims it
(`DBTaskResult.claim`: status RUNNING, its worker id appended to `worker_ids`), runs it, then saves
SUCCESSFUL or FAILED by primary key (`set_successful`, `set_failed`). Nothing in the backend moves
a RUNNING row back to READY: there is no heartbeat, no lease and no recovery, so `--recover`
changes nothing and the stall settings are not used.
Outcomes: success returns; fail raises (django-tasks has no retry request).
"""

import sys
from urllib.parse import unquote, urlparse

import common


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
        INSTALLED_APPS=["django_tasks", "django_tasks_db"],
        USE_TZ=True,
        TASKS={"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}},
    )
    import django

    django.setup()


def audit_job():
    common.body(common.ARGS, "django_tasks task", None)


def main(args):
    common.ARGS = args
    configure(args)
    if args.cmd == "setup":
        from django.core.management import call_command

        call_command("migrate", "django_tasks_database", verbosity=0)
        common.emit("setup")
    elif args.cmd == "enqueue":
        result = this().audit_job.enqueue()
        common.emit("enqueued", job=str(result.id))
    else:
        from django.core.management import call_command

        common.emit("ready", worker=args.name)
        call_command("db_worker", interval=args.sweep_s, worker_id=args.owner, startup_delay=False)


def this():
    """This file as the module `lib_django_tasks`, whose `audit_job` the worker imports by path."""
    import importlib

    return importlib.import_module("lib_django_tasks")


if __name__ != "__main__":
    # Imported by path (`lib_django_tasks.audit_job`) once Django is set up: the module-level task.
    from django_tasks import task

    audit_job = task()(audit_job)

if __name__ == "__main__":
    main(common.parse(sys.argv[1:]))
