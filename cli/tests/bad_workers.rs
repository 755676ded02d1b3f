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
