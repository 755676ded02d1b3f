//! The worker contract is complete and checked: the Python example worker (written from the
//! contract alone) and the Go example worker (the spec's own code) pass the whole matrix, and
//! `fenceproof conformance` reports each deviation of a variant of the Python one
//! (tests/variants/worker_contract.py, the example's functions overridden by name), one test per
//! deviation, naming what the worker did instead. A worker that prints an event outside the
//! contract's schema gets an ERROR naming the field.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

#[path = "worker_contract/every_point.rs"]
mod every_point;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/python-worker/worker.py")
}

fn tmp(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("worker_contract").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The deviant `name` of tests/variants/worker_contract.py (the example with its functions
/// overridden by name; a function the example no longer has fails the variant, naming it).
fn deviant(name: &str) -> PathBuf {
    fenceproof_harness::testkit::variant_worker("worker_contract", name, &tmp(name))
}

/// `fenceproof conformance --only PROBE` on `worker`: exit code and stdout + stderr.
fn conformance(worker: &Path, probe: &str) -> (Option<i32>, String) {
    // Output goes under the test's own folder, never beside the example in the source tree.
    let dir = &tmp(&format!("conformance-{}", worker.parent().and_then(|p| p.file_name()).unwrap().to_string_lossy()));
    let mut cmd = Command::new(FENCEPROOF);
    cmd.args(["conformance", "--only", probe, "--worker-bin"])
        .arg(worker)
        .arg("--reports-dir")
        .arg(dir.join("reports"));
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, dir, Duration::from_secs(120));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

/// The deviant worker fails conformance (exit 4) with a line containing every one of `want`.
fn deviates(name: &str, probe: &str, want: &[&str]) {
    let w = deviant(name);
    let (code, text) = conformance(&w, probe);
    assert_eq!(code, Some(4), "{name}: conformance must fail (exit 4, the worker deviates):\n{text}");
    let line = text.lines().find(|l| l.contains("DEVIATES") && want.iter().all(|s| l.contains(s)));
    assert!(line.is_some(), "{name}: no deviation line containing {want:?}:\n{text}");
}

/// The deviant worker passes conformance (exit 0) with an advice line containing every one of `want`.
fn advises(name: &str, probe: &str, want: &[&str]) {
    let w = deviant(name);
    let (code, text) = conformance(&w, probe);
    assert_eq!(code, Some(0), "{name}: advice never fails conformance:\n{text}");
    let line = text.lines().find(|l| l.contains("advice") && want.iter().all(|s| l.contains(s)));
    assert!(line.is_some(), "{name}: no advice line containing {want:?}:\n{text}");
}

#[test]
fn the_example_worker_conforms() {
    let (code, text) = conformance(&example(), "flags,lease,barriers,outbox,control,script,sync_rep");
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains(" 0 deviations"), "{text}");
}

/// Apart from the conformance run above, so that the two run side by side (named to start early:
/// the test harness runs tests in name order, and this is the longest).
#[test]
fn a_matrix_run_of_the_example_worker_passes_every_row() {
    passes_every_row(&example(), &tmp("example"));
}

/// The Go example worker (examples/go-worker: pgx v4 and pgxpool, the spec's own SaveCheckpoint and
/// Heartbeat), built offline by its build.sh: it keeps the contract with no deviation and passes
/// every row of the matrix (verify runs conformance first, and stops before the matrix on a deviation).
#[test]
fn a_matrix_run_of_the_go_example_worker_passes_every_row() {
    let dir = tmp("go-example");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut build = Command::new("bash");
    build.arg(root.join("examples/go-worker/build.sh"));
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut build, &dir.join("build"), Duration::from_secs(300));
    let built = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "build.sh:\n{built}\n{}", String::from_utf8_lossy(&out.stderr));
    let worker = PathBuf::from(built.trim());
    assert!(worker.is_file(), "build.sh printed the binary's path: {built}");

    let (code, text) = conformance(&worker, "flags,lease,barriers,outbox,control,script,sync_rep");
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains(" 0 deviations"), "{text}");

    passes_every_row(&worker, &dir);
}

/// `verify` with `worker` runs conformance first, then passes every row of the matrix.
fn passes_every_row(worker: &Path, dir: &Path) {
    let mut cmd = Command::new(FENCEPROOF);
    cmd.args(["verify", "--quiet", "--worker-bin"]).arg(worker).arg("--reports-dir").arg(dir.join("reports"));
    // A whole matrix, Model-paths' few hundred short runs included, on a machine the other tests load.
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, dir, Duration::from_secs(900));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // The default matrix: every row but the opt-in ones.
    let n = fenceproof_scenarios::all().iter().filter(|e| !e.opt_in()).count();
    assert!(stdout.contains(&format!("{n}/{n} experiments passed")), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("conformance:") && stderr.contains("contract points kept"),
        "verify ran conformance first: {stderr}"
    );
}

