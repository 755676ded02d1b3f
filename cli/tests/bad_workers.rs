//! Workers that break the language stop the run with one line, never a FAIL: one that exits at
//! once gives no verdict (exit 3); one whose own output breaks the worker contract deviates (exit
//! 4, as a conformance deviation): a line that is not JSON, a flood of its stdout (the harness's
//! memory stays bounded), a line without end. Nothing they started is left running.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

fn script(dir: &std::path::Path, name: &str, body: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:").and_then(|v| v.split_whitespace().next()?.parse().ok()))
        .unwrap_or(0)
}

/// Run verify with `worker`; the exit code, stderr and the highest RSS seen (KiB).
fn verify_with(worker: &std::path::Path, reports: &std::path::Path) -> (Option<i32>, String, u64) {
    let err_path = reports.with_extension("stderr");
    let mut child = Command::new(FENCEPROOF)
        .args(["verify", "--only", "A,C", "--worker-bin"])
        .arg(worker)
        .arg("--reports-dir")
        .arg(reports)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let (t0, mut peak) = (Instant::now(), 0);
    let status = loop {
        peak = peak.max(rss_kib(child.id()));
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            panic!("{} did not stop the run within 90 s", worker.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.code(), std::fs::read_to_string(&err_path).unwrap(), peak)
}

#[test]
fn a_worker_that_dies_is_an_error_and_one_that_breaks_the_language_deviates_each_named() {
    let tmp = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("bad_workers");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let reports = tmp.join("reports");

    let (code, err, _) = verify_with(std::path::Path::new("/bin/false"), &reports);
    assert_eq!(code, Some(3), "{err}");
    assert_eq!(fenceproof_harness::testkit::own_lines(&err).trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("exited (status 1) before answering its first command"), "{err}");

    // Valid events under the contract's schema (so the flood, not a malformed event, stops it).
    let flood = script(
        &tmp,
        "flood.sh",
        "exec yes '{\"event\": \"noise\", \"owner\": \"noise-8c1\", \"outcome\": \"ok\", \"id\": null}'",
    );
    let (code, err, peak) = verify_with(&flood, &reports);
    assert_eq!(code, Some(4), "{err}");
    assert!(err.contains("more than 10000 events no command asked for") && err.contains("noise-8c1"), "{err}");
    assert!(peak < 300 * 1024, "the harness grew to {peak} KiB under a flood");

    let endless = script(&tmp, "endless.sh", "exec tr '\\\\0' x < /dev/zero");
    let (code, err, peak) = verify_with(&endless, &reports);
    assert_eq!(code, Some(4), "{err}");
    assert!(err.contains("a line longer than 1048576 bytes"), "{err}");
    assert!(peak < 300 * 1024, "the harness grew to {peak} KiB on an endless line");

    let chatty = script(&tmp, "chatty.sh", "echo 'starting up, hello'; exec sleep 60");
    let (code, err, _) = verify_with(&chatty, &reports);
    assert_eq!(code, Some(4), "{err}");
    assert_eq!(fenceproof_harness::testkit::own_lines(&err).trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("not JSON") && err.contains("starting up, hello"), "{err}");

    for marker in ["noise-8c1", "/dev/zero", "chatty.sh"] {
        let out = Command::new("pgrep").args(["-f", marker]).output().unwrap();
        assert!(out.stdout.is_empty(), "{marker}: left running: {}", String::from_utf8_lossy(&out.stdout));
    }
}

/// A worker that answers the preflight (commands mode, owner `preflight-…`) and exits 2 at every
/// other start with two lines on stderr, as a worker does on a flag it misses.
const EXITS_2_IN_ROWS: &str = r#"#!/usr/bin/env python3
import json, sys
argv = sys.argv[1:]
owner = argv[argv.index("--owner") + 1] if "--owner" in argv else ""
if not owner.startswith("preflight-"):
    print("exits-2 worker: starting as " + owner, file=sys.stderr)
    print("exits-2 worker: error: the flag --frobnicate is required", file=sys.stderr)
    sys.exit(2)
print(json.dumps({"event": "ready", "outcome": "ok", "id": None}), flush=True)
for line in sys.stdin:
    c = json.loads(line)
    print(json.dumps({"event": c["cmd"], "outcome": "ok", "id": c["id"], "data": {"text": ""}}), flush=True)
    if c["cmd"] == "exit":
        break
"#;

/// Rows that start the worker in each mode: scripted (A; B-dbfreeze and B-running, which wait for
/// its commits in the database), commands (C, W-control's control plane, K-forward on a server of
/// its own, H-async's without a write path of its row's), a dispatcher behind a proxy
/// (E-crash-commit), several workers (E-idem).
const ROWS: &[&str] =
    &["A", "B-dbfreeze", "B-running", "C", "E-idem", "E-crash-commit", "K-forward", "H-async", "W-control"];

#[test]
fn a_worker_that_exits_2_at_start_is_one_error_line_per_row_with_its_stderr_never_a_fail() {
    let tmp = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("bad_workers_rows");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let worker = tmp.join("exits-2-worker");
    std::fs::write(&worker, EXITS_2_IN_ROWS).unwrap();
    std::fs::set_permissions(&worker, std::fs::Permissions::from_mode(0o755)).unwrap();
    let reports = tmp.join("reports");
    let mut cmd = Command::new(FENCEPROOF);
    cmd.args(["verify", "--quiet", "--skip-conformance", "--only", &ROWS.join(","), "--worker-bin"])
        .arg(&worker)
        .arg("--reports-dir")
        .arg(&reports);
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, &tmp.join("run"), Duration::from_secs(300));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(3), "no verdict, exit 3:\n{text}");
    assert!(!text.contains("FAIL"), "a worker that never started is blamed for a rule:\n{text}");
    for row in ROWS {
        let verdicts: Vec<&str> = text.lines().filter(|l| l.starts_with(&format!("{row} "))).collect();
        assert_eq!(verdicts, [format!("{row} ERROR")], "{row}: one ERROR line:\n{text}");
    }
    let errors: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("error: ")).collect();
    assert_eq!(errors.len(), ROWS.len(), "one error line per row:\n{text}");
    for e in &errors {
        assert!(e.contains("error: worker "), "names the worker: {e}");
        assert!(e.contains("exited (status 2) before answering its first command"), "its status: {e}");
        assert!(
            e.contains("its stderr ends: exits-2 worker: starting as ")
                && e.ends_with("| exits-2 worker: error: the flag --frobnicate is required"),
            "the last lines of its stderr: {e}"
        );
    }
    // The matrix agrees: every row an ERROR without a failed check.
    let run = std::fs::read_dir(&reports).unwrap().flatten().map(|e| e.path()).find(|p| p.join("matrix.json").exists());
    let matrix: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.expect("a run folder").join("matrix.json")).unwrap())
            .unwrap();
    for r in matrix["results"].as_array().unwrap() {
        assert_eq!(r["verdict"], "ERROR", "{}", r["id"]);
        let failed = r["checks"].as_array().unwrap().iter().filter(|c| c["verdict"] == "FAIL").count();
        assert_eq!(failed, 0, "{}: failed checks {}", r["id"], r["checks"]);
    }
}
