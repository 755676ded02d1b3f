//! A broken subject for every conformance point: each deviant worker of
//! tests/variants/deviants.py (the Python example with named methods overridden, chosen by the
//! name it is started under) breaks one point, and `fenceproof conformance --only <its probe>`
//! must report that point's line and no other of the probe's. The points no worker can break
//! alone on the path conformance gives it are listed with the reason, as data; a point of the
//! example's report that is in neither list fails the walk, so a new point needs its subject.
//!
//! Each deviant runs its own probe only (each probe runs on a fresh database of its own, so the
//! other probes cannot see a deviation of this one's commands).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

/// A deviant: its name in deviants.py's VARIANTS, the probe it runs, the one point it breaks, and
/// the advisory points it cannot help breaking too (each with why), if any.
struct Deviant {
    name: &'static str,
    probe: &'static str,
    breaks: &'static str,
    also: &'static [&'static str],
}

const fn d(name: &'static str, probe: &'static str, breaks: &'static str) -> Deviant {
    Deviant { name, probe, breaks, also: &[] }
}

const DEVIANTS: &[Deviant] = &[
    // flags
    d("ready-not-ok", "flags", "the worker starts with the flags the harness passes and says `ready`"),
    d("metrics-refused", "flags", "metrics answers `ok`"),
    d(
        "list-unformatted",
        "flags",
        "--list-mutants prints `name<TAB>rule` lines and exits 0, or exits non-zero when the build has none",
    ),
    // The point's other deviation, a program that cannot be started, cannot be had alone: the
    // preflight starts the same program first and stops conformance (exit 3).
    d("list-slow", "flags", "--list-mutants ends promptly"),
    // lease
    d("dies-mid-probe", "lease", "the probe runs to its end"),
    d("acquire-free-busy", "lease", "acquire of a free lease answers `ok`"),
    d("answer-named-otherwise", "lease", "an answer is named after its command (`\"event\": \"acquire\"`)"),
    d("epoch-off-by-one", "lease", "an ok acquire names the lease's epoch (1 for a new run)"),
    d("late-first-renewal", "lease", "the heartbeat renews the lease every heartbeat_ms (150 ms here)"),
    d("half-ttl-renewal", "lease", "a renewal sets the expiry ttl_ms past the database's clock"),
    d("held-answers-held", "lease", "acquire while another term holds the lease answers `busy`"),
    d("missing-answers-missing", "lease", "acquire of a run that does not exist answers `not_found`"),
    d("start-answers-invalid", "lease", "start of a pending run answers `ok`"),
    d("save-answers-conflict", "lease", "save without expected_revision (the last revision the worker knows) answers `ok`"),
    d("checkpoint-amended", "lease", "start and save each commit one revision, the checkpoint exactly as sent"),
    d(
        "other-application-name",
        "lease",
        "the worker connects with application_name = its owner id (the oracle tells writers apart by it)",
    ),
    d("stale-save-invalid", "lease", "save naming a revision that is not current answers `conflict`"),
    d("current-save-conflict", "lease", "save naming the current revision answers `ok`"),
    d("refusal-called-unconfirmed", "lease", "a refused renewal is reported as `heartbeat_lost` (outcome `lease_lost`)"),
    d("no-cancellation-event", "lease", "`execution_cancelled` follows a lost or unconfirmed renewal"),
    d("lost-save-conflict", "lease", "save after the lease was taken (the worker keeps obeying) answers `lease_lost`"),
    d("lost-renew-unknown", "lease", "renew after the lease was taken answers `lease_lost`"),
    d("lost-succeed-invalid", "lease", "succeed after the lease was taken answers `lease_lost`"),
    d("lost-release-not-found", "lease", "release after the lease was taken answers `lease_lost`"),
    d("uncounted-renew-lost", "lease", "metrics count a refused renewal in lease_renew_total{outcome=\"lost\"}"),
    d(
        "uncounted-write-lease",
        "lease",
        "metrics count a write refused for the lease in protected_write_rejected_total{reason=\"lease\"}",
    ),
    d("second-acquire-busy", "lease", "acquire of a second run answers `ok`"),
    d("pending-save-conflict", "lease", "save of a run still pending (never started) answers `invalid_state`"),
    d("pending-succeed-conflict", "lease", "succeed of a run still pending answers `invalid_state`"),
    d("running-start-conflict", "lease", "start of a run already running answers `invalid_state`"),
    d("succeed-answers-conflict", "lease", "succeed of a running run answers `ok`"),
    d("succeed-answers-early", "lease", "succeed moves the run to `succeeded`"),
    d("ended-save-conflict", "lease", "save on an ended run answers `invalid_state`"),
    d("ended-start-conflict", "lease", "start of an ended run answers `invalid_state`"),
    d(
        "uncounted-write-state",
        "lease",
        "metrics count a write refused for the run's status in protected_write_rejected_total{reason=\"state\"}",
    ),
    d("release-answers-lost", "lease", "release of a held lease answers `ok`"),
    d("release-keeps-lease", "lease", "release frees the lease and keeps its epoch"),
    d("fail-answers-invalid", "lease", "fail of a running run answers `ok`"),
    d("fail-answers-early", "lease", "fail moves the run to `failed`"),
    d("exit-answers-error", "lease", "exit answers `ok`"),
    d("exit-status-3", "lease", "exit ends the process with status 0"),
    // barriers
    d("skips-after-begin", "barriers", "a save armed at `after_begin` waits there inside the database"),
    d(
        "skips-after-lease-validated",
        "barriers",
        "a save armed at `after_lease_validated` waits there inside the database",
    ),
    d("skips-before-commit", "barriers", "a save armed at `before_commit` waits there inside the database"),
    d("locks-lease-before-begin-point", "barriers", "at `after_begin` the lease row is not locked yet"),
    d("validated-point-early", "barriers", "at `after_lease_validated` the lease row is locked and validated"),
    d("commit-point-before-update", "barriers", "at `before_commit` the run row is already updated (uncommitted)"),
    d("rolls-back-after-begin", "barriers", "the save held at `after_begin` commits once released"),
    d("rolls-back-after-lease-validated", "barriers", "the save held at `after_lease_validated` commits once released"),
    d("rolls-back-before-commit", "barriers", "the save held at `before_commit` commits once released"),
    // outbox
    d("plan-refused", "outbox", "plan of a new step answers `ok`"),
    d(
        "effect-version-two",
        "outbox",
        "plan answers the operation_id under which the intent (run, step, effect_version 1) is registered",
    ),
    d("owner-in-operation-id", "outbox", "the operation_id does not carry the owner id"),
    d(
        "stored-body-amended",
        "outbox",
        "the plan registers the intent `prepared` with the secret replaced by its reference",
    ),
    d(
        "sorted-keys-digest",
        "outbox",
        "request_digest is SHA-256 (hex) of the registered request body in RFC 8785 canonical JSON",
    ),
    d("secrets-elsewhere", "outbox", "the worker creates --secrets-dir and keeps the secret there"),
    d("replan-conflict", "outbox", "plan of a step already planned with another request answers `intent_mismatch`"),
    Deviant {
        name: "result-write-in-transaction",
        probe: "outbox",
        breaks: "`before_result_write` is held outside any transaction",
        // The probe stops judging the dispatch there, so the claim is never moved and the
        // reconciler has nothing to converge: its advisory report of the convergence is empty.
        also: &["reconcile reports what it converged in data.converged as [operation_id, status] pairs"],
    },
    d(
        "secret-not-put-back",
        "outbox",
        "at `before_result_write` the remote call has been made, with the secret put back",
    ),
    d(
        "rejection-called-unknown",
        "outbox",
        "a result write refused because the claim moved on is reported as `write_rejected` in dispatch's data",
    ),
    Deviant {
        name: "settles-what-it-lost",
        probe: "outbox",
        breaks: "the refused result write left the ledger row as the claim's new holder made it",
        // Settled by the dispatcher, the operation is no longer unknown: the reconciler that
        // follows converges nothing and reports nothing converged (advice).
        also: &["reconcile reports what it converged in data.converged as [operation_id, status] pairs"],
    },
    d(
        "converges-after-answer",
        "outbox",
        "reconcile retries an unknown idempotent operation with its operation_id and converges it to succeeded",
    ),
    d(
        "converged-as-objects",
        "outbox",
        "reconcile reports what it converged in data.converged as [operation_id, status] pairs",
    ),
    d("creates-again", "outbox", "the retry created nothing new remotely"),
    d("advance-own-unsettled", "outbox", "advance on the run's own succeeded operation answers `ok`"),
    d("advance-foreign-not-found", "outbox", "advance on another run's operation answers `foreign_operation`"),
    d("advance-unsettled-foreign", "outbox", "advance on an operation not yet succeeded answers `operation_not_settled`"),
    d(
        "dispatch-success-unknown",
        "outbox",
        "dispatch answers one data entry per claimed operation: its operation_id and outcome",
    ),
    d("dispatch-no-tool", "outbox", "a dispatch entry names the operation's tool"),
    d("marked-unreported", "outbox", "reconcile moves an expired claim to unknown and reports it in data.marked_unknown"),
    d(
        "detid-converges-after-answer",
        "outbox",
        "reconcile finds a deterministic-id resource by the request's `name` and converges the operation",
    ),
    d("detid-converged-unreported", "outbox", "reconcile reports the converged detid operation in data.converged"),
    d("detid-created-again", "outbox", "the detid resource exists once"),
    // control
    d("create-run-refused", "control", "create_run of a new task answers `ok`"),
    d(
        "lease-row-epoch-one",
        "control",
        "create_run makes the task, a `pending` run and a free lease row (epoch 0), the run the task's active one",
    ),
    d("lease-row-second-transaction", "control", "create_run writes task, run and lease in one transaction"),
    d("live-answers-invalid", "control", "create_run while the task's active run is live answers `active_run_live`"),
    d("cancel-refused", "control", "cancel of a running run answers `ok`"),
    d("cancel-fails-run", "control", "cancel moves the run to `cancelled`"),
    d("cancel-older-revision", "control", "cancel answers the run's new revision in data.revision"),
    d("cancel-keeps-operations", "control", "cancel also cancels the run's operations still `prepared`"),
    d("ended-cancel-not-found", "control", "cancel of an ended run answers `invalid_state`"),
    d(
        "create-run-first-id",
        "control",
        "create_run of a task whose run has ended (the task exists) creates a new run with a new run_id",
    ),
    // script
    d("script-done-exit-3", "script", "a scripted task run to its end says `script_end` `ok` and exits 0"),
    d(
        "script-first-extra",
        "script",
        "scripted mode saves the checkpoints {\"step\": i, \"of\": N} in order, one commit each",
    ),
    d(
        "script-no-release",
        "script",
        "scripted mode starts, saves, succeeds and releases: the run ends `succeeded` at revision N + 2, the lease free",
    ),
    d(
        "script-stopped-exit-0",
        "script",
        "after its execution is cancelled a scripted worker says `script_end` `stopped` and exits non-zero",
    ),
    d("script-idle", "script", "the scripted task saves its first checkpoint"),
    // sync_rep
    d(
        "ignores-commit-warning",
        "sync_rep",
        "a save whose synchronous-replication wait was cancelled (success with a WARNING) answers `outcome_unknown`",
    ),
];

