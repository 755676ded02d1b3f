"""The kit of the Python variants of the example worker (examples/python-worker) that the tests
under cli/tests run: a variant is a subclass of the example's worker class that overrides some of
its functions by name, never a copy of the example with text replaced.

What it keeps loud: a variant class that defines a function the example does not have (a renamed
or removed function of the example), or defines it with other parameters (more, fewer, or
optional where the example's are not), fails when its module is imported, naming the class and
the function; so does `patch` of a module name the example no longer has. A variant does not
silently stop applying because a name of the example changed (cli/tests/variant_files.rs loads
every module and applies every variant's patches).

A variant module maps names to classes (VARIANTS) and ends with `variant_kit.main(VARIANTS)`: the
test links `<name>.py` to the module and starts that link, and the variant is chosen by the name
it was started under (`variant_worker` in harness/src/testkit.rs).

Where a change needs the middle of a long function, the function is copied here once, with the
parts the variants change as methods of their own (hooks, listed in the class's NEW): the copies
below are the example's code as it was when they were taken, and nothing else. When the example's
function changes inside, its copy keeps running the code it was taken from (still a variant of
the example); when its name or parameters change, the copy fails as above.
"""

import inspect
import json
import os
import sys
import threading
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples", "python-worker"))

import fpkit  # noqa: E402
import protocol  # noqa: E402
import psycopg  # noqa: E402
from fpkit import Refused, Unknown  # noqa: E402


class VariantError(Exception):
    """A variant no longer fits the example: it names the class and the function."""


def _signature(f):
    return inspect.signature(f.__func__ if isinstance(f, (classmethod, staticmethod)) else f)


def _shape(sig):
    """What a call of a function relies on: how many parameters, of which kinds, which optional
    (not their names: an override may call one `_c` that the example calls `c`)."""
    return [(p.kind, p.default is inspect.Parameter.empty) for p in sig.parameters.values()]


def check_overrides(cls, new=()):
    """Every function `cls` defines overrides one of its bases (the example's, or a hook of this
    kit) with the same parameters, but the names in `new` (the variant's own helpers)."""
    for name, value in vars(cls).items():
        if name in new or name.startswith("__") and name != "__init__":
            continue
        if not (inspect.isfunction(value) or isinstance(value, (classmethod, staticmethod))):
            continue
        base = next((b for b in cls.__mro__[1:] if name in vars(b)), None)
        if base is None or base is object:
            raise VariantError("%s.%s overrides nothing: the example has no function %s (renamed or removed?)"
                               % (cls.__qualname__, name, name))
        theirs, ours = _signature(vars(base)[name]), _signature(value)
        if _shape(theirs) != _shape(ours):
            raise VariantError("%s.%s%s does not match %s.%s%s of the example"
                               % (cls.__qualname__, name, ours, base.__qualname__, name, theirs))


def patch(owner, name, value):
    """Replace `owner.name` (a module's function or constant, or a class's method) for this
    process; the example must have it."""
    if not hasattr(owner, name):
        raise VariantError("the example's %s has no %s (renamed or removed?)" % (owner.__name__, name))
    old = getattr(owner, name)
    if inspect.isfunction(old) and inspect.isfunction(value) and \
            _shape(inspect.signature(old)) != _shape(inspect.signature(value)):
        raise VariantError("%s.%s%s does not match the example's %s.%s%s"
                           % (value.__module__, value.__name__, inspect.signature(value),
                              owner.__name__, name, inspect.signature(old)))
    setattr(owner, name, value)


class Variant(fpkit.ContractKit, protocol.Protocol):
    """The example's worker class (worker.py's Worker: the contract kit with the protocol). Its
    subclasses are checked by `check_overrides` as they are defined; NEW names their own helpers."""

    NEW = ()

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        check_overrides(cls, set(vars(cls).get("NEW", ())) | {"prepare"})

    @classmethod
    def prepare(cls):
        """Before the flags are parsed: module patches of the chosen variant (none here)."""


def main(variants):
    """Run the variant named by the file this process was started as (`<name>.py`)."""
    name = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    if name not in variants:
        sys.exit("variant_kit: no variant %r here; the variants are %s" % (name, ", ".join(sorted(variants))))
    cls = variants[name]
    cls.prepare()
    fpkit.main(cls)


# ----------------------------------------------------------------------------------------------
# Copies of the example's longer functions, with hooks where the variants change them. Each
# copy's default hooks give the example's own behaviour.


