#!/usr/bin/env python3
"""Deviant workers for cli/tests/worker_contract.rs: one per point of `fenceproof conformance`, each
the Python example worker (examples/python-worker, imported from its folder) with named methods
overridden so that it breaks that one point and keeps every other.

A deviant is chosen by the name this file is started under: the test links `<name>.py` to this
file, and `<name>` is a key of VARIANTS. A variant is a class (the overrides) and its settings.
Settings shared by many variants:

  wrong = (cmd, n, was, now): the answer to the n-th `cmd` this process runs, when the example
          answered `was`, says `now` instead (whatever it wrote stays written);
  defer = (cmd, n): the n-th `cmd` answers ok before it writes; its write runs when the next
          command arrives (an answer ahead of its commit).
"""

import hashlib
import json
import math
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples", "python-worker"))
sys.path.insert(0, HERE)

import fpkit  # noqa: E402
import psycopg  # noqa: E402
import protocol  # noqa: E402
import variant_kit  # noqa: E402
from fpkit import Refused  # noqa: E402


class Base(variant_kit.Variant):
    """The example worker with the hooks the variants use; with no settings it is the example.
    Each class of this file overrides the example's functions by name, checked by variant_kit as
    it is defined (a function the example no longer has fails the import, named)."""

    NEW = ("nth",)

    wrong = None
    defer = None
    settings = {}

    def __init__(self, args):
        super().__init__(args)
        self.seen = {}  # cmd -> how many of it this process has run
        self.pending = None  # a deferred write, run before the next command
        self.count_lock = threading.Lock()

    def nth(self, key):
        with self.count_lock:
            self.seen[key] = self.seen.get(key, 0) + 1
            return self.seen[key]

    def handle(self, c):
        pending, self.pending = self.pending, None
        if pending is not None:
            pending()
        c["_n"] = self.nth(c.get("cmd"))
        return super().handle(c)

    def run(self, c):
        if self.defer and (c["cmd"], c.get("_n")) == self.defer:
            self.pending = lambda: super(Base, self).run(c)
            return None
        return super().run(c)

    def emit(self, event, cmd_id, outcome, detail=None, data=None):
        n = self.seen.get(event)
        if self.wrong and cmd_id is not None and (event, n, outcome) == self.wrong[:3]:
            outcome = self.wrong[3]
        return super().emit(event, cmd_id, outcome, detail, data)


def setting(name):
    return Base.settings.get(name)


# --------------------------------------------------------------------------------------------
# flags


class ReadyNotOk(Base):
    def emit(self, event, cmd_id, outcome, detail=None, data=None):
        if event == "ready":
            outcome = "starting"
        return super().emit(event, cmd_id, outcome, detail, data)


class DiesOnRenew(Base):
    """Exits when asked to renew (the preflight sends `metrics` first, which it answers)."""

    def run(self, c):
        if c["cmd"] == "renew":
            os._exit(9)
        return super().run(c)


def list_mutants(how):
    """--list-mutants of a deviant build: lines without a rule, or an answer that never comes."""
    if how == "unformatted":
        print("lost-fence")
        sys.exit(0)
    time.sleep(8)
    sys.exit(1)


# --------------------------------------------------------------------------------------------
# lease


class AnswerNamedOtherwise(Base):
    def emit(self, event, cmd_id, outcome, detail=None, data=None):
        if event == "acquire" and cmd_id is not None:
            event = "acquired"
        return super().emit(event, cmd_id, outcome, detail, data)


class EpochOffByOne(Base, variant_kit.HookedEmit):
    """The answer to an acquire names the epoch + 1 (the worker's own lease keeps the right one)."""

    def amend(self, ev):
        if ev["event"] == "acquire" and ev["outcome"] == "ok" and ev["id"] is not None:
            ev["epoch"] += 1


class LateFirstRenewal(Base):
    """The heartbeat's first renewal comes 3.5 s after the acquire, whatever heartbeat_ms says."""

    def heartbeat(self, lease, ttl_ms, every_ms, timeout_ms, stop):
        if stop.wait(3.5):
            return
        super().heartbeat(lease, ttl_ms, every_ms, timeout_ms, stop)


