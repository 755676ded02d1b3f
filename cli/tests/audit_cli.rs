//! `fenceproof audit` end to end on a real library: procrastinate (installed by scripts/setup.sh
//! into .audit/venv) and the reference protocol as the control, under the stale completion and the
//! kill control. The verdicts come from the tools' ledger and the commit triggers; what is asserted
//! is what those oracles must show for each, and that nothing of the audit is left running.

use std::path::{Path, PathBuf};
use std::process::Command;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn audit(args: &[&str], reports: &Path) -> std::process::Output {
    let python = root().join(".audit/venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run `bash scripts/setup.sh` (it installs the audited libraries)",
        python.display()
    );
    Command::new(FENCEPROOF)
        .arg("audit")
        .args(args)
        .arg("--python")
        .arg(&python)
        .arg("--adapters")
        .arg(root().join("audit/adapters"))
        .arg("--reports-dir")
        .arg(reports)
        .arg("--json")
        .env(MARK, reports)
        .output()
        .unwrap()
}

/// Set on each audit this file runs, so that what it left running is told apart from another
/// audit on the machine (CI's audit lane runs beside the tests).
const MARK: &str = "FENCEPROOF_AUDIT_TEST_RUN";

/// The live processes that inherited this test's mark (`reports`), as their command lines.
fn left_running(reports: &Path) -> Vec<String> {
    let want = format!("{MARK}={}", reports.display());
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(env) = std::fs::read(e.path().join("environ")) else { continue };
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        if stat.contains(") Z ") || !env.split(|b| *b == 0).any(|v| v == want.as_bytes()) {
            continue;
        }
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        found.push(String::from_utf8_lossy(&cmd).replace('\0', " "));
    }
    found
}

fn cell<'a>(cells: &'a [serde_json::Value], lib: &str, exp: &str) -> &'a serde_json::Value {
    cells
        .iter()
        .find(|c| c["library"] == lib && c["experiment"] == exp)
        .unwrap_or_else(|| panic!("no cell {lib}/{exp}"))
}

