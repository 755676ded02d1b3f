#!/usr/bin/env python3
"""A legal variant of the Python example worker (examples/python-worker), for the precision set
(cli/tests/precision_set.rs): on the direct path its renewal locks the lease row first, in a
transaction of its own, and then updates it under the same owner, epoch and expiry conditions:

    BEGIN; SELECT ... FROM worker_leases WHERE run_id = $1 FOR UPDATE;
    UPDATE worker_leases ... WHERE run_id AND owner AND epoch AND expires_at > clock_timestamp();
    COMMIT

The spec allows it (the UPDATE keeps every fencing condition; the lock only makes a takeover wait
for the renewal's transaction). What it changes: while the renewal's transaction is open, a
takeover waits on its row lock, so a holder cut off mid-renewal keeps the row locked until its
server-side session ends. Everything else is the example's own code, imported from its folder;
only `renew_once` is overridden."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "examples", "python-worker"))

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))

import fpkit  # noqa: E402
import protocol  # noqa: E402
import variant_kit  # noqa: E402
import psycopg  # noqa: E402


class LockFirstRenewal(protocol.Protocol):
    def renew_once(self, lease, ttl_ms):
        if self.args.write_path != "direct":
            return super().renew_once(lease, ttl_ms)
        conn = self.connect()
        try:
            conn.execute("BEGIN")
            conn.execute("SELECT owner, epoch FROM worker_leases WHERE run_id = %s::uuid FOR UPDATE",
                         (lease[0],)).fetchone()
            row = conn.execute("UPDATE worker_leases SET updated_at = clock_timestamp(),"
                               " expires_at = clock_timestamp() + (%s::bigint * interval '1 millisecond')"
                               " WHERE run_id = %s::uuid AND owner = %s AND epoch = %s"
                               " AND expires_at > clock_timestamp() RETURNING expires_at",
                               (ttl_ms, lease[0], self.owner, lease[1])).fetchone()
            conn.execute("COMMIT")
            self.check_durable(conn, "renew")
            return row is not None
        finally:
            if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                try:
                    conn.execute("ROLLBACK")
                except psycopg.Error:
                    pass
            conn.close()


# Loud when the example no longer has the function overridden here (or has it with other parameters).
variant_kit.check_overrides(LockFirstRenewal)


class Worker(fpkit.ContractKit, LockFirstRenewal):
    """The contract kit with the lock-first renewal."""


if __name__ == "__main__":
    fpkit.main(Worker)