#[test]
fn acquire_while_held_must_answer_busy() {
    deviates("held", "lease", &["acquire while another term holds the lease answered `held`", "expected `busy`"]);
}

/// The same wrong word, met where the model's paths refuse a takeover (the spare worker's, after
/// the path's grant): Model-paths judges every refusal's word, not only conformance's one probe.
#[test]
fn the_models_paths_judge_a_refused_takeovers_word() {
    let w = deviant("held");
    let dir = tmp("held-paths");
    let mut cmd = Command::new(FENCEPROOF);
    cmd.args(["verify", "--quiet", "--skip-conformance", "--only", "Model-paths", "--worker-bin"])
        .arg(&w)
        .arg("--reports-dir")
        .arg(dir.join("reports"))
        .env(
            "FENCEPROOF_MODEL_PATH",
            "lease=free run=pending op=- other-in-flight=false open=false stale=false | acquire",
        );
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, &dir, Duration::from_secs(240));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "the row must FAIL it (exit 1):\n{text}");
    let run = std::fs::read_dir(dir.join("reports")).unwrap().flatten().find(|e| e.path().is_dir()).unwrap().path();
    let checks: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("Model-paths/checks.json")).unwrap()).unwrap();
    let failed: Vec<&serde_json::Value> =
        checks.as_array().unwrap().iter().filter(|c| c["verdict"] == "FAIL").collect();
    assert_eq!(failed.len(), 1, "only the words' check fails: {failed:?}");
    assert!(failed[0]["name"].as_str().unwrap().contains("refused with the contract's word"), "{failed:?}");
    let evidence = failed[0]["evidence"].as_str().unwrap();
    assert!(evidence.contains("| acquire: `held`") && evidence.contains("busy"), "{evidence}");
}