class HookedEmit(Variant):
    """fpkit.ContractKit.emit, with the event (before it is written) as a hook: a variant changes
    what one event says without touching the worker's state other threads read."""

    NEW = ("amend",)

    def amend(self, ev):
        pass

    def emit(self, event, cmd_id, outcome, detail=None, data=None):
        with self.state_lock:
            lease, revision = self.lease, self.revision
        ev = {
            "time": datetime.now(timezone.utc).isoformat(),
            "owner": self.owner,
            "run_id": lease[0] if lease else None,
            "epoch": lease[1] if lease else None,
            "revision": revision,
            "event": event,
            "id": cmd_id,
            "outcome": outcome,
        }
        if detail is not None:
            ev["detail"] = detail
        if data is not None:
            ev["data"] = data
        self.amend(ev)
        line = json.dumps(ev) + "\n"
        with self.out_lock:
            self.events.write(line)
            sys.stdout.write(line)
            sys.stdout.flush()


class HookedTransition(Variant):
    """protocol.Protocol.transition, with the expected revision and the moment before the write
    as hooks."""

    NEW = ("expected_revision", "before_write")

    def expected_revision(self, conn, lease, expected):
        if expected is None:
            with self.state_lock:
                expected = self.revision if self.revision is not None else 0
        return expected

    def before_write(self, conn, lease, name):
        pass

    def transition(self, name, frm, to, checkpoint, expected, faults=None, require_op=None, intent=None):
        lease, _ = self.held()
        conn = self.connect()
        try:
            self.settle_unknown(conn, lease)
            self.before_write(conn, lease, name)
            expected = self.expected_revision(conn, lease, expected)
            step = self.transition_direct if self.args.write_path == "direct" else self.transition_api
            sent = []
            try:
                outcome, revision, detail = self.with_retry(
                    conn, lambda: step(conn, lease, expected, frm, to, checkpoint, faults, require_op, intent, sent))
            except psycopg.Error as e:
                if e.sqlstate == "FP001":
                    raise Refused("intent_mismatch", str(e))
                if isinstance(e, psycopg.OperationalError) and sent:
                    with self.state_lock:
                        self.unknown = True
                    raise Unknown("%s: the connection was lost before the answer came: %s" % (name, e))
                raise Refused("db_error", str(e))
            if outcome == "ok":
                self.check_durable(conn, name)
                with self.state_lock:
                    self.revision = max(self.revision or 0, revision)
                return revision, detail
            reason = {"lease_lost": "lease", "invalid_state": "state", "conflict": "revision"}.get(outcome)
            if reason:
                self.metrics.inc("protected_write_rejected_total", "reason", reason)
            if outcome == "run_not_found":
                raise Refused("not_found", "run %s" % lease[0])
            raise Refused(outcome, "%s refused: %s%s" % (name, outcome, " (%s)" % detail if detail else ""))
        finally:
            conn.close()


class HookedDirectTransition(Variant):
    """protocol.Protocol.transition_direct, with the lease row's lock, the fence, the run's CAS
    and the intent's registration as hooks (and INTENT_FIRST: the registration before the CAS)."""

    NEW = ("lock_lease", "fenced", "cas_run", "register_intent", "INTENT_FIRST")
    INTENT_FIRST = False

    def lock_lease(self, conn, lease):
        return conn.execute("SELECT owner, epoch, expires_at > clock_timestamp() FROM worker_leases"
                            " WHERE run_id = %s FOR UPDATE", (lease[0],)).fetchone()

    def fenced(self, row, lease):
        return not (row is None or row[0] != self.owner or row[1] != lease[1] or row[2] is not True)

    def cas_run(self, conn, lease, expected, frm, to, checkpoint):
        return conn.execute("UPDATE agent_runs SET checkpoint = COALESCE(%s::jsonb, checkpoint), status = %s,"
                            " revision = revision + 1, updated_at = clock_timestamp()"
                            " WHERE run_id = %s AND revision = %s AND status = %s RETURNING revision",
                            (None if checkpoint is None else json.dumps(checkpoint), to, lease[0], expected,
                             frm)).fetchone()

    def register_intent(self, conn, lease, intent):
        """None without an intent, else "new" or "already_registered" (or intent_mismatch)."""
        if intent is None:
            return None
        new = conn.execute("INSERT INTO tool_operations (operation_id, run_id, step_id, effect_version,"
                           " tool_name, request_digest, request_body, status)"
                           " VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb, 'prepared')"
                           " ON CONFLICT (operation_id) DO NOTHING",
                           (intent["operation_id"], lease[0], intent["step_id"], intent["effect_version"],
                            intent["tool"], intent["digest"], json.dumps(intent["request"]))).rowcount
        if new == 0:
            had = conn.execute("SELECT run_id, tool_name, request_digest FROM tool_operations"
                               " WHERE operation_id = %s", (intent["operation_id"],)).fetchone()
            if (str(had[0]), had[1], had[2]) != (str(lease[0]), intent["tool"], intent["digest"]):
                conn.execute("ROLLBACK")
                raise Refused("intent_mismatch", "%s is registered with another request" % intent["operation_id"])
            return "already_registered"
        return "new"

    def transition_direct(self, conn, lease, expected, frm, to, checkpoint, faults, require_op, intent, sent):
        conn.execute("BEGIN")
        try:
            self.barrier(conn, faults, "after_begin")
            if not self.fenced(self.lock_lease(conn, lease), lease):
                return "lease_lost", None, None
            self.barrier(conn, faults, "after_lease_validated")
            if require_op is not None:
                op = conn.execute("SELECT run_id, status FROM tool_operations WHERE operation_id = %s FOR SHARE",
                                  (require_op,)).fetchone()
                if op is None:
                    return "operation_not_found", None, None
                if str(op[0]) != str(lease[0]):
                    return "foreign_operation", None, str(op[0])
                if op[1] != "succeeded":
                    return "operation_not_settled", None, op[1]
            detail = self.register_intent(conn, lease, intent) if self.INTENT_FIRST else None
            row = self.cas_run(conn, lease, expected, frm, to, checkpoint)
            if row is None:
                found = conn.execute("SELECT status, revision FROM agent_runs WHERE run_id = %s",
                                     (lease[0],)).fetchone()
                if found is None:
                    return "run_not_found", None, None
                return ("invalid_state" if found[0] != frm else "conflict"), found[1], found[0]
            revision = row[0]
            if not self.INTENT_FIRST:
                detail = self.register_intent(conn, lease, intent)
            self.barrier(conn, faults, "before_commit")
            sent.append(True)
            conn.execute("COMMIT")
            return "ok", revision, detail
        finally:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE and not conn.closed:
                try:
                    conn.execute("ROLLBACK")
                except psycopg.Error:
                    pass


