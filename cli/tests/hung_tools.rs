//! A server tool that never returns (initdb, pg_basebackup: a stalled disk, a broken binary) ends
//! in a bounded error, and Ctrl-C during it stops the run at once, leaving no child behind.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

fn script(dir: &std::path::Path, name: &str, body: &str) {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn sleepers(marker: &str) -> usize {
    let out = Command::new("pgrep").args(["-f", marker]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[test]
fn a_hung_initdb_or_pg_basebackup_is_bounded_and_yields_to_ctrl_c() {
    let tmp = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("hung_tools");
    let _ = std::fs::remove_dir_all(&tmp);
    let fake = tmp.join("fake-initdb");
    std::fs::create_dir_all(&fake).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A marker argument makes the sleeping child easy to find.
    script(&fake, "initdb", "exec sleep 1001.5");
    script(&fake, "postgres", "echo 'postgres (PostgreSQL) 15.0'");
    let reports = tmp.join("reports");

    // Bounded: the run fails in one line, soon after the bound, and kills the tool.
    let t0 = Instant::now();
    let (out, _) = fenceproof_harness::testkit::run_bounded(
        Command::new(FENCEPROOF)
            .args(["verify", "--only", "A", "--pg-bin"])
            .arg(&fake)
            .arg("--reports-dir")
            .arg(&reports)
            .env("FENCEPROOF_TOOL_TIMEOUT_S", "2"),
        &tmp.join("bounded"),
        Duration::from_secs(60),
    );
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("initdb") && err.contains("timed out"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(30), "took {:?}", t0.elapsed());
    assert_eq!(sleepers("sleep 1001.5"), 0, "the hung initdb was killed");

    ctrl_c_stops_a_hung_initdb(&fake, &reports);

    // pg_basebackup hangs while the real initdb and postgres work: H ends in ERROR, bounded.
    a_hung_pg_basebackup_is_an_error(&tmp, &reports);
}

/// Interruptible: SIGINT while initdb hangs (with the default, long bound) exits 130 at once.
fn ctrl_c_stops_a_hung_initdb(fake: &std::path::Path, reports: &std::path::Path) {
    let mut child = Command::new(FENCEPROOF)
        .args(["verify", "--only", "A", "--pg-bin"])
        .arg(fake)
        .arg("--reports-dir")
        .arg(reports)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while sleepers("sleep 1001.5") == 0 {
        assert!(t0.elapsed() < Duration::from_secs(30), "initdb never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let t1 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t1.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("Ctrl-C did not stop a run hung in initdb");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(130));
    assert_eq!(sleepers("sleep 1001.5"), 0, "nothing left after Ctrl-C");
}

/// pg_basebackup hangs while the real initdb and postgres work: H ends in ERROR, bounded (skipped
/// without real server binaries).
fn a_hung_pg_basebackup_is_an_error(tmp: &std::path::Path, reports: &std::path::Path) {
    let Ok(real) = fenceproof_harness::db::pgbin::PgBin::locate(None) else { return };
    let mixed = tmp.join("fake-basebackup");
    std::fs::create_dir_all(&mixed).unwrap();
    std::fs::set_permissions(&mixed, std::fs::Permissions::from_mode(0o755)).unwrap();
    for tool in ["initdb", "postgres", "pg_ctl", "psql", "pg_controldata"] {
        let src = real.dir.join(tool);
        if src.exists() {
            std::os::unix::fs::symlink(&src, mixed.join(tool)).unwrap();
        }
    }
    script(&mixed, "pg_basebackup", "exec sleep 1002.5");
    let (out, _) = fenceproof_harness::testkit::run_bounded(
        Command::new(FENCEPROOF)
            .args(["verify", "--only", "H-async", "--pg-bin"])
            .arg(&mixed)
            .arg("--reports-dir")
            .arg(reports)
            // The bound also applies to the real initdb here: 20 s, so a loaded machine's initdb
            // (0.7 s unloaded, over 2 s seen in a full `just test`) is not what times out.
            .env("FENCEPROOF_TOOL_TIMEOUT_S", "20"),
        &tmp.join("basebackup"),
        Duration::from_secs(120),
    );
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(3), "{stdout}{stderr}");
    assert!(
        stdout.contains("H-async") && stdout.contains("ERROR") && stdout.contains("pg_basebackup"),
        "{stdout}{stderr}"
    );
    assert_eq!(sleepers("sleep 1002.5"), 0, "the hung pg_basebackup was killed");
}
