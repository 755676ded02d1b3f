#!/usr/bin/env python3
"""A fenceproof worker written in Python from the worker contract alone (the entry point).

It speaks the contract of docs/worker-protocol.md (schema: contract/worker-protocol.schema.json):
commands arrive as JSON lines on stdin, every command is answered by exactly one event on stdout
(also appended to the --events file). Every protocol write is a call of one fenced fp_* function of
migrations/0002_worker_role.sql, so the database, not this program, enforces owner, epoch, expiry
and revision. Control-plane commands (create_run, cancel) run plain SQL on the tables, because the
harness gives the control-plane process the schema owner's connection.

It is kept plain on purpose, one thread per command, so it reads as a template for a worker in Go or
Java. Needs Python 3.11 and psycopg 3 (`pip install "psycopg[binary]"`).

It is two modules beside this file: fpkit.py, the contract kit (command loop, threads, events, flags,
fault points, metrics, secrets) that any worker keeps, and protocol.py, the protocol code a team
replaces with its own (README.md has the table).
"""

import fpkit
import protocol


class Worker(fpkit.ContractKit, protocol.Protocol):
    """The contract kit (fpkit.py, kept as is) with the protocol (protocol.py, a team's own)."""


if __name__ == "__main__":
    fpkit.main(Worker)
