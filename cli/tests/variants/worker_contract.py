#!/usr/bin/env python3
"""Deviant variants of the Python example worker for cli/tests/worker_contract.rs: each breaks
one thing the worker contract asks (or, for I-renew, lets its own first renewal lapse), the
example's functions overridden by name (variant_kit.py checks that each still exists), chosen by
the name the test starts this file under (`<name>.py`, a link to it)."""

import argparse
import os
import sys
import types
import uuid

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))

import variant_kit as kit  # noqa: E402 (first: it puts the example's folder on the path)
import fpkit  # noqa: E402
import protocol  # noqa: E402
import psycopg  # noqa: E402
from fpkit import Refused, Unknown  # noqa: E402
from variant_kit import Variant  # noqa: E402


class HeldAnswersHeld(Variant):
    """An acquire of a lease another term holds answers `held`, not `busy`."""

    def acquire(self, c):
        try:
            return super().acquire(c)
        except Refused as e:
            if e.outcome == "busy":
                raise Refused("held", e.detail)
            raise


class ScriptShape(Variant):
    """Scripted checkpoints {"i": i, "n": steps} instead of {"step": i, "of": steps}."""

    def run(self, c):
        if self.args.script and c["cmd"] == "save":
            c["checkpoint"] = {"i": c["checkpoint"]["step"], "n": c["checkpoint"]["of"]}
        return super().run(c)


class ScriptExitZero(Variant):
    """A cancelled scripted task exits 0 (after the same script_end event)."""

    def script(self):
        done = super().script()
        if not done:
            self.emit("script_end", None, "stopped", detail="scripted task ended")
            os._exit(0)
        return done


class NoTraceId(Variant):
    """The flags without --trace-id (the worker cannot start with the harness's flags)."""

    @classmethod
    def prepare(cls):
        class Parser(argparse.ArgumentParser):
            dropped = False

            def add_argument(self, *args, **kwargs):
                if "--trace-id" in args:
                    Parser.dropped = True
                    return None
                return super().add_argument(*args, **kwargs)

            def parse_args(self, args=None, namespace=None):
                if not Parser.dropped:
                    raise kit.VariantError("the example's flags have no --trace-id to leave out")
                return super().parse_args(args, namespace)

        kit.patch(fpkit, "argparse", types.SimpleNamespace(ArgumentParser=Parser))


class ListMutantsJunk(Variant):
    """--list-mutants prints a line without a rule and exits 0."""

    @classmethod
    def prepare(cls):
        if "--list-mutants" in sys.argv:
            print("no mutants here")
            sys.exit(0)


class Refusals(Variant):
    """The protected transition's refusals named otherwise: RENAMED maps an outcome to the word
    the variant answers instead (the fp_* path's intent_mismatch only, as there it is the
    database's FP001)."""

    RENAMED = {}

    def transition(self, name, frm, to, checkpoint, expected, faults=None, require_op=None, intent=None):
        try:
            return super().transition(name, frm, to, checkpoint, expected, faults, require_op, intent)
        except Refused as e:
            api = self.args.write_path != "direct"
            if e.outcome in self.RENAMED and (api or e.outcome != "intent_mismatch"):
                raise Refused(self.RENAMED[e.outcome], e.detail)
            raise


class IntentMismatchAsDbError(Refusals):
    RENAMED = {"intent_mismatch": "db_error"}


class NotSettledAsPending(Refusals):
    RENAMED = {"operation_not_settled": "pending"}


class ForeignAsNotFound(Refusals):
    RENAMED = {"foreign_operation": "not_found"}


class Dispatch(Variant):
    """The dispatch report with `write_rejected` said `rejected` (REJECTED), or without each
    entry's tool (NO_TOOL)."""

    REJECTED, NO_TOOL = "write_rejected", False

    def dispatch(self, c):
        report = super().dispatch(c)
        for e in report:
            if e["outcome"] == "write_rejected":
                e["outcome"] = self.REJECTED
            if self.NO_TOOL:
                del e["tool"]
        return report


class WriteRejectedAsRejected(Dispatch):
    REJECTED = "rejected"


class ReportWithoutTool(Dispatch):
    NO_TOOL = True


class PlanDataOp(Variant):
    """plan answers its operation_id as `op`."""

    def plan(self, c):
        data = super().plan(c)
        data["op"] = data.pop("operation_id")
        return data


