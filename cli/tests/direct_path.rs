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

/// The direct login holds exactly the privileges docs/worker-protocol.md lists: every statement of
/// the spec's direct path runs, and nothing around it (no DELETE, no new run, no identity column).
#[tokio::test]
async fn the_direct_login_holds_only_the_documented_privileges() {
    use fenceproof_harness::db::databases;
    databases::grant_direct_path(true);
    let tc = fenceproof_harness::testkit::TestCluster::start(fenceproof_harness::test_dir!("direct_path_grants")).await;
    let (url, admin) = tc.fresh_db("test-admin").await;
    let run = fenceproof_protocol::runs::create_run(&admin, "task-grants", serde_json::json!({})).await.unwrap();
    let direct =
        databases::pool(&databases::url_as(&url, databases::DIRECT_LOGIN).unwrap(), "test-direct", 1).await.unwrap();
    let r = run.to_string();
    let allowed = [
        "BEGIN; SELECT owner FROM worker_leases WHERE run_id = '{r}' FOR UPDATE; COMMIT",
        "UPDATE worker_leases SET owner = 'w', epoch = epoch + 1, expires_at = clock_timestamp(), updated_at = clock_timestamp() WHERE run_id = '{r}'",
        "UPDATE agent_runs SET status = 'running', revision = revision + 1, checkpoint = '{}', updated_at = clock_timestamp() WHERE run_id = '{r}'",
        "INSERT INTO tool_operations (operation_id, run_id, step_id, effect_version, tool_name, request_digest, request_body, status) VALUES ('op', '{r}', 's', 1, 'idem', 'd', '{}', 'prepared')",
        "UPDATE tool_operations SET status = 'dispatching', dispatch_owner = 'w', dispatch_until = clock_timestamp(), remote_id = NULL, result = NULL, revision = revision + 1, updated_at = clock_timestamp() WHERE operation_id = 'op'",
    ];
    for sql in allowed {
        let sql = sql.replace("{r}", &r);
        sqlx::raw_sql(&sql).execute(&direct).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let refused = [
        "DELETE FROM tool_operations WHERE operation_id = 'op'",
        "DELETE FROM worker_leases WHERE run_id = '{r}'",
        "INSERT INTO agent_tasks (task_id) VALUES ('other')",
        "INSERT INTO agent_runs (run_id, task_id, status) VALUES (gen_random_uuid(), 'task-grants', 'running')",
        "INSERT INTO worker_leases (run_id) VALUES (gen_random_uuid())",
        "UPDATE agent_runs SET task_id = task_id WHERE run_id = '{r}'",
        "UPDATE agent_tasks SET active_run_id = NULL",
        "UPDATE tool_operations SET request_body = '{}', request_digest = 'x' WHERE operation_id = 'op'",
        "UPDATE worker_leases SET run_id = run_id WHERE run_id = '{r}'",
        "TRUNCATE tool_operations",
    ];
    for sql in refused {
        let sql = sql.replace("{r}", &r);
        let e = sqlx::raw_sql(&sql).execute(&direct).await.expect_err(&sql);
        assert!(e.to_string().contains("permission denied"), "{sql}: {e}");
    }
    direct.close().await;
    admin.close().await;
}
