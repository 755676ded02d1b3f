#!/usr/bin/env python3
"""Legal variants of the Python example worker for cli/tests/false_verdicts.rs: each keeps every
rule and brings back a moment that once gave a false FAIL; the example's functions overridden by
name (variant_kit.py checks that each still exists), chosen by the name the test starts this file
under (`<name>.py`, a link to it)."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))

import variant_kit as kit  # noqa: E402
from variant_kit import Variant  # noqa: E402


class SlowAnswer(Variant):
    """The answer to CMD comes 1.3 s after the command committed, on a 1,200 ms lease."""

    CMD = None

    def run(self, c):
        data = super().run(c)
        if c["cmd"] == self.CMD and c.get("ttl_ms", getattr(self, "ttl_ms", 0)) == 1200:
            time.sleep(1.3)
        return data


class SlowStartAnswer(SlowAnswer):
    CMD = "start"


class SlowAcquireAnswer(SlowAnswer):
    CMD = "acquire"


class BarrierInResultTransaction(kit.HookedDispatch):
    """The dispatcher waits at its before_result_write barrier inside its result write's
    transaction."""

    def before_result(self, conn, c, op):
        conn.execute("BEGIN")
        self.barrier(conn, c.get("faults"), "before_result_write", in_tx=True)

    def after_result(self, conn):
        conn.execute("COMMIT")


VARIANTS = {
    "slow-start-answer": SlowStartAnswer,
    "slow-acquire-answer": SlowAcquireAnswer,
    "barrier-in-result-transaction": BarrierInResultTransaction,
}

if __name__ == "__main__":
    kit.main(VARIANTS)