class SkipsBarrier(Variant):
    """A barrier point answered without waiting on it: POINT (on the fp_* path only: API_ONLY)."""

    POINT, API_ONLY = None, False

    def barrier(self, conn, faults, point, in_tx=True):
        if point == self.POINT and not (self.API_ONLY and self.args.write_path == "direct"):
            return
        super().barrier(conn, faults, point, in_tx)


class SkipsResultBarrier(SkipsBarrier):
    POINT = "before_result_write"


class SkipsCommitBarrier(SkipsBarrier):
    POINT, API_ONLY = "before_commit", True


class ResultBarrierInTransaction(kit.HookedDispatch):
    """The before_result_write barrier held inside the transaction that then writes the result."""

    def before_result(self, conn, c, op):
        conn.execute("BEGIN")
        conn.execute("SELECT 1 FROM tool_operations WHERE operation_id = %s", (op,))
        self.barrier(conn, c.get("faults"), "before_result_write")

    def after_result(self, conn):
        conn.execute("COMMIT")


class CreateRun(Variant):
    """The example's create_run (a copy), without the lease row (LEASE_ROW) or refusing a task
    that exists (ON_CONFLICT)."""

    LEASE_ROW, ON_CONFLICT = True, True

    def create_run(self, c):
        run_id = str(uuid.uuid4())
        conn = self.connect()
        try:
            with conn.transaction():
                conn.execute("INSERT INTO agent_tasks (task_id) VALUES (%s)"
                             + (" ON CONFLICT (task_id) DO NOTHING" if self.ON_CONFLICT else ""), (c["task_id"],))
                active = conn.execute("SELECT active_run_id FROM agent_tasks WHERE task_id = %s FOR UPDATE",
                                      (c["task_id"],)).fetchone()[0]
                if active is not None:
                    status = conn.execute("SELECT status FROM agent_runs WHERE run_id = %s", (active,)).fetchone()[0]
                    if status not in protocol.TERMINAL:
                        raise Refused("active_run_live", "task %s has a live run %s" % (c["task_id"], active))
                conn.execute("INSERT INTO agent_runs (run_id, task_id, status, checkpoint)"
                             " VALUES (%s, %s, 'pending', '{}'::jsonb)", (run_id, c["task_id"]))
                if self.LEASE_ROW:
                    conn.execute("INSERT INTO worker_leases (run_id) VALUES (%s)", (run_id,))
                conn.execute("UPDATE agent_tasks SET active_run_id = %s, updated_at = clock_timestamp()"
                             " WHERE task_id = %s", (run_id, c["task_id"]))
            self.check_durable(conn, "create_run")
        except psycopg.OperationalError as e:
            raise Unknown("create_run: %s" % e)
        finally:
            conn.close()
        return {"run_id": run_id}


class CreateRunNoLeaseRow(CreateRun):
    LEASE_ROW = False


class CreateRunNewTaskOnly(CreateRun):
    ON_CONFLICT = False


class CancelKeepsPrepared(kit.HookedCancel):
    """cancel leaves the run's prepared operations prepared."""

    def cancel_prepared(self, conn, run_id):
        conn.execute("UPDATE tool_operations SET status = 'cancelled', revision = revision + 1,"
                     " updated_at = clock_timestamp() WHERE run_id = %s AND false", (run_id,))


class MetricLabels(Variant):
    """lease_renew_total rendered with the label values success, refused, unknown (no `lost`)."""

    @classmethod
    def prepare(cls):
        class Metrics(fpkit.Metrics):
            def render(self):
                series = [
                    ("lease_acquire_total", "outcome", ["success", "busy", "missing", "db_error"]),
                    ("lease_renew_total", "outcome", ["success", "refused", "unknown"]),
                    ("protected_write_rejected_total", "reason", ["lease", "state", "revision"]),
                ]
                out = []
                with self.lock:
                    for name, label, values in series:
                        out.append("# TYPE %s counter" % name)
                        for v in values:
                            out.append('%s{%s="%s"} %d' % (name, label, v, self.counters.get((name, label, v), 0)))
                    out.append("# TYPE tool_operation_unknown_total counter")
                    out.append("tool_operation_unknown_total %d"
                               % self.counters.get(("tool_operation_unknown_total", "", ""), 0))
                    out.append("# TYPE tool_operation_oldest_unknown_age_seconds gauge")
                    out.append("tool_operation_oldest_unknown_age_seconds %.3f" % self.oldest_unknown)
                return "\n".join(out) + "\n"

        kit.check_overrides(Metrics)
        kit.patch(fpkit, "Metrics", Metrics)


