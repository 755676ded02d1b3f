//! The team's own write path, through every row: both example workers (examples/python-worker and
//! examples/go-worker) on `verify --write-path direct` — their own statements of spec §05, §06 and
//! §09, as the direct login that holds only the table privileges docs/worker-protocol.md lists —
//! keep the contract and pass every row that applies; the rows that probe the fp_* boundary are
//! skipped with one line that names them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

/// The rows the direct path skips: the probes of the fenced functions and the worker role.
const SKIPPED: &[&str] = &["P-role", "P-api-lease", "P-api-commit", "P-api-ledger", "P-api-clock"];

fn tmp(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("direct_path").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `verify --write-path direct` with `worker`: conformance first, then every row but the skipped
/// ones passes; the skip is said once on stderr; the workers' commits were the direct login's.
fn passes_every_applicable_row(worker: &Path, dir: &Path) {
    let mut cmd = Command::new(FENCEPROOF);
    cmd.args(["verify", "--quiet", "--write-path", "direct", "--worker-bin"])
        .arg(worker)
        .arg("--reports-dir")
        .arg(dir.join("reports"));
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, dir, Duration::from_secs(600));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let n = fenceproof_scenarios::all().iter().filter(|e| !e.opt_in() && !SKIPPED.contains(&e.id)).count();
    assert!(stdout.contains(&format!("{n}/{n} experiments passed")), "{stdout}");
    let skip = stderr.lines().find(|l| l.contains("skipped on the direct write path")).unwrap_or_default();
    assert!(SKIPPED.iter().all(|id| skip.contains(id)), "one line names every skipped row: {stderr}");
    assert!(stderr.contains("contract points kept"), "verify ran conformance first: {stderr}");
    let logins = worker_logins(dir);
    assert_eq!(
        logins,
        std::collections::BTreeSet::from([fenceproof_harness::db::databases::DIRECT_LOGIN.to_string()]),
        "every worker commit of A was the direct login's"
    );
}

/// The logins of the workers' commits (not the control plane's) in row A's oracle.
fn worker_logins(dir: &Path) -> std::collections::BTreeSet<String> {
    let run = std::fs::read_dir(dir.join("reports"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("A/oracle.json").is_file())
        .max()
        .expect("a run folder with row A");
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(run.join("A/oracle.json")).unwrap()).unwrap();
    rows.iter()
        .filter(|r| r["writer"].as_str().is_some_and(|w| w.starts_with("worker-")))
        .map(|r| r["login"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn the_python_example_passes_every_applicable_row_on_its_own_statements() {
    let worker = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/python-worker/worker.py");
    passes_every_applicable_row(&worker, &tmp("python"));
}

#[test]
fn the_go_example_passes_every_applicable_row_on_its_own_statements() {
    let dir = tmp("go");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut build = Command::new("bash");
    build.arg(root.join("examples/go-worker/build.sh"));
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut build, &dir.join("build"), Duration::from_secs(300));
    let built = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "build.sh:\n{built}\n{}", String::from_utf8_lossy(&out.stderr));
    let worker = PathBuf::from(built.trim());
    assert!(worker.is_file(), "build.sh printed the binary's path: {built}");
    passes_every_applicable_row(&worker, &dir);
}
