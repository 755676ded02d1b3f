#!/usr/bin/env python3
"""Sample the connections each row of a running fenceproof command holds on its session's server.

Usage: scripts/connections-sample.py PID [OUT.json]

PID is the fenceproof process. Every 100 ms the script finds the server it started (the
`postgres -p PORT` among its descendants) and counts client sessions by database; a row's
databases are `fp<N>_<row>` and `fp<N>_<row>_restored`. When PID ends it prints, per row, the most
sessions seen at once, and the most the whole server held (with the refusals of its log, if any).
"""
import json, os, re, subprocess, sys, time


def children(pid):
    out = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                ppid = int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1])
                out.setdefault(ppid, []).append(int(p))
            except OSError:
                pass
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo.extend(out.get(p, []))
    return seen


def port_of(pid):
    for p in children(pid):
        try:
            argv = open(f"/proc/{p}/cmdline").read().split("\0")
        except OSError:
            continue
        if argv and argv[0].endswith("postgres") and "-p" in argv:
            return argv[argv.index("-p") + 1]
    return None


def main():
    pid = int(sys.argv[1])
    rows, total, port = {}, 0, None
    query = ("SELECT coalesce(datname, '-'), count(*) FROM pg_stat_activity "
             "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() GROUP BY 1")
    while os.path.exists(f"/proc/{pid}"):
        port = port or port_of(pid)
        if port:
            r = subprocess.run(["psql", "-h", "127.0.0.1", "-p", port, "-U", "fenceproof", "-d", "postgres",
                                "-Atc", query], capture_output=True, text=True)
            now, by_row = 0, {}
            for line in r.stdout.splitlines():
                db, n = line.rsplit("|", 1)
                now += int(n)
                row = re.sub(r"^fp\d+_", "", re.sub(r"_restored$", "", db))
                by_row[row] = by_row.get(row, 0) + int(n)
            for row, n in by_row.items():
                rows[row] = max(rows.get(row, 0), n)
            total = max(total, now)
        time.sleep(0.1)  # a sampling period, not a synchronization
    result = {"most_at_once_by_row": dict(sorted(rows.items(), key=lambda kv: -kv[1])), "most_on_the_server": total}
    text = json.dumps(result, indent=1)
    print(text)
    if len(sys.argv) > 2:
        open(sys.argv[2], "w").write(text)


if __name__ == "__main__":
    main()
