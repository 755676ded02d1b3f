"""The contract kit of the Python example worker: everything docs/worker-protocol.md asks of any worker
and nothing of the protocol. A team keeps this module as it is.

It holds the flags, the command loop (one thread per command, each answered by exactly one event),
the events on stdout and in --events, the outcome errors, the database session settings
(application_name = --owner, notices), the fault points (barriers), the metrics text, the secret
store and the client of the harness's fake tools. The protocol (protocol.py) plugs in as a mixin:
ContractKit.run calls its acquire, transition, plan, advance, dispatch, reconcile, create_run, cancel,
renew and release.
"""

import argparse
import hashlib
import http.client
import json
import math
import os
import sys
import threading
from datetime import datetime, timezone

import psycopg

# ----------------------------------------------------------------------------------------------
# Errors: each carries the outcome string the contract names.


class Refused(Exception):
    """A command that ends with a definite outcome other than ok."""

    def __init__(self, outcome, detail=""):
        super().__init__(detail or outcome)
        self.outcome = outcome
        self.detail = detail or outcome


class Unknown(Refused):
    """The write may or may not have committed: the answer was lost."""

    def __init__(self, detail):
        super().__init__("outcome_unknown", detail)


# ----------------------------------------------------------------------------------------------
# Secrets: {"$secret": {"name": N, "value": V}} is stored under the operation_id and replaced by
# {"$secret": N}; a dispatcher puts V back right before the call.


def mask(body, found):
    if isinstance(body, dict) and "$secret" in body:
        inner = body["$secret"]
        if len(body) != 1 or not isinstance(inner, dict) or set(inner) != {"name", "value"} \
                or not isinstance(inner["name"], str) or not isinstance(inner["value"], str):
            raise Refused("invalid_intent", "a $secret field must be {\"name\": str, \"value\": str}")
        if inner["name"] in found:
            raise Refused("invalid_intent", "secret %s is named twice" % inner["name"])
        found[inner["name"]] = inner["value"]
        return {"$secret": inner["name"]}
    if isinstance(body, dict):
        return {k: mask(v, found) for k, v in body.items()}
    if isinstance(body, list):
        return [mask(v, found) for v in body]
    return body