class HalfTtlRenewal(Base):
    def renew_once(self, lease, ttl_ms):
        return super().renew_once(lease, ttl_ms // 2)


class CheckpointAmended(Base):
    def transition(self, name, frm, to, checkpoint, expected, faults=None, require_op=None, intent=None):
        if name == "save" and checkpoint == setting("checkpoint"):
            checkpoint = dict(checkpoint, saved_by="deviant")
        return super().transition(name, frm, to, checkpoint, expected, faults, require_op, intent)


class OtherApplicationName(Base):
    """Sessions named `<owner>-session` (the kit's connect with another application_name; the owner
    id itself, which the lease statements send, is left alone for the heartbeat's thread)."""

    def connect(self):
        try:
            conn = psycopg.connect(self.args.database_url, application_name=self.owner + "-session", autocommit=True,
                                   connect_timeout=max(1, math.ceil(self.args.acquire_timeout_ms / 1000)))
        except psycopg.Error as e:
            raise Refused("db_error", "connect: %s" % e)
        conn.warnings = []
        conn.add_notice_handler(lambda d: conn.warnings.append(d.message_primary or ""))
        return conn


class RefusalCalledUnconfirmed(Base):
    def emit(self, event, cmd_id, outcome, detail=None, data=None):
        if event == "heartbeat_lost":
            event, outcome = "heartbeat_unconfirmed", "outcome_unknown"
        return super().emit(event, cmd_id, outcome, detail, data)


class NoCancellationEvent(Base):
    def emit(self, event, cmd_id, outcome, detail=None, data=None):
        if event == "execution_cancelled":
            return None
        return super().emit(event, cmd_id, outcome, detail, data)


class UncountedMetric(Base):
    """Metrics that never count setting('series') = (name, label, value)."""

    def __init__(self, args):
        super().__init__(args)
        inc = self.metrics.inc
        skip = tuple(setting("series"))
        self.metrics.inc = lambda *key: None if key == skip else inc(*key)


class ReleaseKeepsLease(Base):
    """Release of a live lease answers ok and frees nothing (a lost one is still refused)."""

    def release(self, c):
        if self.cancelled.is_set():
            return super().release(c)
        self.held()
        self.stop_heartbeat()
        return None


class ExitStatus(Base):
    def handle(self, c):
        done = super().handle(c)
        if c.get("cmd") == "exit":
            os._exit(3)
        return done


# --------------------------------------------------------------------------------------------
# barriers (the fp_* path: BEGIN, after_begin, fp_run_transition, after_lease_validated, before_commit, COMMIT)


def armed(faults, point):
    return any(b.get("point") == point for b in (faults or {}).get("barriers", []))


class SkipsBarrier(Base):
    def barrier(self, conn, faults, point, in_tx=True):
        if point == setting("point"):
            return None
        return super().barrier(conn, faults, point, in_tx)


class LocksLeaseFirst(Base):
    """Renews the lease inside the protected transaction before `after_begin` (the row is locked)."""

    def barrier(self, conn, faults, point, in_tx=True):
        if point == "after_begin" and armed(faults, point):
            lease, ttl_ms = self.held()
            conn.execute("SELECT fp_lease_renew(%s::uuid, %s, %s, %s)", (lease[0], self.owner, lease[1], ttl_ms))
        return super().barrier(conn, faults, point, in_tx)


class HoldsEarly(Base):
    """Holds the barrier armed at setting('point') right after BEGIN instead (for before_commit with
    the lease row locked first by a renewal, so only the run row's update is missing)."""

    def barrier(self, conn, faults, point, in_tx=True):
        late = setting("point")
        if point == "after_begin" and armed(faults, late):
            if setting("lock_lease"):
                lease, ttl_ms = self.held()
                conn.execute("SELECT fp_lease_renew(%s::uuid, %s, %s, %s)", (lease[0], self.owner, lease[1], ttl_ms))
            return super().barrier(conn, faults, late, in_tx)
        if point == late:
            return None
        return super().barrier(conn, faults, point, in_tx)


class RollbackOnCommit:
    """A session whose COMMIT is a ROLLBACK."""

    def __init__(self, conn):
        self.conn = conn

    def execute(self, sql, *args):
        return self.conn.execute("ROLLBACK" if sql == "COMMIT" else sql, *args)

    def __getattr__(self, name):
        return getattr(self.conn, name)


class RollsBackHeldSave(Base):
    """A save armed at setting('point') rolls back after the barrier and answers ok; the next write
    reads the revision back first (the example's path after an unknown outcome)."""

    def transition_api(self, conn, lease, expected, frm, to, checkpoint, faults, require_op, intent, sent):
        if not armed(faults, setting("point")):
            return super().transition_api(conn, lease, expected, frm, to, checkpoint, faults, require_op, intent, sent)
        answer = super().transition_api(RollbackOnCommit(conn), lease, expected, frm, to, checkpoint, faults,
                                        require_op, intent, sent)
        with self.state_lock:
            self.unknown = True
        return answer


# --------------------------------------------------------------------------------------------
# outbox


class EffectVersionTwo(Base):
    def plan(self, c):
        c.setdefault("effect_version", 2)
        return super().plan(c)


class OwnerInOperationId(Base):
    def __init__(self, args):
        super().__init__(args)
        self.args.tenant = self.owner


class StoredBodyAmended(Base):
    """Registers the masked request with an extra field, and the digest of the request as it should be."""

    def transition(self, name, frm, to, checkpoint, expected, faults=None, require_op=None, intent=None):
        if intent is not None and isinstance(intent["request"], dict):
            intent = dict(intent, request=dict(intent["request"], masked_by="deviant"))
        return super().transition(name, frm, to, checkpoint, expected, faults, require_op, intent)


class SortedKeysDigest(Base):
    def transition(self, name, frm, to, checkpoint, expected, faults=None, require_op=None, intent=None):
        if intent is not None:
            text = json.dumps(intent["request"], sort_keys=True, separators=(",", ":"))
            intent = dict(intent, digest=hashlib.sha256(text.encode()).hexdigest())
        return super().transition(name, frm, to, checkpoint, expected, faults, require_op, intent)


class SecretsElsewhere(Base):
    def __init__(self, args):
        super().__init__(args)
        if args.secrets_dir:
            self.secrets = fpkit.SecretStore(args.secrets_dir.rstrip("/") + "-elsewhere")


class ResultWriteInTransaction(Base):
    def barrier(self, conn, faults, point, in_tx=True):
        if point == "before_result_write":
            in_tx = True
        return super().barrier(conn, faults, point, in_tx)


def renamed_refs(body):
    if isinstance(body, dict) and len(body) == 1 and isinstance(body.get("$secret"), str):
        return {"secret_ref": body["$secret"]}
    if isinstance(body, dict):
        return {k: renamed_refs(v) for k, v in body.items()}
    if isinstance(body, list):
        return [renamed_refs(v) for v in body]
    return body


class SecretNotPutBack(Base):
    def create(self, tool, operation_id, request, timeout_ms):
        return super().create(tool, operation_id, renamed_refs(request), timeout_ms)


class RejectionCalledUnknown(Base):
    def dispatch(self, c):
        report = super().dispatch(c)
        for e in report:
            if e["outcome"] == "write_rejected":
                e["outcome"] = "unknown"
        return report


class SettlesWhatItLost(Base):
    """A refused result write is settled anyway: the dispatcher converges the operation it no longer holds."""

    def record_result(self, conn, op, rev, dig, status, remote_id, result):
        row = super().record_result(conn, op, rev, dig, status, remote_id, result)
        if row is None:
            now = conn.execute("SELECT status, revision FROM tool_operations WHERE operation_id = %s", (op,)).fetchone()
            if now and now[0] == "unknown":
                self.converge(conn, op, now[1], status, remote_id, result)
        return row


class DeferredConverge(Base):
    """The n-th convergence (setting('n')) is reported at once and written when the next command comes."""

    def converge(self, conn, op, rev, status, remote_id, result):
        if self.nth("converge") != setting("n"):
            return super().converge(conn, op, rev, status, remote_id, result)

        def later():
            c = self.connect()
            try:
                super(DeferredConverge, self).converge(c, op, rev, status, remote_id, result)
            finally:
                c.close()

        self.pending = later
        return (rev + 1,)


class ReconcileReport(Base):
    """The n-th reconcile's report (setting('n')) altered by setting('how')."""

    def reconcile(self, c):
        out = super().reconcile(c)
        if self.nth("reconcile-report") != setting("n"):
            return out
        how = setting("how")
        if how == "objects":
            out["converged"] = [{"operation_id": o, "status": s} for o, s in out["converged"]]
        elif how == "no-converged":
            out["converged"] = []
        elif how == "no-marked":
            out["marked_unknown"] = []
        elif how == "create-again":
            # Each converged operation created once more remotely, under its operation_id, on another tool.
            for op, _ in out["converged"]:
                self.call_tool("POST", "/tools/plain/create", {"operation_id": op, "request": {"again": True}}, 5000)
        return out


class DispatchEntries(Base):
    def dispatch(self, c):
        report = super().dispatch(c)
        for e in report:
            if setting("how") == "no-tool":
                e.pop("tool", None)
            elif e["outcome"] == "succeeded":
                e["outcome"] = "unknown"
        return report


# --------------------------------------------------------------------------------------------
# control (the control plane runs the direct path's statements as the schema owner)


class CreateRun(Base):
    """create_run with its lease row at epoch setting('epoch'), or written in a second transaction
    (setting('split')), or answering the first run's id for every later one (setting('first_id'))."""

    first = None

    def create_run(self, c):
        if setting("first_id"):
            made = super().create_run(c)
            self.first = self.first or made
            return self.first
        run_id = protocol.uuid.uuid4()
        conn = self.connect()
        try:
            with conn.transaction():
                conn.execute("INSERT INTO agent_tasks (task_id) VALUES (%s) ON CONFLICT (task_id) DO NOTHING",
                             (c["task_id"],))
                active = conn.execute("SELECT active_run_id FROM agent_tasks WHERE task_id = %s FOR UPDATE",
                                      (c["task_id"],)).fetchone()[0]
                if active is not None:
                    status = conn.execute("SELECT status FROM agent_runs WHERE run_id = %s", (active,)).fetchone()[0]
                    if status not in protocol.TERMINAL:
                        raise Refused("active_run_live", "task %s has a live run %s" % (c["task_id"], active))
                conn.execute("INSERT INTO agent_runs (run_id, task_id, status, checkpoint)"
                             " VALUES (%s, %s, 'pending', '{}'::jsonb)", (run_id, c["task_id"]))
                if not setting("split"):
                    conn.execute("INSERT INTO worker_leases (run_id, epoch) VALUES (%s, %s)",
                                 (run_id, setting("epoch") or 0))
                conn.execute("UPDATE agent_tasks SET active_run_id = %s, updated_at = clock_timestamp()"
                             " WHERE task_id = %s", (run_id, c["task_id"]))
            if setting("split"):
                conn.execute("INSERT INTO worker_leases (run_id) VALUES (%s)", (run_id,))
        finally:
            conn.close()
        return {"run_id": str(run_id)}


class Cancel(Base):
    """cancel ending the run as setting('status'), leaving prepared operations (setting('keep_ops')),
    or answering an older revision (setting('revision_off'))."""

    def cancel(self, c):
        if setting("revision_off"):
            out = super().cancel(c)
            return {"revision": out["revision"] - 1}
        conn = self.connect()
        try:
            with conn.transaction():
                row = conn.execute("UPDATE agent_runs SET status = %s, revision = revision + 1,"
                                   " updated_at = clock_timestamp()"
                                   " WHERE run_id = %s AND status IN ('pending', 'running') RETURNING revision",
                                   (setting("status") or "cancelled", c["run_id"])).fetchone()
                if row is None:
                    raise Refused("invalid_state", "run %s has ended" % c["run_id"])
                if not setting("keep_ops"):
                    conn.execute("UPDATE tool_operations SET status = 'cancelled', revision = revision + 1,"
                                 " updated_at = clock_timestamp() WHERE run_id = %s AND status = 'prepared'",
                                 (c["run_id"],))
        finally:
            conn.close()
        return {"revision": row[0]}


# --------------------------------------------------------------------------------------------
# script


class ScriptEnd(Base):
    """Scripted mode ending with exit status setting('exit_done') after a whole task, or
    setting('exit_stopped') after a cancellation."""

    def script(self):
        done = super().script()
        code = setting("exit_done") if done else setting("exit_stopped")
        if code is not None:
            self.emit("script_end", None, "ok" if done else "stopped", detail="scripted task ended")
            os._exit(code)
        return done


class ScriptShapes(Base):
    """Scripted mode whose first checkpoint carries an extra field (setting('first_extra')), that
    does not release at its end (setting('no_release')), or that, paced, never saves (setting('idle'))."""

    def run(self, c):
        if self.args.script and c["cmd"] == "release" and setting("no_release"):
            self.held()
            self.stop_heartbeat()
            return None
        if self.args.script and c["cmd"] == "save" and self.args.pace_ms > 0 and setting("idle"):
            self.cancelled.wait(60)
            raise Refused("lease_lost", "stopped")
        if self.args.script and c["cmd"] == "save" and setting("first_extra") and c["checkpoint"].get("step") == 1:
            c["checkpoint"] = dict(c["checkpoint"], first=True)
        return super().run(c)


# --------------------------------------------------------------------------------------------
# sync_rep


class IgnoresCommitWarning(Base):
    def check_durable(self, conn, what):
        return None


# --------------------------------------------------------------------------------------------
# The variants: name -> (class, settings).

VARIANTS = {
    # flags
    "ready-not-ok": (ReadyNotOk, {}),
    "metrics-refused": (Base, {"wrong": ("metrics", 1, "ok", "bad_command")}),
    "dies-mid-probe": (DiesOnRenew, {}),
    "list-unformatted": (Base, {"list_mutants": "unformatted"}),
    "list-slow": (Base, {"list_mutants": "slow"}),
    # lease
    "acquire-free-busy": (Base, {"wrong": ("acquire", 1, "ok", "busy")}),
    "answer-named-otherwise": (AnswerNamedOtherwise, {}),
    "epoch-off-by-one": (EpochOffByOne, {}),
    "late-first-renewal": (LateFirstRenewal, {}),
    "half-ttl-renewal": (HalfTtlRenewal, {}),
    "held-answers-held": (Base, {"wrong": ("acquire", 1, "busy", "held")}),
    "missing-answers-missing": (Base, {"wrong": ("acquire", 2, "not_found", "missing")}),
    "start-answers-invalid": (Base, {"wrong": ("start", 1, "ok", "invalid_state")}),
    "save-answers-conflict": (Base, {"wrong": ("save", 1, "ok", "conflict")}),
    "checkpoint-amended": (CheckpointAmended, {"checkpoint": {"conformance": 1}}),
    "other-application-name": (OtherApplicationName, {}),
    "stale-save-invalid": (Base, {"wrong": ("save", 2, "conflict", "invalid_state")}),
    "current-save-conflict": (Base, {"wrong": ("save", 3, "ok", "conflict")}),
    "refusal-called-unconfirmed": (RefusalCalledUnconfirmed, {}),
    "no-cancellation-event": (NoCancellationEvent, {}),
    "lost-save-conflict": (Base, {"wrong": ("save", 4, "lease_lost", "conflict")}),
    "lost-renew-unknown": (Base, {"wrong": ("renew", 1, "lease_lost", "outcome_unknown")}),
    "lost-succeed-invalid": (Base, {"wrong": ("succeed", 1, "lease_lost", "invalid_state")}),
    "lost-release-not-found": (Base, {"wrong": ("release", 1, "lease_lost", "not_found")}),
    "uncounted-renew-lost": (UncountedMetric, {"series": ("lease_renew_total", "outcome", "lost")}),
    "uncounted-write-lease": (UncountedMetric, {"series": ("protected_write_rejected_total", "reason", "lease")}),
    "second-acquire-busy": (Base, {"wrong": ("acquire", 3, "ok", "busy")}),
    "pending-save-conflict": (Base, {"wrong": ("save", 1, "invalid_state", "conflict")}),
    "pending-succeed-conflict": (Base, {"wrong": ("succeed", 1, "invalid_state", "conflict")}),
    "running-start-conflict": (Base, {"wrong": ("start", 2, "invalid_state", "conflict")}),
    "succeed-answers-conflict": (Base, {"wrong": ("succeed", 2, "ok", "conflict")}),
    "succeed-answers-early": (Base, {"defer": ("succeed", 2)}),
    "ended-save-conflict": (Base, {"wrong": ("save", 2, "invalid_state", "conflict")}),
    "ended-start-conflict": (Base, {"wrong": ("start", 3, "invalid_state", "conflict")}),
    "uncounted-write-state": (UncountedMetric, {"series": ("protected_write_rejected_total", "reason", "state")}),
    "release-answers-lost": (Base, {"wrong": ("release", 1, "ok", "lease_lost")}),
    "release-keeps-lease": (ReleaseKeepsLease, {}),
    "fail-answers-invalid": (Base, {"wrong": ("fail", 1, "ok", "invalid_state")}),
    # (a fail that moves the run to `cancelled` instead is refused by fp_run_transition)
    "fail-answers-early": (Base, {"defer": ("fail", 1)}),
    "exit-answers-error": (Base, {"wrong": ("exit", 1, "ok", "error")}),
    "exit-status-3": (ExitStatus, {}),
    # barriers
    "skips-after-begin": (SkipsBarrier, {"point": "after_begin"}),
    "skips-after-lease-validated": (SkipsBarrier, {"point": "after_lease_validated"}),
    "skips-before-commit": (SkipsBarrier, {"point": "before_commit"}),
    "locks-lease-before-begin-point": (LocksLeaseFirst, {}),
    "validated-point-early": (HoldsEarly, {"point": "after_lease_validated"}),
    "commit-point-before-update": (HoldsEarly, {"point": "before_commit", "lock_lease": True}),
    "rolls-back-after-begin": (RollsBackHeldSave, {"point": "after_begin"}),
    "rolls-back-after-lease-validated": (RollsBackHeldSave, {"point": "after_lease_validated"}),
    "rolls-back-before-commit": (RollsBackHeldSave, {"point": "before_commit"}),
    # outbox
    "plan-refused": (Base, {"wrong": ("plan", 1, "ok", "db_error")}),
    "effect-version-two": (EffectVersionTwo, {}),
    "owner-in-operation-id": (OwnerInOperationId, {}),
    "stored-body-amended": (StoredBodyAmended, {}),
    "sorted-keys-digest": (SortedKeysDigest, {}),
    "secrets-elsewhere": (SecretsElsewhere, {}),
    "replan-conflict": (Base, {"wrong": ("plan", 2, "intent_mismatch", "conflict")}),
    "result-write-in-transaction": (ResultWriteInTransaction, {}),
    "secret-not-put-back": (SecretNotPutBack, {}),
    "rejection-called-unknown": (RejectionCalledUnknown, {}),
    "settles-what-it-lost": (SettlesWhatItLost, {}),
    "converges-after-answer": (DeferredConverge, {"n": 1}),
    "converged-as-objects": (ReconcileReport, {"n": 1, "how": "objects"}),
    "creates-again": (ReconcileReport, {"n": 1, "how": "create-again"}),
    "advance-own-unsettled": (Base, {"wrong": ("advance", 1, "ok", "operation_not_settled")}),
    "advance-foreign-not-found": (Base, {"wrong": ("advance", 2, "foreign_operation", "operation_not_found")}),
    "advance-unsettled-foreign": (Base, {"wrong": ("advance", 1, "operation_not_settled", "foreign_operation")}),
    "dispatch-success-unknown": (DispatchEntries, {"how": "succeeded-unknown"}),
    "dispatch-no-tool": (DispatchEntries, {"how": "no-tool"}),
    "marked-unreported": (ReconcileReport, {"n": 2, "how": "no-marked"}),
    "detid-converges-after-answer": (DeferredConverge, {"n": 2}),
    "detid-converged-unreported": (ReconcileReport, {"n": 2, "how": "no-converged"}),
    "detid-created-again": (ReconcileReport, {"n": 2, "how": "create-again"}),
    # control
    "create-run-refused": (Base, {"wrong": ("create_run", 1, "ok", "db_error")}),
    "lease-row-epoch-one": (CreateRun, {"epoch": 1}),
    "lease-row-second-transaction": (CreateRun, {"split": True}),
    "live-answers-invalid": (Base, {"wrong": ("create_run", 2, "active_run_live", "invalid_state")}),
    "cancel-refused": (Base, {"wrong": ("cancel", 1, "ok", "db_error")}),
    "cancel-fails-run": (Cancel, {"status": "failed"}),
    "cancel-older-revision": (Cancel, {"revision_off": True}),
    "cancel-keeps-operations": (Cancel, {"keep_ops": True}),
    "ended-cancel-not-found": (Base, {"wrong": ("cancel", 2, "invalid_state", "not_found")}),
    "create-run-first-id": (CreateRun, {"first_id": True}),
    # script
    "script-done-exit-3": (ScriptEnd, {"exit_done": 3}),
    "script-first-extra": (ScriptShapes, {"first_extra": True}),
    "script-no-release": (ScriptShapes, {"no_release": True}),
    "script-stopped-exit-0": (ScriptEnd, {"exit_stopped": 0}),
    "script-idle": (ScriptShapes, {"idle": True}),
    # sync_rep
    "ignores-commit-warning": (IgnoresCommitWarning, {}),
}


def main():
    name = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    cls, settings = VARIANTS[name]
    if "--list-mutants" in sys.argv and "list_mutants" in settings:
        list_mutants(settings["list_mutants"])
    Base.settings = settings
    Base.wrong = settings.get("wrong")
    Base.defer = settings.get("defer")
    fpkit.main(cls)


if __name__ == "__main__":
    main()
