#!/usr/bin/env python3
"""`just test`: build every test binary of the workspace, then run them side by side.

`cargo test` runs its test binaries one after another, and most of ours wait on real time (lease
expiries, frozen servers, failovers), not on the CPU. This runs them side by side, the longest first,
each in its package's folder as cargo would, each log in target/test-logs/<unit>.log. A binary's own
tests still run on cargo's usual threads. `--lanes FILE` adds commands (CI's mutant and version
lanes, one `name: command` a line) to the same pool, so a lane that mostly waits runs beside tests
that compute.

How many run at once is decided by CPU, not by count: each unit's wall time and CPU time from its
last run (target/test-costs.json; on a fresh clone scripts/test-costs.json, a measured run's copy)
give its share of the cores (CPU / wall), and the next unit starts while the shares of those running
plus its own stay within --cpu-budget (default: the cores), at most --jobs at once (default: three
times the cores: many units mostly wait, and with twice the cores four such units held every slot
while a core idled). A unit with no history counts as one core. CPU is measured per unit in a cgroup of its
own where this machine lets us make one (cgroup v1 cpuacct or v2); elsewhere only wall times are
kept. Every unit has a time limit; Ctrl-C stops every unit's process group. Arguments after the
options are passed to every test binary (a test name filter, --nocapture, ...). Exit 0 when every
unit passed, 1 when one failed or timed out, 2 when the build failed, 130 on Ctrl-C.
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
COSTS = os.path.join(TARGET, "test-costs.json")
SEED = os.path.join(ROOT, "scripts", "test-costs.json")
LOGS = os.path.join(TARGET, "test-logs")
LIMIT_S = 40 * 60


def say(msg):
    print(f"test-pool: {msg}", flush=True)


class Unit:
    """One thing the pool runs: a test binary (its tests counted) or a lane command."""

    def __init__(self, name, cwd, argv, env=None, lane=False):
        self.name, self.cwd, self.argv, self.env, self.lane = name, cwd, argv, env or {}, lane


def build(args):
    """Every test binary of the workspace as a Unit, or None when the build failed."""
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
        env = {"CARGO_MANIFEST_DIR": pkg_dir, "CARGO_PKG_NAME": pkg}
        found.append(Unit(name, pkg_dir, [m["executable"], *args], env))
    return found


def lanes(path):
    """The lanes of a `name: command` file (blank lines and # comments skipped)."""
    units = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, sep, command = line.partition(":")
            if not sep or not name.strip() or not command.strip():
                say(f"{path}:{n}: expected 'name: command', got {line!r}")
                sys.exit(2)
            units.append(Unit(f"lane/{name.strip()}", ROOT, ["bash", "-c", command.strip()], lane=True))
    return units


def load_costs():
    """Unit name -> {"wall": s, "cpu": s (when measured)}: the last run's, else the seed's."""
    costs = {}
    for path in (SEED, COSTS):
        try:
            with open(path) as f:
                costs.update(json.load(f))
        except (OSError, ValueError):
            pass
    return costs


def share(costs, name):
    """The unit's share of the cores (CPU / wall) from its history; one core when unknown."""
    c = costs.get(name, {})
    if c.get("wall", 0) > 1 and "cpu" in c:
        return min(max(c["cpu"] / c["wall"], 0.1), 2.0)
    return 1.0


class Cgroups:
    """A cgroup per unit for its CPU time (v1 cpuacct or v2), when this machine lets us make them."""

    def __init__(self):
        self.base, self.v2 = None, False
        for base, v2 in (("/sys/fs/cgroup/cpuacct", False), ("/sys/fs/cgroup", True)):
            probe = os.path.join(base, f"fenceproof-pool-{os.getpid()}")
            if v2 and not os.path.exists(os.path.join(base, "cgroup.controllers")):
                continue
            try:
                os.mkdir(probe)
            except OSError:
                continue
            self.base, self.v2 = probe, v2
            break

    def path(self, unit):
        return os.path.join(self.base, re.sub(r"[^A-Za-z0-9_.-]", "_", unit.name))

    def enter(self, unit):
        """A function for the child to run before exec: joins the unit's cgroup (or nothing)."""
        if not self.base:
            return os.setsid
        path = self.path(unit)
        os.makedirs(path, exist_ok=True)
        tasks = os.path.join(path, "cgroup.procs" if self.v2 else "tasks")

        def pre():
            os.setsid()
            try:
                with open(tasks, "w") as f:
                    f.write(str(os.getpid()))
            except OSError:
                pass
        return pre

    def cpu(self, unit):
        """The unit's CPU seconds, or None."""
        if not self.base:
            return None
        try:
            if self.v2:
                with open(os.path.join(self.path(unit), "cpu.stat")) as f:
                    usec = dict(line.split() for line in f)["usage_usec"]
                return int(usec) / 1e6
            with open(os.path.join(self.path(unit), "cpuacct.usage")) as f:
                return int(f.read()) / 1e9
        except (OSError, KeyError, ValueError):
            return None

    def remove(self):
        if not self.base:
            return
        for d in os.listdir(self.base):
            try:
                os.rmdir(os.path.join(self.base, d))
            except OSError:
                pass
        try:
            os.rmdir(self.base)
        except OSError:
            pass


def start(unit, cgroups):
    os.makedirs(LOGS, exist_ok=True)
    log = open(os.path.join(LOGS, re.sub(r"[/:]", "__", unit.name) + ".log"), "w")
    proc = subprocess.Popen(unit.argv, cwd=unit.cwd, stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, **unit.env), preexec_fn=cgroups.enter(unit))
    return proc, log, time.monotonic()