/// Points no deviant breaks alone, and why (each a fact of the probe or of the fp_* path, the
/// `--write-path api` conformance runs the deviants on: the worker's login may call the fp_*
/// functions and nothing else that writes). On `--write-path direct` a worker writes its own
/// statements, so several of these could have a deviant there; that walk is not written yet.
const UNBREAKABLE: &[(&str, &str)] = &[
    (
        "create_run answers data.run_id",
        "the contract's JSON Schema requires data.run_id of an ok create_run: a worker without it breaks the schema first, and that stops the probe (`the probe runs to its end`)",
    ),
    (
        "create_run while the task's active run is live is refused",
        "a create_run that is not refused answers `ok`, which breaks the advisory point on its outcome (`active_run_live`) too",
    ),
    (
        "an ended run stays ended",
        "only start and save are sent to the ended run, and fp_run_transition refuses both on an ended run; to change the status a worker must succeed first, which breaks `succeed moves the run to succeeded` too",
    ),
    (
        "at `before_commit` the lease row is locked and validated",
        "fp_run_transition locks the lease row before it updates the run row, in one call: on the fp_* path no save can hold before_commit with the run row updated and the lease row free",
    ),
    (
        "at `after_begin` the run row is not updated yet",
        "the worker's login can lock or update the run row only through fp_run_transition, which locks the lease row first: the run row cannot be locked at after_begin with the lease row free",
    ),
    (
        "a dispatch armed at `before_result_write` waits there inside the database",
        "a dispatch that does not wait writes its result before the probe moves the claim on, so the ledger row is `succeeded`, not `unknown`, and `the refused result write left the ledger row...` is broken too",
    ),
    (
        "a cancelled scripted worker writes nothing terminal (the run stays `running`, the new term keeps its lease)",
        "on the fp_* path every write of a worker whose lease was taken is refused by the database (owner and epoch are checked in fp_run_transition and fp_lease_release), so no worker can make that write",
    ),
];

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