class HookedPlan(Variant):
    """protocol.Protocol.plan, with the operation_id and the registration (the secrets stored,
    then the protected transition with the intent) as hooks."""

    NEW = ("operation_id", "register")

    def operation_id(self, tenant, lease, step, version):
        return "%s/%s/%s/v%d" % (tenant, lease[0], step, version)

    def register(self, c, checkpoint, intent, store_secrets):
        """Store the secrets, then the transition that registers the intent: (revision, detail)."""
        store_secrets()
        return self.transition("plan", "running", "running", checkpoint, c.get("expected_revision"),
                               c.get("faults"), intent=intent)

    def plan(self, c):
        lease, _ = self.held()
        tenant, step, version, tool = self.args.tenant, c["step_id"], c.get("effect_version", 1), c["tool"]
        for what, v in (("tenant", tenant), ("step_id", step), ("tool", tool)):
            if not v or "/" in v or any(ch.isspace() for ch in v):
                raise Refused("invalid_intent", "%s %r must be non-empty, without '/' or spaces" % (what, v))
        if version <= 0:
            raise Refused("invalid_intent", "effect_version must be > 0")
        operation_id = self.operation_id(tenant, lease, step, version)
        found = {}
        request = protocol.mask(c["request"], found)
        if found and self.secrets is None:
            raise Refused("invalid_intent", "a request with secret fields needs --secrets-dir")

        def store_secrets():
            for name, value in found.items():
                self.secrets.put(operation_id, name, value)

        intent = {"operation_id": operation_id, "step_id": step, "effect_version": version, "tool": tool,
                  "digest": protocol.digest(request), "request": request}
        checkpoint = {"planned": step, "operation_id": operation_id}
        revision, detail = self.register(c, checkpoint, intent, store_secrets)
        return {"operation_id": operation_id, "registration": detail or "new", "revision": revision,
                "digest_input": protocol.canonical(request)}


class HookedHeartbeat(Variant):
    """protocol.Protocol.heartbeat, with the pause between renewals, what counts as renewed and
    whether a refused renewal stops the execution as hooks."""

    NEW = ("pause_s", "confirmed", "stops_on_loss")

    def pause_s(self, every_ms):
        return every_ms / 1000.0

    def confirmed(self, result):
        return result.get("renewed") is True

    def stops_on_loss(self):
        return True

    def heartbeat(self, lease, ttl_ms, every_ms, timeout_ms, stop):
        while not stop.wait(self.pause_s(every_ms)):
            result = {}

            def attempt():
                try:
                    result["renewed"] = self.renew_once(lease, ttl_ms)
                except Exception as e:  # noqa: BLE001 - any failure leaves the renewal unconfirmed
                    result["error"] = str(e)

            t = threading.Thread(target=attempt, daemon=True)
            t.start()
            t.join(timeout_ms / 1000.0)
            if stop.is_set():
                return
            if self.confirmed(result):
                self.metrics.inc("lease_renew_total", "outcome", "success")
                continue
            if result.get("renewed") is False:
                self.metrics.inc("lease_renew_total", "outcome", "lost")
                self.emit("heartbeat_lost", None, "lease_lost", "the database refused the renewal")
                if not self.stops_on_loss():
                    return
            else:
                self.metrics.inc("lease_renew_total", "outcome", "unknown")
                why = result.get("error") or "renewal not confirmed within %d ms" % timeout_ms
                self.emit("heartbeat_unconfirmed", None, "outcome_unknown", why)
            self.cancelled.set()
            self.emit("execution_cancelled", None, "ok")
            return


