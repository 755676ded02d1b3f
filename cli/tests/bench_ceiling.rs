//! What `bench`'s `--max-rate` would refuse is refused before any load: one line, the usage exit
//! code, without connecting (the URL here leads nowhere, so a run that tried would fail with exit 3
//! instead), instead of after minutes of measuring.

use std::process::Command;
use std::time::{Duration, Instant};

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

#[test]
fn a_sustained_phase_above_the_rate_ceiling_is_refused_up_front() {
    let t0 = Instant::now();
    let out = Command::new(FENCEPROOF)
        .args(["bench", "--database-url", "postgres://nobody@127.0.0.1:1/nodb", "--yes-load-this-database"])
        .args(["--max-rate", "10", "--workers", "4"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(lines[0].contains("would offer") && lines[0].contains("above the ceiling of 10 (--max-rate)"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(20), "refused before any load, not after measuring");
}
