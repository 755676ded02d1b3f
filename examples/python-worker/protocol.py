"""The protocol of the Python example worker: the functions a team replaces with its own protocol code.

Every write has two spellings, chosen by --write-path: a call of a fenced fp_* function (api) or the
spec's own statements on the tables (direct: section 05's lease UPDATEs, section 06's
lock-then-validate-then-CAS, section 09's claim, unknown and result UPDATEs). The lease (acquire, renew,
release, the heartbeat), the protected transition, plan with its intent registered in the same
transaction, advance, the dispatcher and the reconciler over the fake tools' capabilities, and the
control plane's create_run and cancel. It is a mixin of the worker class in worker.py; it uses the
contract kit (fpkit.py) for sessions, barriers, events, metrics and secrets.
"""

import decimal
import hashlib
import http.client
import json
import math
import threading
import urllib.parse
import uuid

import psycopg

from fpkit import Refused, Unknown, mask, unmask

# How many times in all one short transaction is run when the server keeps answering 40001.
RETRY_BUDGET = 5

TERMINAL = ("succeeded", "failed", "cancelled")
CAPABILITY = {"idem": "idempotency_key", "detid": "deterministic_id", "opquery": "operation_query", "plain": "neither"}


# ----------------------------------------------------------------------------------------------
# Canonical JSON (RFC 8785) and the request digest.


