#!/usr/bin/env python3
"""A broken variant of the Python example worker (examples/python-worker), for
cli/tests/direct_bug_classes.rs: on the direct path its takeover reads the lease, decides "expired"
on the worker's own clock, and writes the lease without the owner or expiry condition. Everything
else is the example's own code, imported from its folder; only `take_lease` is overridden."""

import datetime
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "examples", "python-worker"))

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))

import fpkit  # noqa: E402
import protocol  # noqa: E402
import variant_kit  # noqa: E402


class ClockTakeover(protocol.Protocol):
    def take_lease(self, conn, c):
        if self.args.write_path != "direct":
            return super().take_lease(conn, c)
        row = conn.execute("SELECT owner, expires_at FROM worker_leases WHERE run_id = %s::uuid",
                           (c["run_id"],)).fetchone()
        if row is None:
            return None
        owner, expires_at = row
        if owner is not None and expires_at > datetime.datetime.now(datetime.timezone.utc):
            return None
        # Decided: the write is next (where the harness may hold it, as the contract's point says).
        self.barrier(conn, c.get("faults"), "before_takeover_write", in_tx=False)
        return conn.execute("UPDATE worker_leases SET owner = %s, epoch = epoch + 1,"
                            " expires_at = clock_timestamp() + (%s::bigint * interval '1 millisecond'),"
                            " updated_at = clock_timestamp() WHERE run_id = %s::uuid RETURNING epoch",
                            (self.owner, c["ttl_ms"], c["run_id"])).fetchone()


# Loud when the example no longer has the function overridden here (or has it with other parameters).
variant_kit.check_overrides(ClockTakeover)


class Worker(fpkit.ContractKit, ClockTakeover):
    """The contract kit with the broken takeover."""


if __name__ == "__main__":
    fpkit.main(Worker)
