#!/usr/bin/env python3
"""Broken variants of the Python example worker for cli/tests/bug_classes.rs (and the one bug
cli/tests/json_outputs.rs and cli/tests/reproduce_line.rs run): each one realistic bug, the
example's functions overridden by name (variant_kit.py checks that each still exists), chosen by
the name the test starts this file under (`<name>.py`, a link to it)."""

import hashlib
import http.client
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))

import variant_kit as kit  # noqa: E402 (first: it puts the example's folder on the path)
import fpkit  # noqa: E402
import protocol  # noqa: E402
from fpkit import Refused  # noqa: E402
from variant_kit import Variant  # noqa: E402


class Create(Variant):
    """The example's `create` (a copy), with the 409 of the operation's own creation taken as
    success or not (OWN_409), and a 5xx answered unknown or as a final failure (FINAL_5XX)."""

    OWN_409, FINAL_5XX = True, False

    def create(self, tool, operation_id, request, timeout_ms):
        try:
            body = fpkit.unmask(request, operation_id, self.secrets)
        except LookupError as e:
            return "failed_final", None, {"not_called": str(e)}
        try:
            status, v = self.call_tool("POST", "/tools/%s/create" % tool,
                                       {"operation_id": operation_id, "request": body}, timeout_ms)
        except (OSError, http.client.HTTPException) as e:
            return "unknown", None, "the call failed after it was sent: %s" % e
        own = self.OWN_409 and status == 409 and isinstance(v, dict) and v.get("operation_id") == operation_id
        if status in (200, 201) or own:
            return "succeeded", v.get("resource_id", ""), v
        if 400 <= status < 500:
            return "failed_final", None, {"status": status, "answer": v}
        if self.FINAL_5XX:
            return "failed_final", None, {"status": status}
        return "unknown", None, "HTTP %d: %s" % (status, v)


class FiveXxFailed(Create):
    """A 5xx recorded as a final failure."""

    FINAL_5XX = True


class Own409NotSuccess(Create):
    """A 409 carrying the operation's own id is not taken as its own creation."""

    OWN_409 = False


class OpIdEpochOwnShape(kit.HookedPlan):
    def operation_id(self, tenant, lease, step, version):
        return "%s:%s:%s:%d@e%d" % (tenant, lease[0], step, version, lease[1])


class OpIdOwner(kit.HookedPlan):
    def operation_id(self, tenant, lease, step, version):
        return "%s/%s/%s/v%d/%s" % (tenant, lease[0], step, version, self.owner)


class OpIdEpoch(kit.HookedPlan):
    def operation_id(self, tenant, lease, step, version):
        return "%s/%s/%s/v%d" % (tenant, lease[0], step, version + 1000 * (lease[1] - 1))


class DigestText(Variant):
    """The request digest over JSON text with sorted keys, not RFC 8785."""

    @classmethod
    def prepare(cls):
        def digest(body):
            return hashlib.sha256(json.dumps(body, sort_keys=True).encode("utf-8")).hexdigest()

        kit.patch(protocol, "digest", digest)


class PlanTwoTransactions(kit.HookedPlan):
    """The planned checkpoint in one transaction, its intent in a second."""

    def register(self, c, checkpoint, intent, store_secrets):
        store_secrets()
        self.transition("plan", "running", "running", checkpoint, c.get("expected_revision"))
        return self.transition("plan", "running", "running", None, None, intent=intent)


class SecretsAfterIntent(kit.HookedPlan):
    """The secret store written after the intent that references it commits."""

    def register(self, c, checkpoint, intent, store_secrets):
        done = self.transition("plan", "running", "running", checkpoint, c.get("expected_revision"),
                               c.get("faults"), intent=intent)
        store_secrets()
        return done


class ReleaseOk(kit.HookedRelease):
    """A release that freed nothing answered ok."""

    REFUSES_LOST = False


class CancelTwoTransactions(kit.HookedCancel):
    """The run's cancel commits, then its prepared operations are cancelled in a second one."""

    IN_ONE_TRANSACTION = False


class Reread(kit.HookedTransition):
    """The expected revision read back from the database instead of compared."""

    def expected_revision(self, conn, lease, expected):
        return conn.execute("SELECT revision FROM agent_runs WHERE run_id = %s", (lease[0],)).fetchone()[0]


class Secrets0644(Variant):
    """The secret store's files readable by group and others."""

    @classmethod
    def prepare(cls):
        class Store(fpkit.SecretStore):
            def put(self, operation_id, name, value):
                p = self.path(operation_id, name)
                fd = os.open(p + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                with os.fdopen(fd, "w") as f:
                    f.write(value)
                    f.flush()
                    os.fsync(f.fileno())
                os.rename(p + ".tmp", p)

        kit.check_overrides(Store)
        kit.patch(fpkit, "SecretStore", Store)


def mask_skipping_arrays(body, found):
    """fpkit.mask (a copy) that leaves lists as they are."""
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
        return {k: mask_skipping_arrays(v, found) for k, v in body.items()}
    if isinstance(body, list):
        return list(body)
    return body


class MaskSkipsArrays(Variant):
    @classmethod
    def prepare(cls):
        kit.patch(fpkit, "mask", mask_skipping_arrays)
        kit.patch(protocol, "mask", mask_skipping_arrays)


class No40001Retry(Variant):
    """The first 40001 taken as the answer."""

    @classmethod
    def prepare(cls):
        kit.patch(protocol, "RETRY_BUDGET", 1)


class LostKeepsRunning(kit.HookedHeartbeat):
    """A renewal refused with zero rows ends the heartbeat without cancelling the execution."""

    def stops_on_loss(self):
        return False


class TtlWholeSeconds(Variant):
    """The acquire hands the database the TTL rounded to whole seconds (the fp_* path)."""

    def take_lease(self, conn, c):
        if self.args.write_path != "direct":
            c = dict(c, ttl_ms=round(c["ttl_ms"] / 1000) * 1000)
        return super().take_lease(conn, c)


VARIANTS = {
    "5xx-failed": FiveXxFailed,
    "409-own": Own409NotSuccess,
    "op-id-epoch-own-shape": OpIdEpochOwnShape,
    "op-id-owner": OpIdOwner,
    "op-id-epoch": OpIdEpoch,
    "digest-text": DigestText,
    "plan-two-tx": PlanTwoTransactions,
    "release-ok": ReleaseOk,
    "cancel-two-tx": CancelTwoTransactions,
    "reread": Reread,
    "secrets-0644": Secrets0644,
    "mask-skips-arrays": MaskSkipsArrays,
    "no-40001-retry": No40001Retry,
    "lost-keeps-running": LostKeepsRunning,
    "secrets-after-intent": SecretsAfterIntent,
    "ttl-whole-seconds": TtlWholeSeconds,
}

if __name__ == "__main__":
    kit.main(VARIANTS)