def es6_number(v):
    """A float as ECMAScript's Number::toString spells it (RFC 8785 section 3.2.2.3): the shortest
    round-trip digits (Python's repr has the same), placed by the decimal exponent."""
    if not math.isfinite(v):
        raise ValueError("JSON has no %r" % v)
    if v == 0:
        return "0"
    sign, digits, exp = decimal.Decimal(repr(abs(v))).as_tuple()
    ds = "".join(map(str, digits)).rstrip("0") or "0"
    n = len(digits) + exp  # the value is 0.<ds> x 10^n
    k = len(ds)
    if k <= n <= 21:
        out = ds + "0" * (n - k)
    elif 0 < n <= 21:
        out = ds[:n] + "." + ds[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + ds
    else:
        e = n - 1
        out = ds[0] + ("." + ds[1:] if k > 1 else "") + "e" + ("+" if e > 0 else "-") + str(abs(e))
    return ("-" if v < 0 else "") + out


def canonical(v):
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return es6_number(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ",".join(canonical(x) for x in v) + "]"
    keys = sorted(v.keys(), key=lambda k: k.encode("utf-16-be"))
    return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + canonical(v[k]) for k in keys) + "}"


def digest(body):
    return hashlib.sha256(canonical(body).encode("utf-8")).hexdigest()


# ----------------------------------------------------------------------------------------------
# The protocol's half of the worker.


class Protocol:
    def settle_unknown(self, conn, lease):
        """After an unknown outcome: read owner, epoch and revision back before writing again."""
        with self.state_lock:
            if not self.unknown:
                return
        row = conn.execute(
            "SELECT l.owner, l.epoch, l.expires_at > clock_timestamp(), r.revision"
            "  FROM worker_leases l JOIN agent_runs r USING (run_id) WHERE l.run_id = %s", (lease[0],)).fetchone()
        if row is None:
            raise Refused("not_found", "run %s" % lease[0])
        owner, epoch, live, revision = row
        if owner != self.owner or epoch != lease[1] or not live:
            raise Refused("lease_lost", "read back: the lease is no longer ours")
        with self.state_lock:
            self.revision = revision
            self.unknown = False

    def transition(self, name, frm, to, checkpoint, expected, faults=None, require_op=None, intent=None):
        lease, _ = self.held()
        conn = self.connect()
        try:
            self.settle_unknown(conn, lease)
            if expected is None:
                with self.state_lock:
                    expected = self.revision if self.revision is not None else 0
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

    def with_retry(self, conn, attempt):
        """Run one short transaction; a serialization failure (40001) or a deadlock (40P01) means it
        did not commit, so it is run again from its start, at most RETRY_BUDGET times in all."""
        for n in range(1, RETRY_BUDGET + 1):
            try:
                return attempt()
            except psycopg.Error as e:
                if e.sqlstate not in ("40001", "40P01"):
                    raise
                if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    conn.execute("ROLLBACK")
                if n == RETRY_BUDGET:
                    raise Refused("retry_budget_exhausted", "%d attempts, each answered %s" % (n, e.sqlstate))
        raise AssertionError("unreachable")

    def transition_api(self, conn, lease, expected, frm, to, checkpoint, faults, require_op, intent, sent):
        """One call of fp_run_transition: it locks and checks the lease, checks a required result,
        compares and sets the revision and registers the intent. With barriers it runs inside
        BEGIN ... COMMIT so they can hold it."""
        params = (lease[0], self.owner, lease[1], expected, frm, to,
                  None if checkpoint is None else json.dumps(checkpoint), require_op,
                  intent and intent["operation_id"], intent and intent["step_id"],
                  intent and intent["effect_version"], intent and intent["tool"],
                  intent and intent["digest"], intent and json.dumps(intent["request"]))
        sql = ("SELECT outcome, revision, detail FROM fp_run_transition(%s::uuid, %s, %s, %s, %s, %s,"
               " %s::jsonb, %s, %s, %s, %s, %s, %s, %s::jsonb)")
        with_barriers = bool((faults or {}).get("barriers"))
        if with_barriers:
            conn.execute("BEGIN")
            self.barrier(conn, faults, "after_begin")
        sent.append(True)
        outcome, revision, detail = conn.execute(sql, params).fetchone()
        if with_barriers:
            if outcome == "ok":
                self.barrier(conn, faults, "after_lease_validated")
                self.barrier(conn, faults, "before_commit")
            conn.execute("COMMIT")
        return outcome, revision, detail

    def transition_direct(self, conn, lease, expected, frm, to, checkpoint, faults, require_op, intent, sent):
        """The same transaction as statements on the tables (needs table privileges)."""
        conn.execute("BEGIN")
        try:
            self.barrier(conn, faults, "after_begin")
            row = conn.execute("SELECT owner, epoch, expires_at > clock_timestamp() FROM worker_leases"
                               " WHERE run_id = %s FOR UPDATE", (lease[0],)).fetchone()
            if row is None or row[0] != self.owner or row[1] != lease[1] or row[2] is not True:
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
            row = conn.execute("UPDATE agent_runs SET checkpoint = COALESCE(%s::jsonb, checkpoint), status = %s,"
                               " revision = revision + 1, updated_at = clock_timestamp()"
                               " WHERE run_id = %s AND revision = %s AND status = %s RETURNING revision",
                               (None if checkpoint is None else json.dumps(checkpoint), to, lease[0], expected,
                                frm)).fetchone()
            if row is None:
                found = conn.execute("SELECT status, revision FROM agent_runs WHERE run_id = %s",
                                     (lease[0],)).fetchone()
                if found is None:
                    return "run_not_found", None, None
                return ("invalid_state" if found[0] != frm else "conflict"), found[1], found[0]
            revision, detail = row[0], None
            if intent is not None:
                new = conn.execute("INSERT INTO tool_operations (operation_id, run_id, step_id, effect_version,"
                                   " tool_name, request_digest, request_body, status)"
                                   " VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb, 'prepared')"
                                   " ON CONFLICT (operation_id) DO NOTHING",
                                   (intent["operation_id"], lease[0], intent["step_id"], intent["effect_version"],
                                    intent["tool"], intent["digest"], json.dumps(intent["request"]))).rowcount
                detail = "new"
                if new == 0:
                    had = conn.execute("SELECT run_id, tool_name, request_digest FROM tool_operations"
                                       " WHERE operation_id = %s", (intent["operation_id"],)).fetchone()
                    if (str(had[0]), had[1], had[2]) != (str(lease[0]), intent["tool"], intent["digest"]):
                        conn.execute("ROLLBACK")
                        raise Refused("intent_mismatch", "%s is registered with another request"
                                      % intent["operation_id"])
                    detail = "already_registered"
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

    def take_lease(self, conn, c):
        """The takeover: one statement whose condition (free, or expired on the database clock)
        PostgreSQL evaluates again on the committed row. Returns (epoch,), or None when refused.
        The harness may hold it right before its write (fault point before_takeover_write)."""
        self.barrier(conn, c.get("faults"), "before_takeover_write", in_tx=False)
        if self.args.write_path == "direct":
            sql = ("UPDATE worker_leases SET owner = %s, epoch = epoch + 1, updated_at = clock_timestamp(),"
                   " expires_at = clock_timestamp() + (%s::bigint * interval '1 millisecond')"
                   " WHERE run_id = %s::uuid AND (owner IS NULL OR expires_at <= clock_timestamp())"
                   " RETURNING epoch")
            return conn.execute(sql, (self.owner, c["ttl_ms"], c["run_id"])).fetchone()
        return conn.execute("SELECT epoch FROM fp_lease_acquire(%s::uuid, %s, %s)",
                            (c["run_id"], self.owner, c["ttl_ms"])).fetchone()

    def acquire(self, c):
        conn = self.connect()
        try:
            try:
                row = self.take_lease(conn, c)
                if row is None:
                    exists = conn.execute("SELECT 1 FROM worker_leases WHERE run_id = %s::uuid",
                                          (c["run_id"],)).fetchone()
                    outcome = "busy" if exists else "missing"
                    self.metrics.inc("lease_acquire_total", "outcome", outcome)
                    if exists:
                        raise Refused("busy", "the lease is held by another term and has not expired")
                    raise Refused("not_found", "run %s" % c["run_id"])
                revision = conn.execute("SELECT revision FROM agent_runs WHERE run_id = %s::uuid",
                                        (c["run_id"],)).fetchone()[0]
            except psycopg.Error as e:
                self.metrics.inc("lease_acquire_total", "outcome", "db_error")
                raise Refused("db_error", str(e))
            self.metrics.inc("lease_acquire_total", "outcome", "success")
            self.check_durable(conn, "acquire")
        finally:
            conn.close()
        self.stop_heartbeat()
        lease = (c["run_id"], row[0])
        with self.state_lock:
            self.lease, self.ttl_ms, self.revision, self.unknown = lease, c["ttl_ms"], revision, False
        self.cancelled.clear()
        stop = threading.Event()
        self.heartbeat_stop = stop
        threading.Thread(target=self.heartbeat, args=(lease, c["ttl_ms"], c["heartbeat_ms"], c["renew_timeout_ms"], stop),
                         daemon=True).start()

    def renew_once(self, lease, ttl_ms):
        """True: renewed; False: the database refused (lost). Raises on anything else."""
        conn = self.connect()
        try:
            if self.args.write_path == "direct":
                row = conn.execute("UPDATE worker_leases SET updated_at = clock_timestamp(),"
                                   " expires_at = clock_timestamp() + (%s::bigint * interval '1 millisecond')"
                                   " WHERE run_id = %s::uuid AND owner = %s AND epoch = %s"
                                   " AND expires_at > clock_timestamp() RETURNING expires_at",
                                   (ttl_ms, lease[0], self.owner, lease[1])).fetchone()
            else:
                row = conn.execute("SELECT expires_at FROM fp_lease_renew(%s::uuid, %s, %s, %s)",
                                   (lease[0], self.owner, lease[1], ttl_ms)).fetchone()
            self.check_durable(conn, "renew")
            return row is not None
        finally:
            conn.close()

    def heartbeat(self, lease, ttl_ms, every_ms, timeout_ms, stop):
        while not stop.wait(every_ms / 1000.0):
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
            if result.get("renewed") is True:
                self.metrics.inc("lease_renew_total", "outcome", "success")
                continue
            if result.get("renewed") is False:
                self.metrics.inc("lease_renew_total", "outcome", "lost")
                self.emit("heartbeat_lost", None, "lease_lost", "the database refused the renewal")
            else:
                self.metrics.inc("lease_renew_total", "outcome", "unknown")
                why = result.get("error") or "renewal not confirmed within %d ms" % timeout_ms
                self.emit("heartbeat_unconfirmed", None, "outcome_unknown", why)
            self.cancelled.set()
            self.emit("execution_cancelled", None, "ok")
            return

    def stop_heartbeat(self):
        if self.heartbeat_stop is not None:
            self.heartbeat_stop.set()
            self.heartbeat_stop = None

    def renew(self, _c):
        lease, ttl_ms = self.held()
        try:
            renewed = self.renew_once(lease, ttl_ms)
        except psycopg.OperationalError as e:
            self.metrics.inc("lease_renew_total", "outcome", "unknown")
            raise Unknown("renewal: %s" % e)
        self.metrics.inc("lease_renew_total", "outcome", "success" if renewed else "lost")
        if not renewed:
            raise Refused("lease_lost", "the database refused the renewal")

    def release(self, _c):
        lease, _ = self.held()
        self.stop_heartbeat()
        conn = self.connect()
        try:
            if self.args.write_path == "direct":
                n = conn.execute("UPDATE worker_leases SET owner = NULL, expires_at = clock_timestamp(),"
                                 " updated_at = clock_timestamp() WHERE run_id = %s::uuid AND owner = %s"
                                 " AND epoch = %s", (lease[0], self.owner, lease[1])).rowcount
            else:
                n = conn.execute("SELECT fp_lease_release(%s::uuid, %s, %s)",
                                 (lease[0], self.owner, lease[1])).fetchone()[0]
            self.check_durable(conn, "release")
        finally:
            conn.close()
        if n == 0:
            raise Refused("lease_lost", "release refused: not the owner or not the epoch")

    def plan(self, c):
        lease, _ = self.held()
        tenant, step, version, tool = self.args.tenant, c["step_id"], c.get("effect_version", 1), c["tool"]
        for what, v in (("tenant", tenant), ("step_id", step), ("tool", tool)):
            if not v or "/" in v or any(ch.isspace() for ch in v):
                raise Refused("invalid_intent", "%s %r must be non-empty, without '/' or spaces" % (what, v))
        if version <= 0:
            raise Refused("invalid_intent", "effect_version must be > 0")
        operation_id = "%s/%s/%s/v%d" % (tenant, lease[0], step, version)
        found = {}
        request = mask(c["request"], found)
        if found and self.secrets is None:
            raise Refused("invalid_intent", "a request with secret fields needs --secrets-dir")
        for name, value in found.items():
            self.secrets.put(operation_id, name, value)
        intent = {"operation_id": operation_id, "step_id": step, "effect_version": version, "tool": tool,
                  "digest": digest(request), "request": request}
        checkpoint = {"planned": step, "operation_id": operation_id}
        revision, detail = self.transition("plan", "running", "running", checkpoint, c.get("expected_revision"),
                                           c.get("faults"), intent=intent)
        return {"operation_id": operation_id, "registration": detail or "new", "revision": revision,
                "digest_input": canonical(request)}

    def advance(self, c):
        checkpoint = {"done": c["operation_id"]}
        revision, _ = self.transition("advance", "running", "running", checkpoint, c.get("expected_revision"),
                                      require_op=c["operation_id"])
        return {"revision": revision}

    def create(self, tool, operation_id, request, timeout_ms):
        """(status, remote_id, result) for a known outcome, or ("unknown", None, why)."""
        try:
            body = unmask(request, operation_id, self.secrets)
        except LookupError as e:
            return "failed_final", None, {"not_called": str(e)}
        try:
            status, v = self.call_tool("POST", "/tools/%s/create" % tool,
                                       {"operation_id": operation_id, "request": body}, timeout_ms)
        except (OSError, http.client.HTTPException) as e:
            return "unknown", None, "the call failed after it was sent: %s" % e
        if status in (200, 201) or (status == 409 and isinstance(v, dict) and v.get("operation_id") == operation_id):
            return "succeeded", v.get("resource_id", ""), v
        if 400 <= status < 500:
            return "failed_final", None, {"status": status, "answer": v}
        return "unknown", None, "HTTP %d: %s" % (status, v)

    def query(self, op, timeout_ms):
        """(status, remote_id, result), ("absent", None, None) or ("unknown", None, why)."""
        cap = CAPABILITY.get(op["tool_name"])
        quote = lambda s: urllib.parse.quote(s, safe="")  # noqa: E731
        if cap == "deterministic_id":
            name = op["request_body"].get("name") if isinstance(op["request_body"], dict) else None
            if not isinstance(name, str):
                return "unknown", None, "request has no deterministic id"
            path = "/tools/%s/resources/%s" % (op["tool_name"], quote(name))
        elif cap in ("idempotency_key", "operation_query"):
            path = "/tools/%s/operations/%s" % (op["tool_name"], quote(op["operation_id"]))
        else:
            return "unknown", None, "the tool offers no query"
        try:
            status, v = self.call_tool("GET", path, None, timeout_ms)
        except (OSError, http.client.HTTPException) as e:
            return "unknown", None, "query failed: %s" % e
        if status == 200:
            resource = v["resources"][0] if isinstance(v, dict) and v.get("resources") else v
            if isinstance(resource, dict) and resource.get("operation_id") == op["operation_id"]:
                return "succeeded", resource.get("resource_id", ""), resource
            return "failed_final", None, {"taken_by_other_intent": resource}
        if status == 404:
            return "absent", None, None
        return "unknown", None, "query answered HTTP %d: %s" % (status, v)

    # The ledger writes of the dispatcher and the reconciler (spec section 9), each one short
    # autocommitted statement: a call of its fp_* function, or on the direct path the spec's own
    # UPDATE on tool_operations.

    def claim(self, conn, ttl_ms, limit):
        """Claim prepared operations of live runs (9.2): [(operation_id, tool, digest, body, revision)]."""
        if self.args.write_path != "direct":
            return conn.execute("SELECT operation_id, tool_name, request_digest, request_body, revision"
                                " FROM fp_claim(%s, %s, %s)", (self.owner, ttl_ms, limit)).fetchall()
        return conn.execute(
            "WITH candidate AS ("
            "  SELECT o.operation_id FROM tool_operations o JOIN agent_runs r ON r.run_id = o.run_id"
            "  WHERE o.status = 'prepared' AND r.status IN ('pending', 'running')"
            "  ORDER BY o.updated_at FOR UPDATE OF o SKIP LOCKED LIMIT %s)"
            " UPDATE tool_operations o SET status = 'dispatching', dispatch_owner = %s,"
            "  dispatch_until = clock_timestamp() + (%s::bigint * interval '1 millisecond'),"
            "  revision = revision + 1, updated_at = clock_timestamp()"
            " FROM candidate c WHERE o.operation_id = c.operation_id"
            " RETURNING o.operation_id, o.tool_name, o.request_digest, o.request_body, o.revision",
            (limit, self.owner, ttl_ms)).fetchall()

    def record_result(self, conn, op, rev, dig, status, remote_id, result):
        """The verified result of this dispatcher's own claim (9.3); None when the claim moved on."""
        if self.args.write_path != "direct":
            return conn.execute("SELECT revision FROM fp_record_result(%s, %s, %s, %s, %s, %s, %s::jsonb)",
                                (op, self.owner, rev, dig, status, remote_id, json.dumps(result))).fetchone()
        return conn.execute(
            "UPDATE tool_operations SET status = %s, remote_id = %s, result = %s::jsonb,"
            " dispatch_until = NULL, revision = revision + 1, updated_at = clock_timestamp()"
            " WHERE operation_id = %s AND status = 'dispatching' AND dispatch_owner = %s AND revision = %s"
            " AND request_digest = %s RETURNING revision",
            (status, remote_id, json.dumps(result), op, self.owner, rev, dig)).fetchone()

    def mark_unknown_own(self, conn, op, rev, why):
        """This dispatcher's own call has an unknown outcome: keep the evidence (9.2)."""
        if self.args.write_path != "direct":
            return conn.execute("SELECT revision FROM fp_mark_unknown_own(%s, %s, %s, %s)",
                                (op, self.owner, rev, why)).fetchone()
        return conn.execute(
            "UPDATE tool_operations SET status = 'unknown', dispatch_owner = NULL, dispatch_until = NULL,"
            " result = jsonb_build_object('unknown_because', %s::text, 'claimed_by', %s::text),"
            " revision = revision + 1, updated_at = clock_timestamp()"
            " WHERE operation_id = %s AND status = 'dispatching' AND dispatch_owner = %s AND revision = %s"
            " RETURNING revision", (why, self.owner, op, self.owner, rev)).fetchone()

    def mark_expired_unknown(self, conn, op, owner, rev):
        """An expired claim, exactly as it was seen (owner and revision), moves to unknown (9.2)."""
        if self.args.write_path != "direct":
            return conn.execute("SELECT fp_mark_expired_unknown(%s, %s, %s)", (op, owner, rev)).fetchone()[0] > 0
        return conn.execute(
            "UPDATE tool_operations SET status = 'unknown', dispatch_owner = NULL, dispatch_until = NULL,"
            " result = jsonb_build_object('unknown_because', 'claim expired', 'claimed_by', %s::text),"
            " revision = revision + 1, updated_at = clock_timestamp()"
            " WHERE operation_id = %s AND status = 'dispatching' AND dispatch_owner = %s AND revision = %s"
            " AND dispatch_until <= clock_timestamp()", (owner, op, owner, rev)).rowcount > 0

    def converge(self, conn, op, rev, status, remote_id, result):
        """An unknown operation settles on the remote fact, at the revision it was read (9.3)."""
        if self.args.write_path != "direct":
            return conn.execute("SELECT revision FROM fp_converge(%s, %s, %s, %s, %s::jsonb)",
                                (op, rev, status, remote_id, json.dumps(result))).fetchone()
        return conn.execute(
            "UPDATE tool_operations SET status = %s, remote_id = %s, result = %s::jsonb,"
            " revision = revision + 1, updated_at = clock_timestamp()"
            " WHERE operation_id = %s AND status = 'unknown' AND revision = %s RETURNING revision",
            (status, remote_id, json.dumps(result), op, rev)).fetchone()

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
                self.barrier(conn, c.get("faults"), "before_result_write", in_tx=False)
                if status in ("succeeded", "failed_final"):
                    row = self.record_result(conn, op, rev, dig, status, remote_id, result)
                else:
                    why = result if status == "unknown" else "create answered absent"
                    row = self.mark_unknown_own(conn, op, rev, why)
                    status = "unknown"
                    if row is not None:
                        self.metrics.inc("tool_operation_unknown_total", "", "")
                detail = None
                if row is None:
                    status, detail = "write_rejected", "the claim is no longer ours (owner or revision moved)"
                report.append({"operation_id": op, "tool": tool, "outcome": status, "detail": detail})
            return report
        finally:
            conn.close()

    def reconcile(self, c):
        if not self.args.tools_addr:
            raise Refused("invalid_intent", "this worker was started without --tools-addr")
        timeout_ms = c.get("call_timeout_ms", 5000)
        out = {"marked_unknown": [], "converged": [], "raised": []}
        conn = self.connect()
        try:
            expired = conn.execute("SELECT operation_id, dispatch_owner, revision FROM tool_operations"
                                   " WHERE status = 'dispatching' AND dispatch_until <= clock_timestamp()").fetchall()
            for op, owner, rev in expired:
                if self.mark_expired_unknown(conn, op, owner, rev):
                    self.metrics.inc("tool_operation_unknown_total", "", "")
                    out["marked_unknown"].append(op)
            oldest = conn.execute("SELECT extract(epoch FROM clock_timestamp() - min(updated_at))::float8"
                                  " FROM tool_operations WHERE status = 'unknown'").fetchone()[0]
            self.metrics.oldest_unknown = oldest or 0.0
            cur = conn.execute("SELECT operation_id, tool_name, request_body, revision FROM tool_operations"
                               " WHERE status = 'unknown' ORDER BY updated_at")
            unknown = [dict(zip(("operation_id", "tool_name", "request_body", "revision"), r)) for r in cur.fetchall()]
            for op in unknown:
                cap = CAPABILITY.get(op["tool_name"])
                if cap == "idempotency_key":
                    answer = self.create(op["tool_name"], op["operation_id"], op["request_body"], timeout_ms)
                elif cap == "deterministic_id":
                    answer = self.query(op, timeout_ms)
                    if answer[0] == "absent":
                        answer = self.create(op["tool_name"], op["operation_id"], op["request_body"], timeout_ms)
                elif cap == "operation_query":
                    answer = self.query(op, timeout_ms)
                    if answer[0] == "absent":
                        answer = ("unknown", None, "the tool has no record of it; its acceptance records may have gaps")
                elif cap == "neither":
                    answer = ("unknown", None, "the tool offers neither query nor idempotency")
                else:
                    answer = ("unknown", None, "no adapter for tool %s" % op["tool_name"])
                status, remote_id, result = answer
                if status in ("succeeded", "failed_final"):
                    row = self.converge(conn, op["operation_id"], op["revision"], status, remote_id, result)
                    if row is None:
                        out["raised"].append([op["operation_id"], "the ledger moved on; nothing converged"])
                    else:
                        out["converged"].append([op["operation_id"], status])
                else:
                    out["raised"].append([op["operation_id"], result if status == "unknown" else "absent"])
            return out
        finally:
            conn.close()

    def create_run(self, c):
        run_id = str(uuid.uuid4())
        conn = self.connect()
        try:
            with conn.transaction():
                conn.execute("INSERT INTO agent_tasks (task_id) VALUES (%s) ON CONFLICT (task_id) DO NOTHING",
                             (c["task_id"],))
                active = conn.execute("SELECT active_run_id FROM agent_tasks WHERE task_id = %s FOR UPDATE",
                                      (c["task_id"],)).fetchone()[0]
                if active is not None:
                    status = conn.execute("SELECT status FROM agent_runs WHERE run_id = %s", (active,)).fetchone()[0]
                    if status not in TERMINAL:
                        raise Refused("active_run_live", "task %s has a live run %s" % (c["task_id"], active))
                conn.execute("INSERT INTO agent_runs (run_id, task_id, status, checkpoint)"
                             " VALUES (%s, %s, 'pending', '{}'::jsonb)", (run_id, c["task_id"]))
                conn.execute("INSERT INTO worker_leases (run_id) VALUES (%s)", (run_id,))
                conn.execute("UPDATE agent_tasks SET active_run_id = %s, updated_at = clock_timestamp()"
                             " WHERE task_id = %s", (run_id, c["task_id"]))
            self.check_durable(conn, "create_run")
        except psycopg.OperationalError as e:
            raise Unknown("create_run: %s" % e)
        finally:
            conn.close()
        return {"run_id": run_id}

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
                conn.execute("UPDATE tool_operations SET status = 'cancelled', revision = revision + 1,"
                             " updated_at = clock_timestamp() WHERE run_id = %s AND status = 'prepared'",
                             (c["run_id"],))
            self.check_durable(conn, "cancel")
        except psycopg.OperationalError as e:
            raise Unknown("cancel: %s" % e)
        finally:
            conn.close()
        return {"revision": row[0]}
