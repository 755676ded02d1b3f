#!/usr/bin/env python3
"""Broken variants of the Python example worker's direct path (`--write-path direct`: its own
statements on the tables) for cli/tests/direct_bug_classes.rs and cli/tests/failure_lines.rs: each
breaks one of the spec's warnings about its statements, the example's functions overridden by name
(variant_kit.py checks that each still exists), chosen by the name the test starts this file under
(`<name>.py`, a link to it). On the fp_* path each is the example."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))

import variant_kit as kit  # noqa: E402
from variant_kit import Variant  # noqa: E402


class NoRowLock(kit.HookedDirectTransition):
    """§03/§06: the lease re-read before the write, not locked."""

    def lock_lease(self, conn, lease):
        return conn.execute("SELECT owner, epoch, expires_at > clock_timestamp() FROM worker_leases"
                            " WHERE run_id = %s", (lease[0],)).fetchone()


class NowNotClock(kit.HookedDirectTransition):
    """§05/§06: the lease's expiry checked against now() (the transaction's start)."""

    def lock_lease(self, conn, lease):
        return conn.execute("SELECT owner, epoch, expires_at > now() FROM worker_leases"
                            " WHERE run_id = %s FOR UPDATE", (lease[0],)).fetchone()


class CasNoRevision(kit.HookedDirectTransition):
    """§06: the run's UPDATE without the expected revision in its WHERE."""

    def cas_run(self, conn, lease, expected, frm, to, checkpoint):
        return conn.execute("UPDATE agent_runs SET checkpoint = COALESCE(%s::jsonb, checkpoint), status = %s,"
                            " revision = revision + 1, updated_at = clock_timestamp()"
                            " WHERE run_id = %s AND status = %s RETURNING revision",
                            (None if checkpoint is None else json.dumps(checkpoint), to, lease[0],
                             frm)).fetchone()


class FenceOnOwner(kit.HookedDirectTransition):
    """§02: the commit validated on the owner alone (no epoch)."""

    def fenced(self, row, lease):
        return not (row is None or row[0] != self.owner or row[2] is not True)


class UnfencedSave(kit.HookedDirectTransition):
    """The protected write validates nothing of the lease but that its row exists
    (cli/tests/failure_lines.rs)."""

    def fenced(self, row, lease):
        return row is not None


class ReleaseZeroesEpoch(kit.HookedRelease):
    """§05.2: the release sets the epoch back to 0."""

    def release_lease(self, conn, lease):
        if self.args.write_path != "direct":
            return super().release_lease(conn, lease)
        return conn.execute("UPDATE worker_leases SET owner = NULL, epoch = 0, expires_at = clock_timestamp(),"
                            " updated_at = clock_timestamp() WHERE run_id = %s::uuid AND owner = %s"
                            " AND epoch = %s", (lease[0], self.owner, lease[1])).rowcount


class RenewNoExpiry(Variant):
    """§05.2: a renewal without `expires_at > clock_timestamp()` (an expired term renewed)."""

    def renew_once(self, lease, ttl_ms):
        if self.args.write_path != "direct":
            return super().renew_once(lease, ttl_ms)
        conn = self.connect()
        try:
            row = conn.execute("UPDATE worker_leases SET updated_at = clock_timestamp(),"
                               " expires_at = clock_timestamp() + (%s::bigint * interval '1 millisecond')"
                               " WHERE run_id = %s::uuid AND owner = %s AND epoch = %s"
                               " RETURNING expires_at",
                               (ttl_ms, lease[0], self.owner, lease[1])).fetchone()
            self.check_durable(conn, "renew")
            return row is not None
        finally:
            conn.close()


class ClaimNoRunStatus(Variant):
    """§09.2: the claim without the join on agent_runs (a finished run's intent dispatched)."""

    def claim(self, conn, ttl_ms, limit):
        if self.args.write_path != "direct":
            return super().claim(conn, ttl_ms, limit)
        return conn.execute(
            "WITH candidate AS ("
            "  SELECT o.operation_id FROM tool_operations o"
            "  WHERE o.status = 'prepared'"
            "  ORDER BY o.updated_at FOR UPDATE OF o SKIP LOCKED LIMIT %s)"
            " UPDATE tool_operations o SET status = 'dispatching', dispatch_owner = %s,"
            "  dispatch_until = clock_timestamp() + (%s::bigint * interval '1 millisecond'),"
            "  revision = revision + 1, updated_at = clock_timestamp()"
            " FROM candidate c WHERE o.operation_id = c.operation_id"
            " RETURNING o.operation_id, o.tool_name, o.request_digest, o.request_body, o.revision",
            (limit, self.owner, ttl_ms)).fetchall()


class TakeoverOwnerAlone(Variant):
    """§05.1: a takeover of any lease held by someone else, live or not."""

    def take_lease(self, conn, c):
        if self.args.write_path != "direct":
            return super().take_lease(conn, c)
        self.barrier(conn, c.get("faults"), "before_takeover_write", in_tx=False)
        sql = ("UPDATE worker_leases SET owner = %s, epoch = epoch + 1, updated_at = clock_timestamp(),"
               " expires_at = clock_timestamp() + (%s::bigint * interval '1 millisecond')"
               " WHERE run_id = %s::uuid AND (owner IS NULL OR owner <> %s)"
               " RETURNING epoch")
        return conn.execute(sql, (self.owner, c["ttl_ms"], c["run_id"], self.owner)).fetchone()


class ResultOnOperationAlone(Variant):
    """§09.3: the result written on the operation alone, not under the claim."""

    def record_result(self, conn, op, rev, dig, status, remote_id, result):
        if self.args.write_path != "direct":
            return super().record_result(conn, op, rev, dig, status, remote_id, result)
        return conn.execute(
            "UPDATE tool_operations SET status = %s, remote_id = %s, result = %s::jsonb,"
            " dispatch_until = NULL, revision = revision + 1, updated_at = clock_timestamp()"
            " WHERE operation_id = %s"
            " AND request_digest = %s RETURNING revision",
            (status, remote_id, json.dumps(result), op, dig)).fetchone()


VARIANTS = {
    "no-row-lock": NoRowLock,
    "cas-no-revision": CasNoRevision,
    "release-zeroes-epoch": ReleaseZeroesEpoch,
    "renew-no-expiry": RenewNoExpiry,
    "claim-no-run-status": ClaimNoRunStatus,
    "fence-on-owner": FenceOnOwner,
    "takeover-owner-alone": TakeoverOwnerAlone,
    "result-on-operation-alone": ResultOnOperationAlone,
    "now-not-clock": NowNotClock,
    "unfenced-save": UnfencedSave,
}

if __name__ == "__main__":
    kit.main(VARIANTS)