/// The rules of `conformance --json` whose point was not kept (deviation or advice), and every
/// rule it listed.
fn run(worker: &Path, probe: &str, dir: &Path) -> (BTreeSet<String>, BTreeSet<String>, String) {
    let mut cmd = Command::new(FENCEPROOF);
    cmd.args(["conformance", "--json", "--only", probe, "--worker-bin"])
        .arg(worker)
        .arg("--reports-dir")
        .arg(dir.join("reports"));
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, dir, Duration::from_secs(180));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let text = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    let points = report["points"].as_array().cloned().unwrap_or_default();
    let rule = |p: &Value| p["rule"].as_str().unwrap_or_default().to_string();
    let broken = points.iter().filter(|p| !p["deviation"].is_null()).map(rule).collect();
    (broken, points.iter().map(rule).collect(), text)
}

/// A deviant worker: `<name>.py`, a link to deviants.py (which picks its variant by that name).
fn link(name: &str, dir: &Path) -> PathBuf {
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/variants/deviants.py");
    let p = dir.join(format!("{name}.py"));
    std::os::unix::fs::symlink(target, &p).unwrap();
    p
}

/// Whether deviant `d` breaks its point and nothing else but its listed advice: an error when not.
fn judge(d: &Deviant, root: &Path) -> Result<(), String> {
    let dir = root.join(d.name);
    std::fs::create_dir_all(&dir).unwrap();
    let (broken, _, text) = run(&link(d.name, &dir), d.probe, &dir);
    let want: BTreeSet<String> = std::iter::once(d.breaks).chain(d.also.iter().copied()).map(String::from).collect();
    if broken == want {
        Ok(())
    } else {
        Err(format!("{} ({}): broke {broken:?}, expected {want:?}\n{text}", d.name, d.probe))
    }
}

