#!/usr/bin/env python3
"""Legal variants of the Python example worker for the precision set (cli/tests/precision_set.rs):
each changes the example in a way the spec allows and must pass every row. The example's functions
are overridden by name (variant_kit.py checks that each still exists); a variant is chosen by the
name the test starts this file under (`<name>.py`, a link to it). (lock_first_renewal.py, beside
this file, is one more, a module of its own.)"""

import hashlib
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))

import variant_kit as kit  # noqa: E402 (first: it puts the example's folder on the path)
import protocol  # noqa: E402
import psycopg  # noqa: E402
from variant_kit import Variant  # noqa: E402


class SlowStart(Variant):
    """`ready` 3 s after the start (an interpreter loading, a JVM warming up)."""

    def __init__(self, args):
        super().__init__(args)
        time.sleep(3)


class SaveStall(kit.HookedTransition):
    """2 s between settling the previous write and a save's protected transaction, on leases of
    5 s or more (the heartbeat keeps them live meanwhile)."""

    def before_write(self, conn, lease, name):
        if name == "save" and (getattr(self, "ttl_ms", 0) or 0) >= 5000:
            time.sleep(2)


class ExplicitTransaction(Variant):
    """Every fp_* write inside its own BEGIN ... COMMIT, barriers armed or not (a copy of the
    example's transition_api with its transaction always on)."""

    def transition_api(self, conn, lease, expected, frm, to, checkpoint, faults, require_op, intent, sent):
        params = (lease[0], self.owner, lease[1], expected, frm, to,
                  None if checkpoint is None else json.dumps(checkpoint), require_op,
                  intent and intent["operation_id"], intent and intent["step_id"],
                  intent and intent["effect_version"], intent and intent["tool"],
                  intent and intent["digest"], intent and json.dumps(intent["request"]))
        sql = ("SELECT outcome, revision, detail FROM fp_run_transition(%s::uuid, %s, %s, %s, %s, %s,"
               " %s::jsonb, %s, %s, %s, %s, %s, %s, %s::jsonb)")
        conn.execute("BEGIN")
        self.barrier(conn, faults, "after_begin")
        sent.append(True)
        outcome, revision, detail = conn.execute(sql, params).fetchone()
        if outcome == "ok":
            self.barrier(conn, faults, "after_lease_validated")
            self.barrier(conn, faults, "before_commit")
        conn.execute("COMMIT")
        return outcome, revision, detail


class MoreRetries(Variant):
    """A budget of 20 attempts for a write answered 40001 instead of 5."""

    @classmethod
    def prepare(cls):
        kit.patch(protocol, "RETRY_BUDGET", 20)


class OperationIdFormat(kit.HookedPlan):
    """operation_id `op-` and 40 hex digits of a SHA-256 of tenant, run, step and version."""

    def operation_id(self, tenant, lease, step, version):
        key = "%s|%s|%s|%d" % (tenant, lease[0], step, version)
        return "op-" + hashlib.sha256(key.encode()).hexdigest()[:40]


class StatementOrder(kit.HookedDirectTransition):
    """The direct path registers the intent before the run's CAS UPDATE, in the same transaction."""

    INTENT_FIRST = True


class ConnectionPool(Variant):
    """Connections kept and reused, at most 4 idle: one no longer usable (a restarted or promoted
    server) is found by a ping on reuse and replaced."""

    NEW = ("fresh_connection",)

    def connect(self):
        idle = self.__dict__.setdefault("_idle", [])
        guard = self.__dict__.setdefault("_idle_lock", threading.Lock())
        while True:
            with guard:
                conn = idle.pop() if idle else None
            if conn is None:
                break
            try:
                conn.execute("SELECT 1")
            except psycopg.Error:
                type(conn).close(conn)
                continue
            conn.warnings = []
            return conn
        conn = self.fresh_connection()

        def back(conn=conn):
            idle_now = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            with guard:
                keep = not conn.closed and not conn.broken and idle_now and len(idle) < 4 and conn not in idle
                if keep:
                    idle.append(conn)
            if not keep:
                type(conn).close(conn)
        conn.close = back
        return conn

    def fresh_connection(self):
        """The example's own connect."""
        return super().connect()


VARIANTS = {
    "slow-start": SlowStart,
    "save-stall": SaveStall,
    "explicit-transaction": ExplicitTransaction,
    "more-retries": MoreRetries,
    "operation-id-format": OperationIdFormat,
    "statement-order": StatementOrder,
    "connection-pool": ConnectionPool,
}

if __name__ == "__main__":
    kit.main(VARIANTS)