class SecretStore:
    def __init__(self, folder):
        self.folder = folder
        os.makedirs(folder, exist_ok=True)

    def path(self, operation_id, name):
        return os.path.join(self.folder, "py-" + hashlib.sha256(("%s\n%s" % (operation_id, name)).encode()).hexdigest())

    def put(self, operation_id, name, value):
        p = self.path(operation_id, name)
        fd = os.open(p + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(value)
            f.flush()
            os.fsync(f.fileno())
        os.rename(p + ".tmp", p)

    def get(self, operation_id, name):
        try:
            with open(self.path(operation_id, name)) as f:
                return f.read()
        except FileNotFoundError:
            return None


def unmask(body, operation_id, store):
    if isinstance(body, dict) and len(body) == 1 and isinstance(body.get("$secret"), str):
        value = store.get(operation_id, body["$secret"]) if store else None
        if value is None:
            raise LookupError("secret %s of %s is not in the store" % (body["$secret"], operation_id))
        return value
    if isinstance(body, dict):
        return {k: unmask(v, operation_id, store) for k, v in body.items()}
    if isinstance(body, list):
        return [unmask(v, operation_id, store) for v in body]
    return body


# ----------------------------------------------------------------------------------------------
# Metrics (Prometheus text), the series and labels the contract names.


class Metrics:
    def __init__(self):
        self.lock = threading.Lock()
        self.counters = {}
        self.oldest_unknown = 0.0

    def inc(self, name, label, value):
        with self.lock:
            key = (name, label, value)
            self.counters[key] = self.counters.get(key, 0) + 1

    def render(self):
        series = [
            ("lease_acquire_total", "outcome", ["success", "busy", "missing", "db_error"]),
            ("lease_renew_total", "outcome", ["success", "lost", "unknown"]),
            ("protected_write_rejected_total", "reason", ["lease", "state", "revision"]),
        ]
        out = []
        with self.lock:
            for name, label, values in series:
                out.append("# TYPE %s counter" % name)
                for v in values:
                    out.append('%s{%s="%s"} %d' % (name, label, v, self.counters.get((name, label, v), 0)))
            out.append("# TYPE tool_operation_unknown_total counter")
            out.append("tool_operation_unknown_total %d" % self.counters.get(("tool_operation_unknown_total", "", ""), 0))
            out.append("# TYPE tool_operation_oldest_unknown_age_seconds gauge")
            out.append("tool_operation_oldest_unknown_age_seconds %.3f" % self.oldest_unknown)
        return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------------------------
# The kit's half of the worker: output, sessions, barriers, the command dispatch and scripted mode.


class ContractKit:
    def __init__(self, args):
        self.args = args
        self.owner = args.owner
        self.events = open(args.events, "a", buffering=1)
        self.out_lock = threading.Lock()
        self.state_lock = threading.Lock()
        self.lease = None  # (run_id, epoch)
        self.ttl_ms = None
        self.revision = None
        self.unknown = False  # a write's outcome is unknown: read back before the next one
        self.heartbeat_stop = None
        self.cancelled = threading.Event()  # the execution was cancelled (renewal lost / unconfirmed)
        self.metrics = Metrics()
        self.secrets = SecretStore(args.secrets_dir) if args.secrets_dir else None

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
        line = json.dumps(ev) + "\n"
        with self.out_lock:
            self.events.write(line)
            sys.stdout.write(line)
            sys.stdout.flush()

    def connect(self):
        try:
            conn = psycopg.connect(self.args.database_url, application_name=self.owner, autocommit=True,
                                   connect_timeout=max(1, math.ceil(self.args.acquire_timeout_ms / 1000)))
        except psycopg.Error as e:
            raise Refused("db_error", "connect: %s" % e)
        conn.warnings = []
        conn.add_notice_handler(lambda d: conn.warnings.append(d.message_primary or ""))
        return conn

    def check_durable(self, conn, what):
        """A COMMIT whose synchronous-replication wait was cancelled succeeded only locally."""
        if any("synchronous replication" in w for w in conn.warnings):
            raise Unknown("%s: committed locally, the synchronous replication wait was cancelled" % what)

    def held(self):
        with self.state_lock:
            if self.lease is None:
                raise Refused("lease_lost", "no lease held")
            return self.lease, self.ttl_ms

    def barrier(self, conn, faults, point, in_tx=True):
        for b in (faults or {}).get("barriers", []):
            if b.get("point") == point:
                if in_tx:
                    conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", (b["key"],))
                else:
                    conn.execute("SELECT pg_advisory_lock_shared(%s)", (b["key"],))
                    conn.execute("SELECT pg_advisory_unlock_shared(%s)", (b["key"],))

    def call_tool(self, method, path, body, timeout_ms):
        host, port = self.args.tools_addr.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=timeout_ms / 1000.0)
        try:
            payload = None if body is None else json.dumps(body)
            conn.request(method, path, body=payload, headers={"content-type": "application/json"})
            resp = conn.getresponse()
            text = resp.read().decode() or "null"
            try:
                return resp.status, json.loads(text)
            except ValueError:
                return resp.status, text
        finally:
            conn.close()

    def run(self, c):
        cmd = c["cmd"]
        if cmd == "acquire":
            return self.acquire(c)
        if cmd == "start":
            self.transition("start", "pending", "running", None, c.get("expected_revision"), c.get("faults"))
        elif cmd == "save":
            self.transition("save", "running", "running", c["checkpoint"], c.get("expected_revision"), c.get("faults"))
        elif cmd == "succeed":
            self.transition("succeed", "running", "succeeded", None, c.get("expected_revision"), c.get("faults"))
        elif cmd == "fail":
            self.transition("fail", "running", "failed", None, c.get("expected_revision"), c.get("faults"))
        elif cmd == "plan":
            return self.plan(c)
        elif cmd == "advance":
            return self.advance(c)
        elif cmd == "dispatch":
            return self.dispatch(c)
        elif cmd == "reconcile":
            return self.reconcile(c)
        elif cmd == "metrics":
            return {"text": self.metrics.render()}
        elif cmd == "create_run":
            return self.create_run(c)
        elif cmd == "cancel":
            return self.cancel(c)
        elif cmd == "renew":
            return self.renew(c)
        elif cmd == "release":
            return self.release(c)
        elif cmd == "exit":
            return None
        else:
            raise Refused("bad_command", "unknown command %r" % cmd)
        return None

    def handle(self, c):
        """Run one command and answer it with exactly one event; True when it answered ok."""
        try:
            data = self.run(c)
            self.emit(c["cmd"], c["id"], "ok", data=data)
            return True
        except Refused as e:
            self.emit(c["cmd"], c["id"], e.outcome, detail=e.detail)
        except psycopg.OperationalError as e:
            self.emit(c["cmd"], c["id"], "db_error", detail=str(e))
        except Exception as e:  # noqa: BLE001 - every command gets its answer
            self.emit(c["cmd"], c["id"], "error", detail="%s: %s" % (type(e).__name__, e))
        return False

    def script(self):
        """Scripted mode: one whole task alone, stopping (no terminal write) once cancelled."""
        a = self.args
        plan = [{"cmd": "acquire", "run_id": a.run_id, "ttl_ms": a.ttl_ms, "heartbeat_ms": a.heartbeat_ms,
                 "renew_timeout_ms": a.renew_timeout_ms}, {"cmd": "start"}]
        plan += [{"cmd": "save", "checkpoint": {"step": i, "of": a.steps}} for i in range(1, a.steps + 1)]
        plan += [{"cmd": "succeed"}, {"cmd": "release"}]
        for i, c in enumerate(plan, start=1):
            if self.cancelled.is_set():
                return False
            c["id"] = i
            if not self.handle(c):
                return False
            if c["cmd"] == "save" and a.pace_ms > 0 and self.cancelled.wait(a.pace_ms / 1000.0):
                return False
        return True