#[test]
fn scripted_checkpoints_have_the_step_of_shape() {
    deviates("script-shape", "script", &["the scripted checkpoints committed", r#"{"i":1,"n":3}"#]);
}

#[test]
fn a_cancelled_script_must_exit_non_zero() {
    deviates("script-exit", "script", &["after the lease was taken", "exit status Some(0)"]);
}

#[test]
fn the_trace_id_flag_must_be_accepted() {
    let w = deviant("trace-id");
    let (code, text) = conformance(&w, "flags");
    assert_eq!(code, Some(3), "a worker that cannot start is stopped by the preflight, exit 3:\n{text}");
    assert!(text.contains("unrecognized arguments: --trace-id"), "{text}");
}

#[test]
fn list_mutants_junk_is_advice() {
    // Only `mutants` and `schedules` use --list-mutants, so junk there is advice, not a deviation.
    advises("list-mutants", "flags", &["--list-mutants exited", "no mutants here"]);
}

#[test]
fn intent_mismatch_must_be_named_so() {
    deviates(
        "intent-mismatch",
        "outbox",
        &["plan of a step already planned with another request answered `db_error`", "expected `intent_mismatch`"],
    );
}

#[test]
fn operation_not_settled_must_be_named_so() {
    deviates(
        "not-settled",
        "outbox",
        &["advance on an operation not yet succeeded answered `pending`", "expected `operation_not_settled`"],
    );
}

#[test]
fn a_rejected_result_write_must_be_reported_as_write_rejected() {
    deviates("write-rejected", "outbox", &["field /data/0/outcome", "dispatch"]);
}

#[test]
fn plan_must_answer_its_operation_id_in_data() {
    deviates("plan-data", "outbox", &["`plan`", "operation_id"]);
}

#[test]
fn the_before_result_write_barrier_must_hold_the_dispatcher() {
    deviates("result-barrier", "outbox", &["before_result_write", "without waiting on it"]);
}

/// The result-write barrier held inside the transaction that then writes the result (a team's
/// natural shape) is named as a deviation, not left to fail an unrelated rule.
#[test]
fn the_before_result_write_barrier_must_be_held_outside_any_transaction() {
    deviates(
        "result-barrier-in-tx",
        "outbox",
        &["before_result_write", "outside any transaction", "transaction-level lock"],
    );
}

#[test]
fn the_before_commit_barrier_must_hold_the_transaction() {
    deviates("commit-barrier", "barriers", &["barrier at `before_commit` answered `ok` without waiting"]);
}

#[test]
fn create_run_must_create_the_lease_row() {
    deviates("create-run-lease", "control", &["after create_run", "lease row None"]);
}

#[test]
fn create_run_must_accept_an_existing_task() {
    deviates("create-run-task", "control", &["create_run after the cancel answered"]);
}

#[test]
fn cancel_must_cancel_prepared_operations() {
    deviates("cancel-prepared", "control", &["the run's prepared operation is \"prepared\""]);
}

#[test]
fn metrics_must_use_the_label_values_the_rows_read() {
    deviates("metric-labels", "lease", &[r#"lease_renew_total{outcome="lost"} is absent"#]);
}

#[test]
fn a_cancelled_synchronous_wait_must_be_outcome_unknown() {
    deviates("sync-warning", "sync_rep", &["answered `ok`", "expected `outcome_unknown`"]);
}

#[test]
fn foreign_operation_must_be_named_so() {
    deviates(
        "foreign",
        "outbox",
        &["advance on another run's operation answered `not_found`", "expected `foreign_operation`"],
    );
}

#[test]
fn a_detid_reconciler_must_find_the_resource_by_its_name() {
    deviates(
        "detid-name",
        "outbox",
        &["reconcile of the unknown detid operation answered data", "request has no deterministic id"],
    );
}

#[test]
fn reconcile_must_answer_its_three_lists() {
    deviates("reconcile-shape", "outbox", &["`reconcile`", "/data/marked_unknown/0"]);
}

#[test]
fn the_worker_must_create_its_secrets_dir() {
    deviates("secrets-dir", "outbox", &["plan of a new step answered `error`", "No such file"]);
}

#[test]
fn an_event_outside_the_schema_is_an_error_naming_the_field() {
    let w = deviant("bad-event");
    let dir = w.parent().unwrap();
    let (code, text) = conformance(&w, "lease");
    assert_eq!(code, Some(4), "{text}");
    assert!(text.contains("breaks the worker contract (v2) at field /revision"), "{text}");
    let mut cmd = Command::new(FENCEPROOF);
    cmd.args(["verify", "--only", "A", "--skip-conformance", "--worker-bin"])
        .arg(&w)
        .arg("--reports-dir")
        .arg(dir.join("reports-verify"));
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, &dir.join("verify"), Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "an ERROR, not a verdict:\n{stdout}");
    let row = stdout.lines().find(|l| l.starts_with("A ")).unwrap_or_default();
    assert!(row.contains("ERROR"), "{stdout}");
    assert!(stdout.contains("at field /revision"), "the error names the field:\n{stdout}");
}

#[test]
fn an_advisory_point_is_reported_but_does_not_fail() {
    let w = deviant("advice");
    let (code, text) = conformance(&w, "outbox");
    assert_eq!(code, Some(0), "advice never fails conformance:\n{text}");
    assert!(text.lines().any(|l| l.contains("advice") && l.contains("has tool null")), "{text}");
    assert!(text.contains("1 advisory point not kept"), "{text}");
}

#[test]
fn the_heartbeat_must_renew_every_heartbeat_ms() {
    deviates("slow-heartbeat", "lease", &["the lease's expiry did not move within 3 s"]);
}

#[test]
fn a_renewal_must_extend_the_lease_by_ttl_ms() {
    deviates("ttl-units", "lease", &["after a renewal with ttl_ms 60000 the lease had"]);
}

#[test]
fn start_must_move_a_pending_run_only() {
    deviates(
        "start-status",
        "lease",
        // A start that, refused, "starts" a running run again (a restart of an ended one fails on
        // the api path's own status check, so only the running case is in the worker's hands).
        &["start of a run already running answered `ok`", "expected `invalid_state`"],
    );
}

/// On a starved machine A's own renewal can go unconfirmed before the harness loses one; I-renew
/// then makes its setup again with a longer lease rather than a false FAIL. A variant of the example
/// whose first worker ("a", not a retry's "a-try2") renews at once after its acquire and takes that
/// renewal for unconfirmed (before the harness arms its fault) passes I-renew on the second try, and
/// the row's observations say so.
#[test]
fn i_renew_makes_its_setup_again_when_the_workers_own_renewal_lapses_first() {
    let w = deviant("first-worker-lapses");
    let dir = w.parent().unwrap().to_path_buf();
    let mut cmd = Command::new(FENCEPROOF);
    cmd.args(["verify", "--quiet", "--only", "I-renew", "--skip-conformance", "--worker-bin"])
        .arg(&w)
        .arg("--reports-dir")
        .arg(dir.join("reports"));
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, &dir, Duration::from_secs(180));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "I-renew passes on the second try:\n{text}");
    let matrix = std::fs::read_to_string(dir.join("reports/latest/matrix.json")).unwrap();
    let m: serde_json::Value = serde_json::from_str(&matrix).unwrap();
    let obs = m["results"][0]["observations"].as_str().unwrap_or_default();
    assert!(obs.contains("try 1: A's own renewal timed out"), "the first try's lapse is noted: {obs}");
}
