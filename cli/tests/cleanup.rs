//! Exit paths of the `fenceproof` binary: Ctrl-C in the middle, a worker killed with -9, the
//! harness itself killed with -9, and bad input. After each, no PostgreSQL server or worker that
//! the run started may still be running.

use fenceproof_harness::testkit::poll;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

/// Processes whose command line contains `needle`, as (pid, command line).
fn processes_with(needle: &str) -> Vec<(i32, String)> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        if pid == std::process::id() as i32 {
            continue;
        }
        let Ok(raw) = std::fs::read(e.path().join("cmdline")) else { continue };
        let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
        if cmd.contains(needle) {
            found.push((pid, cmd));
        }
    }
    found
}

/// Everything a run started from `harness_pid` with reports in `reports`: its cluster (the data
/// folder is /tmp/fenceproof-<pid>-...) and its workers (their events files live in `reports`).
fn leftovers(harness_pid: u32, reports: &Path) -> Vec<(i32, String)> {
    let mut v = processes_with(&format!("fenceproof-{harness_pid}-"));
    v.extend(processes_with(&reports.display().to_string()));
    v
}

fn start(reports: &Path, args: &[&str]) -> Child {
    Command::new(FENCEPROOF)
        .arg("verify")
        .arg("--reports-dir")
        .arg(reports)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_exit(child: &mut Child, timeout: Duration) -> std::process::ExitStatus {
    poll("fenceproof to exit", timeout, || child.try_wait().unwrap())
}

fn reports_dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Wait until worker `a` of the run is up, and return its pid.
fn worker_a(reports: &Path) -> i32 {
    poll("worker a to start", Duration::from_secs(30), || {
        processes_with(&reports.display().to_string())
            .into_iter()
            .find(|(_, c)| c.contains("fenceproof-worker") && c.contains("--owner worker-a-"))
            .map(|(p, _)| p)
    })
}

#[test]
fn ctrl_c_in_the_middle_stops_everything() {
    let reports = reports_dir("cleanup_sigint");
    let mut child = start(&reports, &["--only", "B-sigstop"]);
    worker_a(&reports);
    assert!(!leftovers(child.id(), &reports).is_empty(), "the run's processes are visible while it runs");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let status = wait_exit(&mut child, Duration::from_secs(30));
    assert_eq!(status.code(), Some(130));
    let left = leftovers(child.id(), &reports);
    assert!(left.is_empty(), "left running after Ctrl-C: {left:?}");
    let tmp_left = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with(&format!("fenceproof-{}-", child.id())));
    assert!(!tmp_left, "cluster folder left behind");
    let marked = std::fs::read_dir(&reports)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name() != "latest")
        .filter_map(|e| std::fs::read_to_string(e.path().join("INTERRUPTED")).ok())
        .collect::<Vec<_>>();
    assert_eq!(marked.len(), 1, "the interrupted run folder is marked");
    assert!(marked[0].contains("SIGINT"), "{}", marked[0]);
}

/// Ctrl-C while a worker is partitioned by its proxy (B appears only once A's lease has expired
/// behind the partition): the proxy dies with the harness and nothing is left running.
#[test]
fn ctrl_c_during_a_partition_stops_everything() {
    let reports = reports_dir("cleanup_partition");
    let mut child = start(&reports, &["--only", "J-partition"]);
    worker_a(&reports);
    poll("worker b to start (A is partitioned)", Duration::from_secs(30), || {
        processes_with(&reports.display().to_string())
            .into_iter()
            .find(|(_, c)| c.contains("fenceproof-worker") && c.contains("--owner worker-b-"))
    });
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let status = wait_exit(&mut child, Duration::from_secs(30));
    assert_eq!(status.code(), Some(130));
    let left = leftovers(child.id(), &reports);
    assert!(left.is_empty(), "left running after Ctrl-C during a partition: {left:?}");
}

/// A `--reports-dir` that cannot be made is named in one line (exit 2), and stderr carries no
/// colour codes when it is not a terminal.
#[test]
fn a_bad_reports_dir_is_named_and_stderr_has_no_colour_codes() {
    let reports = reports_dir("cleanup_reports_dir");
    std::fs::create_dir_all(&reports).unwrap();
    let file = reports.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let out = Command::new(FENCEPROOF)
        .env("FENCEPROOF_LOG", "debug")
        .args(["verify", "--only", "A", "--reports-dir"])
        .arg(file.join("sub"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&file.display().to_string()) && err.contains("cannot create"), "{err}");
    // With debug logs on, a real run writes tracing lines to stderr (a pipe here).
    let out = Command::new(FENCEPROOF)
        .env("FENCEPROOF_LOG", "debug")
        .args(["verify", "--only", "P-secret", "--reports-dir"])
        .arg(&reports)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.lines().count() > 5, "debug logging produced lines: {err}");
    assert!(!err.contains('\u{1b}'), "colour codes in a piped stderr: {}", err.lines().next().unwrap_or_default());
}