class IgnoresCommitWarning(Variant):
    """A cancelled synchronous-replication wait taken as a commit."""

    def check_durable(self, conn, what):
        return None


class DetIdById(Variant):
    """The detid reconciler looks the resource up by the request's `id`, not its `name`."""

    def query(self, op, timeout_ms):
        body = op["request_body"]
        if protocol.CAPABILITY.get(op["tool_name"]) == "deterministic_id" and isinstance(body, dict):
            body = {k: v for k, v in body.items() if k != "name"}
            if "id" in body:
                body["name"] = body["id"]
            op = dict(op, request_body=body)
        return super().query(op, timeout_ms)


class ReconcileShape(Variant):
    """reconcile's marked_unknown as objects {"op": id}, not ids."""

    def reconcile(self, c):
        out = super().reconcile(c)
        out["marked_unknown"] = [{"op": op} for op in out["marked_unknown"]]
        return out


class NoSecretsDir(Variant):
    """The secret store never creates its folder."""

    @classmethod
    def prepare(cls):
        class Store(fpkit.SecretStore):
            def __init__(self, folder):
                self.folder = folder

        kit.check_overrides(Store)
        kit.patch(fpkit, "SecretStore", Store)


class RevisionAsText(kit.HookedEmit):
    """Events carry their revision as a string (outside the contract's schema)."""

    def amend(self, ev):
        if ev["revision"] is not None:
            ev["revision"] = str(ev["revision"])


class SlowHeartbeat(Variant):
    """Renewals every 100 × heartbeat_ms."""

    def heartbeat(self, lease, ttl_ms, every_ms, timeout_ms, stop):
        return super().heartbeat(lease, ttl_ms, every_ms * 100, timeout_ms, stop)


class TtlUnits(Variant):
    """The fp_* path's renewal sends the TTL in seconds."""

    def renew_once(self, lease, ttl_ms):
        if self.args.write_path != "direct":
            ttl_ms = ttl_ms // 1000
        return super().renew_once(lease, ttl_ms)


class StartAnyRunning(Variant):
    """A start refused (the run is not pending) "starts" a running run again."""

    def run(self, c):
        if c["cmd"] != "start":
            return super().run(c)
        try:
            self.transition("start", "pending", "running", None, c.get("expected_revision"), c.get("faults"))
        except Refused:
            self.transition("start", "running", "running", None, c.get("expected_revision"))
        return None


class FirstWorkerLapses(kit.HookedHeartbeat):
    """The first worker ("worker-a-...", not a retry's "-try") renews at once after its acquire
    and takes that renewal for unconfirmed."""

    NEW = ("first",)

    def first(self):
        return self.owner.startswith("worker-a-") and "-try" not in self.owner

    def pause_s(self, every_ms):
        return 0 if self.first() else super().pause_s(every_ms)

    def confirmed(self, result):
        return super().confirmed(result) and not self.first()


VARIANTS = {
    "held": HeldAnswersHeld,
    "script-shape": ScriptShape,
    "script-exit": ScriptExitZero,
    "trace-id": NoTraceId,
    "list-mutants": ListMutantsJunk,
    "intent-mismatch": IntentMismatchAsDbError,
    "not-settled": NotSettledAsPending,
    "write-rejected": WriteRejectedAsRejected,
    "plan-data": PlanDataOp,
    "result-barrier": SkipsResultBarrier,
    "result-barrier-in-tx": ResultBarrierInTransaction,
    "commit-barrier": SkipsCommitBarrier,
    "create-run-lease": CreateRunNoLeaseRow,
    "create-run-task": CreateRunNewTaskOnly,
    "cancel-prepared": CancelKeepsPrepared,
    "metric-labels": MetricLabels,
    "sync-warning": IgnoresCommitWarning,
    "foreign": ForeignAsNotFound,
    "detid-name": DetIdById,
    "reconcile-shape": ReconcileShape,
    "secrets-dir": NoSecretsDir,
    "bad-event": RevisionAsText,
    "advice": ReportWithoutTool,
    "slow-heartbeat": SlowHeartbeat,
    "ttl-units": TtlUnits,
    "start-status": StartAnyRunning,
    "first-worker-lapses": FirstWorkerLapses,
}

if __name__ == "__main__":
    kit.main(VARIANTS)