#[test]
fn every_conformance_point_has_a_deviant_that_breaks_it_alone() {
    let root = super::tmp("every-point");
    // Every rule the example's report lists has a deviant or a reason.
    let probes = "flags,lease,barriers,outbox,control,script,sync_rep";
    let (broken, listed, text) = run(&super::example(), probes, &root.join("example"));
    assert!(broken.is_empty() && !listed.is_empty(), "the example keeps every point:\n{text}");
    let covered: BTreeSet<&str> =
        DEVIANTS.iter().map(|d| d.breaks).chain(UNBREAKABLE.iter().map(|(r, _)| *r)).collect();
    let bare: Vec<&String> = listed.iter().filter(|r| !covered.contains(r.as_str())).collect();
    assert!(bare.is_empty(), "points with no deviant and no reason: {bare:?}");
    let dup = DEVIANTS.iter().filter(|d| UNBREAKABLE.iter().any(|(r, _)| *r == d.breaks)).count();
    assert_eq!(dup, 0, "a point is either broken by a deviant or listed as unbreakable");

    // Two at a time: each conformance run starts a cluster of its own.
    // FENCEPROOF_DEVIANTS=a,b walks only those (while working on one).
    let only = std::env::var("FENCEPROOF_DEVIANTS").ok();
    let chosen: Vec<&Deviant> =
        DEVIANTS.iter().filter(|d| only.as_deref().is_none_or(|o| o.split(',').any(|n| n == d.name))).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some(d) = chosen.get(i) else { break };
                if let Err(e) = judge(d, &root) {
                    failures.lock().unwrap().push(e);
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{} of {} deviants:\n{}", failures.len(), chosen.len(), failures.join("\n\n"));
}