def main(worker_class):
    """Parse the flags, then run the command loop (or the script) of a worker_class(args)."""
    p = argparse.ArgumentParser(description="fenceproof example worker (Python)")
    p.add_argument("--database-url", required=True)
    p.add_argument("--owner", required=True)
    p.add_argument("--events", required=True)
    p.add_argument("--secrets-dir")
    p.add_argument("--write-path", choices=["api", "direct"], default="api")  # fp_* calls, or its own statements
    p.add_argument("--tools-addr")
    p.add_argument("--tenant", default="tenant1")
    p.add_argument("--trace-id", default="")
    p.add_argument("--script", action="store_true")
    p.add_argument("--run-id")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--pace-ms", type=int, default=0)
    p.add_argument("--ttl-ms", type=int, default=5000)
    p.add_argument("--heartbeat-ms", type=int, default=1000)
    p.add_argument("--renew-timeout-ms", type=int, default=1000)
    p.add_argument("--acquire-timeout-ms", type=int, default=10000)  # how long to wait for a connection
    p.add_argument("--command-timeout-ms", type=int, default=30000)  # accepted; the harness bounds commands
    args = p.parse_args()

    w = worker_class(args)
    w.emit("ready", None, "ok", detail="pid %d" % os.getpid())
    if args.script:
        done = w.script()
        w.emit("script_end", None, "ok" if done else "stopped", detail="scripted task ended")
        os._exit(0 if done else 4)

    inflight = []
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            c = json.loads(line)
            if not isinstance(c, dict) or not isinstance(c.get("id"), int) or not isinstance(c.get("cmd"), str):
                raise ValueError("a command is an object with an integer id and a string cmd")
        except ValueError as e:
            cid = c.get("id") if isinstance(locals().get("c"), dict) and isinstance(c.get("id"), int) else None
            w.emit("bad_command", cid, "error", detail="%s: %s" % (e, line.strip()[:200]))
            continue
        if c["cmd"] == "exit":
            for t in inflight:
                t.join()
            w.handle(c)
            os._exit(0)
        t = threading.Thread(target=w.handle, args=(c,), daemon=True)
        t.start()
        inflight = [x for x in inflight if x.is_alive()] + [t]
    os._exit(0)