class HookedRelease(Variant):
    """protocol.Protocol.release, with the release's write as a hook (and REFUSES_LOST: a release
    that released nothing is refused as lease_lost)."""

    NEW = ("release_lease", "REFUSES_LOST")
    REFUSES_LOST = True

    def release_lease(self, conn, lease):
        """How many lease rows the release freed."""
        if self.args.write_path == "direct":
            return conn.execute("UPDATE worker_leases SET owner = NULL, expires_at = clock_timestamp(),"
                                " updated_at = clock_timestamp() WHERE run_id = %s::uuid AND owner = %s"
                                " AND epoch = %s", (lease[0], self.owner, lease[1])).rowcount
        return conn.execute("SELECT fp_lease_release(%s::uuid, %s, %s)",
                            (lease[0], self.owner, lease[1])).fetchone()[0]

    def release(self, _c):
        lease, _ = self.held()
        self.stop_heartbeat()
        conn = self.connect()
        try:
            n = self.release_lease(conn, lease)
            self.check_durable(conn, "release")
        finally:
            conn.close()
        if n == 0 and self.REFUSES_LOST:
            raise Refused("lease_lost", "release refused: not the owner or not the epoch")


class HookedDispatch(Variant):
    """protocol.Protocol.dispatch, with the moments right before and right after the result's
    write as hooks (the example holds the before_result_write barrier outside any transaction)."""

    NEW = ("before_result", "after_result")

    def before_result(self, conn, c, op):
        self.barrier(conn, c.get("faults"), "before_result_write", in_tx=False)

    def after_result(self, conn):
        pass

    def dispatch(self, c):
        if not self.args.tools_addr:
            raise Refused("invalid_intent", "this worker was started without --tools-addr")
        timeout_ms = c.get("call_timeout_ms", 5000)
        conn = self.connect()
        try:
            claims = self.claim(conn, c.get("claim_ttl_ms", 5000), c.get("limit", 1))
            report = []
            for op, tool, dig, body, rev in claims:
                status, remote_id, result = self.create(tool, op, body, timeout_ms)
                self.before_result(conn, c, op)
                if status in ("succeeded", "failed_final"):
                    row = self.record_result(conn, op, rev, dig, status, remote_id, result)
                else:
                    why = result if status == "unknown" else "create answered absent"
                    row = self.mark_unknown_own(conn, op, rev, why)
                    status = "unknown"
                    if row is not None:
                        self.metrics.inc("tool_operation_unknown_total", "", "")
                self.after_result(conn)
                detail = None
                if row is None:
                    status, detail = "write_rejected", "the claim is no longer ours (owner or revision moved)"
                report.append({"operation_id": op, "tool": tool, "outcome": status, "detail": detail})
            return report
        finally:
            conn.close()


class HookedCancel(Variant):
    """protocol.Protocol.cancel, with the cancel of the run's prepared operations as a hook, and
    IN_ONE_TRANSACTION (False: that cancel runs after the run's transaction commits)."""

    NEW = ("cancel_prepared", "IN_ONE_TRANSACTION")
    IN_ONE_TRANSACTION = True

    def cancel_prepared(self, conn, run_id):
        conn.execute("UPDATE tool_operations SET status = 'cancelled', revision = revision + 1,"
                     " updated_at = clock_timestamp() WHERE run_id = %s AND status = 'prepared'", (run_id,))

    def cancel(self, c):
        conn = self.connect()
        try:
            with conn.transaction():
                row = conn.execute("UPDATE agent_runs SET status = 'cancelled', revision = revision + 1,"
                                   " updated_at = clock_timestamp()"
                                   " WHERE run_id = %s AND status IN ('pending', 'running') RETURNING revision",
                                   (c["run_id"],)).fetchone()
                if row is None:
                    found = conn.execute("SELECT status FROM agent_runs WHERE run_id = %s", (c["run_id"],)).fetchone()
                    if found is None:
                        raise Refused("not_found", "run %s" % c["run_id"])
                    raise Refused("invalid_state", "run %s is %s" % (c["run_id"], found[0]))
                if self.IN_ONE_TRANSACTION:
                    self.cancel_prepared(conn, c["run_id"])
            if not self.IN_ONE_TRANSACTION:
                self.cancel_prepared(conn, c["run_id"])
            self.check_durable(conn, "cancel")
        except psycopg.OperationalError as e:
            raise Unknown("cancel: %s" % e)
        finally:
            conn.close()
        return {"revision": row[0]}
