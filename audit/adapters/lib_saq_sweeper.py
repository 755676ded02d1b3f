"""saq 0.26.4 exactly as `lib_saq.py` runs it, except that the first worker (A) sweeps too, as every
saq worker does unless told otherwise: started first, A's sweep takes saq's sweep lock
(`PostgresQueue.sweep`: a session-level `pg_try_advisory_lock`, never let go) and keeps it, so the
stalled worker is the one holding the sweep lock and B's sweeps all return at once. Each sweeping
worker says whether it holds the lock (its `sweep_lock` event).
"""

import asyncio
import sys

import common
import lib_saq

if __name__ == "__main__":
    args = common.parse(sys.argv[1:])
    if args.cmd == "worker":
        args.recover = True
    asyncio.run(lib_saq.main(args))
