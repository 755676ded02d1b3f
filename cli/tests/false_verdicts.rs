//! FAILs that were not true, each brought back at its moment with a variant of the Python example
//! worker (tests/variants/false_verdicts.py; legal: it keeps every rule), and the row run on it
//! must pass. Each failed
//! before its fix (issue 45):
//! - W-lease, `lease.renew-unexpired`: on a loaded machine the renewal reached the worker after
//!   its 1,200 ms lease had lapsed on the database clock; `lease_lost` was right, the row FAILed.
//!   Here the worker answers its start (or its acquire) 1.3 s after committing it, on that lease.
//! - W-lease, `liveness.legal-step`: the same lapse before the run's start was a "refused legal step".
//! - E-idem-pause, `claim.no-transaction-across-call`: a dispatcher that waits at its
//!   `before_result_write` barrier inside its result-write transaction was blamed for the
//!   reconciler's call (another process), made while it waited.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

fn tmp(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("false_verdicts").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `fenceproof verify --only ROWS` on the variant `name` of tests/variants/false_verdicts.py (the
/// example with its functions overridden by name): it must pass.
fn passes(name: &str, rows: &str) {
    passes_with(name, rows, &[]);
}

/// As [`passes`], with more flags for `verify`.
fn passes_with(name: &str, rows: &str, flags: &[&str]) {
    let dir = tmp(name);
    let worker = fenceproof_harness::testkit::variant_worker("false_verdicts", name, &dir.join("worker"));
    let mut cmd = Command::new(FENCEPROOF);
    cmd.args(["verify", "--only", rows, "--worker-bin"]).arg(&worker).arg("--reports-dir").arg(dir.join("reports"));
    cmd.args(flags);
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, &dir, Duration::from_secs(300));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{name}: {rows} must pass on a legal worker:\n{text}");
    assert!(!text.contains("FAILED"), "{text}");
}

/// The answer to `start` comes 1.3 s after the command committed, on a 1,200 ms lease.
#[test]
fn a_renewal_that_comes_after_a_short_lease_lapsed_is_refused_rightly() {
    passes("slow-start-answer", "W-lease");
}

/// The answer to `acquire` comes 1.3 s after the command committed, on a 1,200 ms lease.
#[test]
fn a_start_that_comes_after_a_short_lease_lapsed_is_no_refused_legal_step() {
    passes("slow-acquire-answer", "W-lease");
}

/// The barrier held inside the result write's transaction is a contract deviation, which
/// conformance names (DEVIATES, `conformance` tests); past the gate, the matrix must not turn it
/// into a FAIL of an unrelated rule.
#[test]
fn a_reconcilers_call_while_a_dispatcher_waits_in_its_transaction_blames_no_one() {
    passes_with("barrier-in-result-transaction", "E-idem-pause", &["--skip-conformance"]);
}