def stop_all(running):
    for proc, _log, _t0, _unit in running:
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


def next_fitting(queue, running, costs, budget, jobs):
    """Index in `queue` of the first unit that fits beside those running, or None."""
    if len(running) >= jobs:
        return None
    if not running:
        return 0 if queue else None
    load = sum(share(costs, u.name) for _p, _l, _t, u in running)
    for i, u in enumerate(queue):
        if load + share(costs, u.name) <= budget + 1e-9:
            return i
    return None


def finish(proc, log, started, unit, code, cgroups, new_costs):
    """Record one finished unit and print its line; returns (tests passed, failed?)."""
    took = time.monotonic() - started
    log.close()
    (n, _), text = summary_of(log.name)
    new_costs[unit.name] = {"wall": round(took, 1)}
    cpu = cgroups.cpu(unit)
    if cpu is not None:
        new_costs[unit.name]["cpu"] = round(cpu, 1)
    verdict = "ok" if code == 0 else "FAILED"
    what = "lane" if unit.lane else f"{n} passed"
    cpu_text = f", {cpu:.0f} s CPU" if cpu is not None else ""
    say(f"{verdict:<6} {unit.name:<40} {took:7.1f} s  ({what}{cpu_text})")
    if code != 0:
        first = text.find("\nfailures:\n")
        print((text[first:] if first >= 0 else text[-4000:])[-12000:], flush=True)
        say(f"{unit.name}: exit {code}; whole log {log.name}")
    return n, code != 0


def busy_idle():
    """The machine's (busy, idle) CPU ticks so far, from /proc/stat; None elsewhere."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return sum(ticks[:8]) - idle, idle


def run_pool(units, jobs, budget):
    costs = load_costs()
    ticks0 = busy_idle()
    queue = sorted(units, key=lambda u: -costs.get(u.name, {}).get("wall", 1e9 if "/lib:" not in u.name else 0))
    running, failed, new_costs, passed_tests = [], [], {}, 0
    cgroups = Cgroups()
    t0 = time.monotonic()
    try:
        while queue or running:
            while (i := next_fitting(queue, running, costs, budget, jobs)) is not None:
                unit = queue.pop(i)
                proc, log, started = start(unit, cgroups)
                running.append((proc, log, started, unit))
            time.sleep(0.2)
            for item in list(running):
                proc, log, started, unit = item
                code = proc.poll()
                if code is None and time.monotonic() - started < LIMIT_S:
                    continue
                if code is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    code = "timeout"
                running.remove(item)
                n, bad = finish(proc, log, started, unit, code, cgroups, new_costs)
                passed_tests += n
                if bad:
                    failed.append(unit.name)
    except KeyboardInterrupt:
        stop_all(running)
        say("interrupted: every running unit stopped")
        sys.exit(130)
    finally:
        cgroups.remove()
    costs.update(new_costs)
    with open(COSTS, "w") as f:
        json.dump(costs, f, indent=1, sort_keys=True)
    wall = time.monotonic() - t0
    cpu = sum(c.get("cpu", 0) for c in new_costs.values())
    say(f"{len(units)} units, {passed_tests} tests passed, {len(failed)} units failed; {wall:.0f} s wall for "
        f"{sum(c['wall'] for c in new_costs.values()):.0f} s of units" + (f" and {cpu:.0f} s of CPU" if cpu else "")
        + f" (CPU budget {budget:g} cores, at most {jobs} at a time)")
    ticks1 = busy_idle()
    if ticks0 and ticks1:
        busy, idle = ticks1[0] - ticks0[0], ticks1[1] - ticks0[1]
        say(f"the machine's cores were busy {100 * busy / max(busy + idle, 1):.0f}% of the pool's time "
            "(every process on it, not only the units)")
    return failed


def main():
    cores = os.cpu_count() or 2
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("FENCEPROOF_TEST_JOBS", 3 * cores)),
                    help="at most this many units at once (default: three times the cores)")
    ap.add_argument("--cpu-budget", type=float, default=float(os.environ.get("FENCEPROOF_TEST_CPU", cores)),
                    help="the cores the units running at once may use together, by their history (default: the cores)")
    ap.add_argument("--only", help="only the units whose name contains one of these (comma-separated)")
    ap.add_argument("--lanes", help="a file of `name: command` lines to run in the same pool")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="passed to every test binary")
    a = ap.parse_args()
    if a.jobs < 1 or a.cpu_budget <= 0:
        say(f"--jobs must be at least 1 and --cpu-budget above 0, not {a.jobs} and {a.cpu_budget}")
        sys.exit(2)
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    extra = lanes(a.lanes) if a.lanes else []
    units = build(args)
    if units is None:
        say("cargo test --no-run failed (its errors are above)")
        sys.exit(2)
    units += extra
    if a.only:
        wanted = a.only.split(",")
        units = [u for u in units if any(w in u.name for w in wanted)]
        if not units:
            say(f"no unit's name contains any of {wanted}")
            sys.exit(2)
    failed = run_pool(units, a.jobs, a.cpu_budget)
    if failed:
        say("failed: " + ", ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