fn failed(c: &serde_json::Value) -> Vec<String> {
    c["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["verdict"] != "PASS")
        .map(|k| k["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn procrastinate_accepts_a_stale_completion_the_reference_refuses_it() {
    let reports = Path::new(env!("CARGO_TARGET_TMPDIR")).join("audit_cli");
    let out = audit(&["--library", "reference,procrastinate", "--only", "pause-early-success,kill-control"], &reports);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "the control passes and no cell errs\n{stdout}{stderr}");
    let cells: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(cells.len(), 4);

    let stale = cell(&cells, "procrastinate", "pause-early-success");
    assert_eq!(stale["verdict"], "FAIL", "{stale:#}");
    let f = failed(stale);
    assert!(f.iter().any(|n| n.starts_with("no change of the job's state by the stalled worker")), "{f:?}");
    assert!(f.iter().any(|n| n.starts_with("the current worker's own outcome")), "{f:?}");
    assert!(!f.iter().any(|n| n.starts_with("no execution starts")), "one execution each, none concurrent: {f:?}");
    assert!(stale["executions"].as_u64().unwrap() >= 2, "the body ran in A and in B");

    for (lib, exp) in
        [("procrastinate", "kill-control"), ("reference", "pause-early-success"), ("reference", "kill-control")]
    {
        let c = cell(&cells, lib, exp);
        assert_eq!(c["verdict"], "PASS", "{lib}/{exp}: {c:#}");
        assert!(c["executions"].as_u64().unwrap() >= 2, "{lib}/{exp}: B ran the job again after the takeover");
    }
    // The reference's stale worker did try: its refused write is in its own events.
    let dir = std::fs::read_link(reports.join("latest")).map(|l| reports.join(l)).unwrap();
    let events = std::fs::read_to_string(dir.join("reference-pause-early-success/adapter-A.events.jsonl")).unwrap();
    assert!(events.contains("\"lease_lost\""), "A wrote under its old epoch and was refused: {events}");
    for f in ["audit.json", "audit.md", "index.html"] {
        assert!(dir.join(f).is_file(), "{f} written");
    }
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    assert!(
        html.contains("A START") && html.contains("harness hold A") && html.contains("by A"),
        "timeline in the report"
    );
    assert!(
        html.contains("A says written succeeded lease_lost (its own word)"),
        "the refused write, in the worker's own word"
    );
    // Nothing of the audit is left running.
    let left = left_running(&reports);
    assert!(left.is_empty(), "nothing of this audit is left running: {left:?}");
}

#[test]
fn dbos_refuses_the_stale_executor_runs_its_step_twice_and_says_why_retry_does_not_apply() {
    let reports = Path::new(env!("CARGO_TARGET_TMPDIR")).join("audit_cli_dbos");
    let out =
        audit(&["--library", "dbos", "--only", "same-name-early-success,pause-early-retry,held-write-early"], &reports);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let cells: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();
    let restart = cell(&cells, "dbos", "same-name-early-success");
    assert_eq!(restart["verdict"], "PASS", "owner_xid, not the executor name, fences: {restart:#}");
    assert_eq!(restart["executions"], 2, "the interrupted step ran again on recovery: {restart:#}");
    let retry = cell(&cells, "dbos", "pause-early-retry");
    assert_eq!(retry["verdict"], "N/A", "{retry:#}");
    assert!(retry["not_applicable"].as_str().unwrap().contains("no job-level retry"), "{retry:#}");
    // B finishes the recovered workflow from A's recorded step output without running the body:
    // the takeover is read from DBOS's own record, and A's released write is refused.
    let held = cell(&cells, "dbos", "held-write-early");
    assert_eq!(held["verdict"], "PASS", "{held:#}");
    assert!(held["observed"].as_str().unwrap_or("").contains("system's own record"), "{held:#}");
    let dir = std::fs::read_link(reports.join("latest")).map(|l| reports.join(l)).unwrap();
    let summary = std::fs::read_to_string(dir.join("summary.json")).unwrap();
    assert!(summary.contains("\"verdict\": \"N/A\""), "{summary}");
    // Every cell that ran keeps its commits, whatever its verdict (held-write-early had none).
    for exp in ["same-name-early-success", "held-write-early"] {
        let held = cell(&cells, "dbos", exp);
        assert!(
            dir.join(format!("dbos-{exp}/commits.json")).is_file(),
            "{exp} ({}) kept no commits.json",
            held["verdict"]
        );
    }
    let left = left_running(&reports);
    assert!(left.is_empty(), "nothing of this audit is left running: {left:?}");
}

#[test]
fn an_unknown_library_is_one_line_and_exit_2() {
    let reports = Path::new(env!("CARGO_TARGET_TMPDIR")).join("audit_cli_bad");
    let out = audit(&["--library", "sidekiq"], &reports);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("unknown library \"sidekiq\""), "{stderr}");
}

#[test]
fn unknown_settings_or_unreadable_fast_results_are_one_line_and_exit_2() {
    let reports = Path::new(env!("CARGO_TARGET_TMPDIR")).join("audit_cli_bad_settings");
    let missing = reports.join("no-such-summary.json");
    let cases: [(&[&str], &str); 2] = [
        (&["--settings", "slow"], "unknown settings \"slow\"; known: fast, production"),
        (&["--settings", "production", "--fast-results", missing.to_str().unwrap()], "--fast-results"),
    ];
    for (args, says) in cases {
        let out = audit(args, &reports);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// §05's "valid at check, expired at commit": A's completion is held inside the database (the
/// reference's before its lease check, procrastinate's before it touches the job row) while A is
/// paused and B takes over; released, the reference re-checks and refuses, procrastinate commits.
#[test]
fn a_held_completion_released_after_the_takeover_is_refused_by_the_reference_only() {
    let reports = Path::new(env!("CARGO_TARGET_TMPDIR")).join("audit_cli_held");
    let out = audit(&["--library", "reference,procrastinate", "--only", "held-write-early"], &reports);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "the control passes and no cell errs\n{stdout}{stderr}");
    let cells: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();

    let control = cell(&cells, "reference", "held-write-early");
    assert_eq!(control["verdict"], "PASS", "{control:#}");
    assert!(control["observed"].as_str().unwrap().contains("fp_run_transition"), "the held write is the outcome call");
    let stale = cell(&cells, "procrastinate", "held-write-early");
    assert_eq!(stale["verdict"], "FAIL", "{stale:#}");
    let f = failed(stale);
    assert!(f.iter().any(|n| n.starts_with("no change of the job's state by the stalled worker")), "{f:?}");
    assert!(stale["observed"].as_str().unwrap().contains("procrastinate_finish_job"), "{stale:#}");

    let dir = std::fs::read_link(reports.join("latest")).map(|l| reports.join(l)).unwrap();
    let events = std::fs::read_to_string(dir.join("reference-held-write-early/adapter-A.events.jsonl")).unwrap();
    assert!(
        events.contains("\"write\": \"succeeded\", \"outcome\": \"lease_lost\""),
        "A's held write, released after B's acquire, was refused by the lease check: {events}"
    );
    let timeline = std::fs::read_to_string(dir.join("reference-held-write-early/timeline.json")).unwrap();
    let order = |a: &str| timeline.find(a).unwrap_or_else(|| panic!("{a} in the timeline"));
    assert!(order("\"write_held\"") < order("\"takeover\"") && order("\"takeover\"") < order("\"row_release\""));
    let left = left_running(&reports);
    assert!(left.is_empty(), "nothing of this audit is left running: {left:?}");
}

#[test]
fn procrastinates_stale_retry_plays_out_beside_the_current_worker_before_its_end() {
    let reports = Path::new(env!("CARGO_TARGET_TMPDIR")).join("audit_cli_retry");
    let out = audit(&["--library", "procrastinate", "--only", "pause-early-retry", "--jobs", "1"], &reports);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let cells: Vec<serde_json::Value> =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}{stderr}"));
    let c = cell(&cells, "procrastinate", "pause-early-retry");
    assert_eq!(c["verdict"], "FAIL", "{c:#}");
    // A's stale retry re-queued B's run, A ran it again while B still ran, until its attempts were
    // spent and the job failed: B's success, its gate opened only then, never commits.
    let f = failed(c);
    for name in ["no change of the job's state", "no execution starts", "the current worker's own outcome"] {
        assert!(f.iter().any(|n| n.starts_with(name)), "{name}: {f:?}");
    }
    assert!(c["executions"].as_u64().unwrap() >= 3, "{c:#}");
    let note = c["observed"].as_str().unwrap_or("");
    assert!(note.contains("A claimed it first"), "{note}");
    assert!(!note.contains("registration deleted"), "B's start pruned no registration of A: {note}");
    let timeline = c["timeline"].as_array().unwrap();
    let quiet = timeline.iter().position(|e| e["target"] == "quiet_after_retry").expect("the harness waited");
    let gate_b = timeline.iter().position(|e| e["action"] == "open_gate" && e["target"] == "B").unwrap();
    assert!(quiet < gate_b, "B's gate opened after A's retry played out");
    assert!(left_running(&reports).is_empty());
}
