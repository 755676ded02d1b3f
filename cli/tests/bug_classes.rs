//! Each class of bug the matrix judges by rule, not by example, caught end to end in a worker that
//! is not ours: the Python example worker with one realistic bug (a variant of
//! tests/variants/bug_classes.py, which overrides the example's functions by name), run through the rows
//! that judge that rule (`verify --skip-conformance`, so the verdict is the matrix's own and not the
//! contract probe's). Each must end in exit 1 with the FAILED check that names the rule.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

fn tmp(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bug_classes").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The example worker with the bug `name`: a variant of tests/variants/bug_classes.py (the
/// example's functions overridden by name), started as `<name>.py`.
fn broken(name: &str) -> PathBuf {
    fenceproof_harness::testkit::variant_worker("bug_classes", name, &tmp(name))
}

/// The broken worker through `rows`: exit 1, and a FAILED line containing every one of `want`.
fn caught(name: &str, rows: &str, want: &[&str]) {
    let w = broken(name);
    let dir = w.parent().unwrap().to_path_buf();
    let mut cmd = Command::new(FENCEPROOF);
    cmd.args(["verify", "--quiet", "--skip-conformance", "--only", rows, "--worker-bin"])
        .arg(&w)
        .arg("--reports-dir")
        .arg(dir.join("reports"));
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, &dir, Duration::from_secs(240));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{name}: the matrix must FAIL it (exit 1):\n{text}");
    // The terminal's line is short (its sentence cut to fit); the check's whole evidence is in
    // matrix.md: the first of `want` names the check on its FAILED line, the rest are found on
    // that line or in that check's whole evidence.
    let line = text.lines().find(|l| l.contains("FAILED") && l.contains(want[0]));
    let line = line.unwrap_or_else(|| panic!("{name}: no FAILED line containing {:?}:\n{text}", want[0]));
    let md = std::fs::read_dir(dir.join("reports"))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("matrix.md")).ok())
        .collect::<String>();
    let whole: Vec<&str> = md.lines().filter(|l| l.starts_with("- [FAIL] ") && l.contains(want[0])).collect();
    for w in &want[1..] {
        assert!(
            line.contains(w) || whole.iter().any(|l| l.contains(w)),
            "{name}: {w:?} neither on {line:?} nor in {whole:?}"
        );
    }
}

#[test]
fn a_5xx_recorded_as_a_final_failure() {
    caught("5xx-failed", "E-no-answer", &["error5xx: the unverified call leaves the operation unknown"]);
}

#[test]
fn a_409_of_the_operations_own_creation_not_taken_as_success() {
    caught("409-own", "E-conflict", &["a 409 carrying the operation's own operation_id is its own creation"]);
}

/// Contract v2: the id's format is the worker's own, so an epoch in an id of any shape is a FAIL of
/// spec §08 (the new term plans the step under another id), not an ERROR on the format.
#[test]
fn an_operation_id_of_another_shape_that_carries_the_epoch() {
    caught(
        "op-id-epoch-own-shape",
        "E-replan",
        &[
            "the new term's plan of the same step and request keeps the operation_id",
            "§02, 08 ids.operation-id-per-intent",
        ],
    );
}

/// An id that names its executor changes on takeover: FAILed in any row that registers an intent.
#[test]
fn an_operation_id_that_carries_the_owner() {
    caught("op-id-owner", "E-idem", &["no operation_id carries an owner id", "ids.operation-id-names-no-executor"]);
}

#[test]
fn an_operation_id_that_changes_with_the_term() {
    caught("op-id-epoch", "E-replan", &["the new term's plan of the same step and request keeps the operation_id"]);
}

#[test]
fn a_digest_over_json_text_instead_of_rfc_8785() {
    caught("digest-text", "E-replan", &["request_digest is SHA-256 of its request body in RFC 8785 canonical JSON"]);
}

#[test]
fn the_planned_checkpoint_and_its_intent_in_two_transactions() {
    caught(
        "plan-two-tx",
        "E-replan",
        &["an intent commits in the transaction that moves its run's checkpoint", "without any intent"],
    );
}

#[test]
fn a_refused_release_answered_ok() {
    caught("release-ok", "B-sigstop", &["every release answered ok released it", "answered ok to"]);
}

#[test]
fn a_cancel_in_two_transactions() {
    caught(
        "cancel-two-tx",
        "F-prepared",
        &["a run's cancel transaction also cancels every operation of it still prepared"],
    );
}

#[test]
fn a_write_that_rereads_the_revision_instead_of_comparing_it() {
    caught("reread", "C", &["a late save naming the raced revision is refused as a conflict"]);
}

#[test]
fn a_secret_store_others_can_read() {
    caught("secrets-0644", "P-secret", &["the secret store grants nothing to group or others"]);
}

/// A masking that walks objects but not arrays leaves a secret inside a list in the ledger: the
/// generated bodies of P-secret (secrets at any depth) catch it.
#[test]
fn a_masking_that_skips_arrays() {
    caught("mask-skips-arrays", "P-secret", &["generated bodies with secrets at any depth", "§12 secrets.masked"]);
}

/// A worker that takes the first 40001 as the answer (no retry of the whole transaction): the
/// server's own 40001 in S-40001 catches it.
#[test]
fn a_serialization_failure_not_retried() {
    caught(
        "no-40001-retry",
        "S-40001",
        &["a write answered 40001 is retried from its start", "serialization.retry-whole"],
    );
}

/// A heartbeat that ends on a zero-row renewal without cancelling the execution: the scripted
/// task goes on to its next checkpoint, which the wire proxy sees after the confirmed loss.
#[test]
fn a_lost_renewal_that_does_not_cancel_the_execution() {
    caught(
        "lost-keeps-running",
        "B-running",
        &["after a renewal answered with zero rows", "lease.confirmed-loss-stops-work"],
    );
}

/// A plan that writes the secret store after the intent that references it commits: only a crash
/// between the two shows it, which E-crash-commit makes (the proxy kills the worker right after the
/// plan's commit); the recovered dispatcher cannot send the request.
#[test]
fn a_secret_stored_after_the_intent_commits() {
    caught(
        "secrets-after-intent",
        "E-crash-commit",
        &["a crash right after an intent commits leaves what it references durable", "crash.references-durable-first"],
    );
}

/// An acquire that hands the database the TTL rounded to whole seconds: every row's TTL but one is
/// a whole number of seconds, so only W-lease's 1,234 ms term shows it.
#[test]
fn a_ttl_rounded_to_whole_seconds() {
    caught("ttl-whole-seconds", "W-lease", &["a 1,234 ms TTL is a term of exactly 1,234 ms", "lease.ttl-milliseconds"]);
}
