//! The spec's own warnings about its statements, caught on the team's write path: a variant of the
//! Python example worker (tests/variants/direct_bug_classes.py, the example's functions overridden
//! by name) whose direct-path SQL (`--write-path direct`: §05's lease UPDATEs, §06's
//! lock-then-validate-then-CAS, §09's claim and result UPDATEs) breaks one warning, run through the
//! row that judges it as the direct login (`verify --write-path direct --skip-conformance`, so the
//! verdict is the matrix's own). Each must end in exit 1 with a FAILED check naming the rule.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

fn tmp(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("direct_bug_classes").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The broken worker through `rows` on the direct path: exit 1, and a FAILED line containing every
/// one of `want`.
fn caught(name: &str, rows: &str, want: &[&str]) {
    let w = fenceproof_harness::testkit::variant_worker("direct_bug_classes", name, &tmp(name));
    let dir = w.parent().unwrap().to_path_buf();
    let mut cmd = Command::new(FENCEPROOF);
    cmd.args(["verify", "--quiet", "--skip-conformance", "--write-path", "direct", "--only", rows, "--worker-bin"])
        .arg(&w)
        .arg("--reports-dir")
        .arg(dir.join("reports"));
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, &dir, Duration::from_secs(240));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{name}: the matrix must FAIL it (exit 1):\n{text}");
    let line = text.lines().find(|l| l.contains("FAILED") && want.iter().all(|s| l.contains(s)));
    assert!(line.is_some(), "{name}: no FAILED line containing {want:?}:\n{text}");
}

/// §03/§06: re-reading the lease before the write is a race between check and commit; the lease
/// row must be locked. D holds A after its check: B's takeover does not wait and A commits after it.
#[test]
fn a_check_then_commit_without_the_row_lock() {
    caught(
        "no-row-lock",
        "D",
        &["B's takeover waits on A's open transaction", "lease.takeover-waits-for-validated-commit"],
    );
}

/// §06: two saves of one epoch carry the same expected revision; without it in the WHERE both commit.
#[test]
fn a_compare_and_set_without_the_revision() {
    caught("cas-no-revision", "C", &["exactly one save commits", "commit.revision-cas"]);
}

/// §05.2: "release: do NOT zero epoch" — a next term would reuse epoch 1, and a stale holder of
/// epoch 1 would pass its check again.
#[test]
fn a_release_that_zeroes_the_epoch() {
    caught("release-zeroes-epoch", "A", &["lease epochs only rise", "lease.release-keeps-epoch"]);
}

/// §05.2: a lost lease cannot be resurrected; a renewal without `expires_at > clock_timestamp()`
/// brings an expired term back to life.
#[test]
fn a_renewal_without_the_expiry_condition() {
    caught(
        "renew-no-expiry",
        "W-lease",
        &["after its lease expired (no takeover), the worker's renewal", "lease.renew-unexpired"],
    );
}

/// §09.2: the dispatcher must confirm the run has no terminal or cancelled state; without the join
/// on agent_runs it dispatches the intent a finished run left prepared.
#[test]
fn a_claim_without_the_run_status_join() {
    caught(
        "claim-no-run-status",
        "W-ledger",
        &["a prepared operation of a finished run is not claimed", "claim.prepared-of-live-runs"],
    );
}

/// §02: owner is not a fencing token. A commit validated on the owner alone lets a restarted host
/// that reuses its id (B-same-owner: one owner id for both terms) write in the newer term.
#[test]
fn a_fence_on_the_owner_alone() {
    caught(
        "fence-on-owner",
        "B-same-owner",
        &["nothing commits while only the stale A acts", "holder.only-current-epoch-writes"],
    );
}

/// §05.1: a takeover is for a free or expired lease. An acquire that looks at the owner alone
/// (anyone else's lease is taken) takes A's live lease: B-sigstop's early acquire must be `busy`.
#[test]
fn a_takeover_on_the_owner_alone() {
    caught(
        "takeover-owner-alone",
        "B-sigstop",
        &["a takeover while A's lease is live is refused", "lease.acquire-free-or-expired"],
    );
}

/// §09.3: a result is written only under the claim (status, dispatch owner, ledger revision). A
/// write keyed on the operation alone lets E-idem-pause's resumed dispatcher overwrite what the
/// reconciler converged. (Dropping only the owner and revision, with `status = 'dispatching'`
/// kept, changes no commit of any legal history: no transition returns a row to dispatching, so
/// no row can tell that variant apart, and none claims to.)
#[test]
fn a_result_write_without_the_claim_conditions() {
    caught(
        "result-on-operation-alone",
        "E-idem-pause",
        &["the resumed dispatcher's stale result write is rejected", "result.claim-owner-revision-digest"],
    );
}