#[test]
fn a_worker_killed_with_sigkill_ends_the_run_cleanly() {
    let reports = reports_dir("cleanup_worker_kill");
    let mut child = start(&reports, &["--only", "B-sigstop"]);
    let pid = worker_a(&reports);
    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    let status = wait_exit(&mut child, Duration::from_secs(60));
    assert_ne!(status.code(), Some(0), "a run whose worker was killed must not pass");
    assert!(status.code().is_some(), "the harness exited by itself");
    let left = leftovers(child.id(), &reports);
    assert!(left.is_empty(), "left running after a worker was killed: {left:?}");
}

#[test]
fn the_harness_killed_with_sigkill_takes_its_children_along() {
    let reports = reports_dir("cleanup_harness_kill");
    let mut child = start(&reports, &["--only", "B-sigstop"]);
    worker_a(&reports);
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    let _ = child.wait();
    // The parent-death signals reach the server and the workers; they need a moment to exit.
    poll("the run's children to die with the harness", Duration::from_secs(20), || {
        leftovers(child.id(), &reports).is_empty().then_some(())
    });
}

#[test]
fn bad_input_is_a_one_line_error_and_starts_nothing() {
    let reports = reports_dir("cleanup_bad_input");
    for (args, code, says) in [
        (vec!["--only", "Z"], 2, "unknown experiment 'Z'"),
        // An old spelling of a renamed id is a note, not an error; the unknown id beside it is.
        (vec!["--only", "M-paths,Z"], 2, "fenceproof: M-paths is now called Model-paths-db"),
        (vec!["--no-such-flag"], 2, "--no-such-flag"),
        (vec!["--pg-bin", "/nonexistent/pg"], 3, "/nonexistent/pg"),
        (vec!["--worker-bin", "/nonexistent/worker"], 2, "/nonexistent/worker"),
        (vec!["--worker-bin", "/tmp"], 2, "is a folder"),
        (vec!["--database-url", "http://localhost/db"], 2, "postgres:// or postgresql://"),
    ] {
        let mut child = start(&reports, &args);
        let status = wait_exit(&mut child, Duration::from_secs(30));
        let mut err = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: stderr does not name the problem: {err}");
        if code == 3 || args[0] != "--no-such-flag" && args[0] != "--only" {
            assert_eq!(
                fenceproof_harness::testkit::own_lines(&err).trim().lines().count(),
                1,
                "{args:?}: not one line: {err}"
            );
        }
        assert!(leftovers(child.id(), &reports).is_empty());
    }
}

/// Ctrl-C after one row finished: the folder stands alone. `latest` points at it, it is marked
/// INTERRUPTED, and its matrix and index.html hold the row that finished.
#[test]
fn an_interrupted_run_is_latest_with_the_rows_done() {
    let reports = reports_dir("cleanup_interrupted_folder");
    let mut child = start(&reports, &["--only", "A,B-sigstop", "--jobs", "1"]);
    let done = poll("a row to finish", Duration::from_secs(120), || {
        let run = std::fs::read_dir(&reports).ok()?.flatten().find(|e| e.path().is_dir())?.path();
        let row = std::fs::read_dir(&run).ok()?.flatten().find(|e| e.path().join("checks.json").exists())?;
        Some((run, row.file_name().to_string_lossy().into_owned()))
    });
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let status = wait_exit(&mut child, Duration::from_secs(30));
    assert_eq!(status.code(), Some(130), "interrupted before the second row ended");
    let (run, row) = done;
    let latest = std::fs::canonicalize(reports.join("latest")).unwrap();
    assert_eq!(latest, std::fs::canonicalize(&run).unwrap(), "latest moves to the interrupted run");
    assert!(run.join("INTERRUPTED").exists());
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("matrix.json")).unwrap()).unwrap();
    assert!(m["interrupted"].as_str().unwrap().contains("SIGINT"), "{m}");
    let rows: Vec<&str> = m["results"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(rows, vec![row.as_str()], "the row that finished, and only it");
    assert!(["PASS", "FAIL", "ERROR"].contains(&m["results"][0]["verdict"].as_str().unwrap()), "{m}");
    let html = std::fs::read_to_string(run.join("index.html")).unwrap();
    assert!(
        html.contains("INTERRUPTED") && html.contains(&format!("#exp-{row}")),
        "the page shows the row and the mark"
    );
}
