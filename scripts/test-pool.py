#!/usr/bin/env python3
"""`just test`: build every test binary of the workspace, then run them side by side.

`cargo test` runs its test binaries one after another, and most of ours wait on real time (lease
expiries, frozen servers, failovers), not on the CPU. This runs up to --jobs binaries at once
(default: the number of cores), the longest first (their times from the previous run, kept in
target/test-times.json), each in its package's folder as cargo would, each log in
target/test-logs/<binary>.log. A binary's own tests still run on cargo's usual threads. Every binary
has a time limit; Ctrl-C stops every binary's process group. Arguments after the options are passed
to every binary (a test name filter, --nocapture, ...). Exit 0 when every binary passed, 1 when one
failed or timed out, 2 when the build failed, 130 on Ctrl-C.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.path.join(ROOT, "target")
TIMES = os.path.join(TARGET, "test-times.json")
LOGS = os.path.join(TARGET, "test-logs")
LIMIT_S = 40 * 60


def say(msg):
    print(f"test-pool: {msg}", flush=True)


def build():
    """Every test binary as (name, package folder, executable), or None when the build failed."""
    cmd = ["cargo", "test", "--workspace", "--no-run", "--message-format=json-render-diagnostics"]
    p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        return None
    found = []
    for line in p.stdout.splitlines():
        try:
            m = json.loads(line)
        except json.JSONDecodeError:
            continue
        if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
            continue
        pkg_dir = os.path.dirname(m["manifest_path"])
        pkg = os.path.basename(pkg_dir)
        kind = m["target"]["kind"][0]
        name = f"{pkg}/{m['target']['name']}" if kind == "test" else f"{pkg}/{kind}:{m['target']['name']}"
        found.append((name, pkg_dir, m["executable"], m["package_id"]))
    return found


def load_times():
    try:
        with open(TIMES) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def start(name, pkg_dir, exe, args):
    os.makedirs(LOGS, exist_ok=True)
    log = open(os.path.join(LOGS, name.replace("/", "__").replace(":", "_") + ".log"), "w")
    env = dict(os.environ, CARGO_MANIFEST_DIR=pkg_dir, CARGO_PKG_NAME=os.path.basename(pkg_dir))
    proc = subprocess.Popen([exe, *args], cwd=pkg_dir, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    return proc, log, time.monotonic()


def stop_all(running):
    for proc, _log, _t0, _name in running:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def summary_of(log_path):
    """'N passed' from the binary's last test result line."""
    with open(log_path, errors="replace") as f:
        text = f.read()
    m = re.findall(r"test result: \w+\. (\d+) passed; (\d+) failed", text)
    return (int(m[-1][0]), int(m[-1][1])) if m else (0, 0), text


def run_pool(binaries, jobs, args):
    times = load_times()
    queue = sorted(binaries, key=lambda b: -times.get(b[0], 1e9 if "/lib:" not in b[0] else 0))
    running, failed, new_times, passed_tests = [], [], {}, 0
    t0 = time.monotonic()
    try:
        while queue or running:
            while queue and len(running) < jobs:
                name, pkg_dir, exe, _ = queue.pop(0)
                proc, log, started = start(name, pkg_dir, exe, args)
                running.append((proc, log, started, name))
            time.sleep(0.2)
            for item in list(running):
                proc, log, started, name = item
                took = time.monotonic() - started
                code = proc.poll()
                if code is None and took < LIMIT_S:
                    continue
                if code is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    code = "timeout"
                log.close()
                running.remove(item)
                (n, _), text = summary_of(log.name)
                passed_tests += n
                new_times[name] = round(took, 1)
                verdict = "ok" if code == 0 else "FAILED"
                say(f"{verdict:<6} {name:<40} {took:7.1f} s  ({n} passed)")
                if code != 0:
                    failed.append(name)
                    first = text.find("\nfailures:\n")
                    print((text[first:] if first >= 0 else text[-4000:])[-12000:], flush=True)
                    say(f"{name}: exit {code}; whole log {log.name}")
    except KeyboardInterrupt:
        stop_all(running)
        say("interrupted: every running test binary stopped")
        sys.exit(130)
    times.update(new_times)
    with open(TIMES, "w") as f:
        json.dump(times, f, indent=1, sort_keys=True)
    wall = time.monotonic() - t0
    say(f"{len(binaries)} binaries, {passed_tests} tests passed, {len(failed)} binaries failed; "
        f"{wall:.0f} s wall for {sum(new_times.values()):.0f} s of binaries ({jobs} at a time)")
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("FENCEPROOF_TEST_JOBS", os.cpu_count() or 2)))
    ap.add_argument("--only", help="only the binaries whose name contains one of these (comma-separated)")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="passed to every test binary")
    a = ap.parse_args()
    if a.jobs < 1:
        say(f"--jobs must be at least 1, not {a.jobs}")
        sys.exit(2)
    binaries = build()
    if binaries is None:
        say("cargo test --no-run failed (its errors are above)")
        sys.exit(2)
    if a.only:
        wanted = a.only.split(",")
        binaries = [b for b in binaries if any(w in b[0] for w in wanted)]
        if not binaries:
            say(f"no test binary's name contains any of {wanted}")
            sys.exit(2)
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    failed = run_pool(binaries, a.jobs, args)
    if failed:
        say("failed: " + ", ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
