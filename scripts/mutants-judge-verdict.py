#!/usr/bin/env python3
"""The verdict of one cargo-mutants run over the judging code (scripts/mutants-judge.sh).

Usage: mutants-judge-verdict.py MUTANTS_OUT EQUIVALENTS_TOML SECONDS

Counts caught, missed, timed out and unviable mutants from cargo-mutants' outcome files, and
compares the missed ones with the reviewed equivalents (each `[[equivalent]]` has the mutant's
`id` as cargo-mutants names it and the `reason` it cannot be caught). A missed mutant not listed,
or a listed one that was caught, fails (exit 1). A timed-out mutant counts as caught (its test
did not pass), as cargo-mutants reports it.
"""

import os
import sys
import tomllib


def lines(folder, name):
    path = os.path.join(folder, name)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.strip() for line in f if line.strip()]


def main():
    folder, equivalents, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(equivalents, "rb") as f:
        listed = {e["id"]: e["reason"] for e in tomllib.load(f).get("equivalent", [])}
    caught, missed = lines(folder, "caught.txt"), lines(folder, "missed.txt")
    timeout, unviable = lines(folder, "timeout.txt"), lines(folder, "unviable.txt")
    viable = len(caught) + len(missed) + len(timeout)
    equivalent = [m for m in missed if m in listed]
    survivors = [m for m in missed if m not in listed]
    wrongly_listed = [m for m in caught + timeout if m in listed]
    killed = len(caught) + len(timeout)
    share = 100.0 * (killed + len(equivalent)) / viable if viable else 100.0
    print("mutants-judge: %d viable (%d unviable): %d caught (%d by timeout), %d equivalent, %d unlisted survivors;"
          " %.1f%% caught or equivalent; %d s" % (viable, len(unviable), killed, len(timeout), len(equivalent),
                                                   len(survivors), share, seconds))
    for m in survivors:
        print("  SURVIVED (not a listed equivalent): %s" % m)
    for m in wrongly_listed:
        print("  LISTED BUT CAUGHT (remove it from the equivalents): %s" % m)
    sys.exit(1 if survivors or wrongly_listed else 0)


if __name__ == "__main__":
    main()