/// §05/§06: `now()` is the transaction's start, not the moment of the check. W-lease holds the
/// lease row across the expiry while a save waits for it: checked against `now()` the expired
/// lease still looks live, and the save commits.
#[test]
fn now_instead_of_clock_timestamp_in_the_protected_transaction() {
    caught(
        "now-not-clock",
        "W-lease",
        &[
            "a save that began while the lease was live but reached its check after expiry",
            "commit.lease-owner-epoch-live",
        ],
    );
}

/// §05.1: a takeover decided on the worker's own clock, written without the expiry condition. The
/// variant module (tests/variants/clock_takeover.py) overrides only the example's `take_lease`. With
/// the database clock behind the workers' (W-clock-behind) it takes a lease live on the database
/// clock: trace validation refuses that commit as the model's takeover guard does, and names the
/// rule (the safety side), not only the row's own check of B's answer.
#[test]
fn a_takeover_decided_on_the_workers_clock() {
    let dir = tmp("clock-takeover");
    let w = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/variants/clock_takeover.py");
    let mut cmd = Command::new(FENCEPROOF);
    cmd.args(["verify", "--quiet", "--skip-conformance", "--write-path", "direct", "--only", "W-clock-behind"])
        .arg("--worker-bin")
        .arg(&w)
        .arg("--reports-dir")
        .arg(dir.join("reports"));
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, &dir, Duration::from_secs(240));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "the matrix must FAIL it (exit 1):\n{text}");
    let run = std::fs::read_dir(dir.join("reports")).unwrap().next().unwrap().unwrap().path();
    let checks: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("W-clock-behind/checks.json")).unwrap()).unwrap();
    let trace = checks
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "every committed change is a step of the protocol's model")
        .expect("trace validation judged the row");
    assert_eq!(trace["verdict"], "FAIL", "{trace}");
    assert_eq!(trace["rules"][0]["id"], "lease.acquire-free-or-expired", "{trace}");
}

/// The same variant driven by the model (Model-paths): where a path leaves the lease expired, two
/// takeovers race for it, the first held right before its write (`before_takeover_write`) while
/// the second takes the lease. The variant decided "expired" before the hold and writes without
/// the expiry condition, so it takes a lease live on the database clock: trace validation and the
/// takeover rule both FAIL it by `lease.acquire-free-or-expired`, with no clock fault at all.
#[test]
fn a_takeover_decided_before_its_write_races_in_the_models_paths() {
    let dir = tmp("clock-takeover-paths");
    let w = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/variants/clock_takeover.py");
    let mut cmd = Command::new(FENCEPROOF);
    cmd.args(["verify", "--quiet", "--skip-conformance", "--write-path", "direct", "--only", "Model-paths"])
        .env("FENCEPROOF_MODEL_PATH", RACED_PATHS.join(","))
        .arg("--worker-bin")
        .arg(&w)
        .arg("--reports-dir")
        .arg(dir.join("reports"));
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, &dir, Duration::from_secs(240));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "the matrix must FAIL it (exit 1):\n{text}");
    let run = std::fs::read_dir(dir.join("reports")).unwrap().next().unwrap().unwrap().path();
    let checks: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("Model-paths/checks.json")).unwrap()).unwrap();
    let failed: Vec<&serde_json::Value> =
        checks.as_array().unwrap().iter().filter(|c| c["verdict"] == "FAIL").collect();
    let trace = failed.iter().find(|c| c["name"] == "every committed change is a step of the protocol's model");
    let trace = trace.unwrap_or_else(|| panic!("trace validation failed it: {failed:?}"));
    assert_eq!(trace["rules"][0]["id"], "lease.acquire-free-or-expired", "{trace}");
    assert!(trace["evidence"].as_str().unwrap().contains("probe"), "the held takeover's commit: {trace}");
    // Under the failing path, one command that replays it alone with this worker.
    let matrix: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("matrix.json")).unwrap()).unwrap();
    let notes = matrix["results"][0]["observations"].as_str().unwrap_or_default();
    let replay = notes.split("replay that path alone: ").nth(1).unwrap_or_default();
    assert!(replay.starts_with("FENCEPROOF_MODEL_PATH='lease=expired"), "{notes}");
    assert!(replay.contains("--only Model-paths") && replay.contains("clock_takeover.py"), "{notes}");
}

/// Paths that leave the lease expired on a run that can still be worked on (the race follows them).
const RACED_PATHS: &[&str] = &[
    "lease=expired run=pending op=- other-in-flight=false open=false stale=false | release",
    "lease=expired run=pending op=- other-in-flight=false open=false stale=false | commit",
];
