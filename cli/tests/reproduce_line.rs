//! A failing row's `reproduce:` line, run as printed, reproduces the verdict: it names the worker
//! under test and every flag that shaped the run, so a team re-running it tests their worker, not
//! the reference. The worker is a variant of the Python example with one bug (an operation_id that
//! carries its owner id; conformance finds it too, so the gate is skipped). The line starts with the path the
//! program was invoked by, so it runs as printed; against a team's database it holds the URL
//! without its password and runs with only PGPASSWORD set; after a gate that passed, it skips it.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

/// A fresh scratch folder.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The Python example with one bug: its operation_id carries its owner id (E-idem FAILs); the
/// variant `op-id-owner` of tests/variants/bug_classes.py.
fn broken_worker(dir: &Path) -> std::path::PathBuf {
    fenceproof_harness::testkit::variant_worker("bug_classes", "op-id-owner", dir)
}

/// The names of the checks a run's text says FAILED.
fn failed(t: &str) -> Vec<String> {
    t.lines()
        .filter_map(|l| l.trim().strip_prefix("FAILED "))
        .map(|l| l.split(':').next().unwrap_or_default().to_string())
        .collect()
}

/// `fenceproof verify ...` (or a printed reproduce line run by a shell): exit code and output.
fn run(cmd: &mut Command, dir: &Path) -> (Option<i32>, String) {
    let (out, _) = fenceproof_harness::testkit::run_bounded(cmd, dir, Duration::from_secs(240));
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn a_printed_reproduce_line_gives_the_same_verdict_for_a_worker_that_is_not_ours() {
    let dir = scratch("reproduce_line");
    let worker = broken_worker(&dir);
    let mut first = Command::new(FENCEPROOF);
    first
        .args(["verify", "--quiet", "--skip-conformance", "--barriers", "proxy", "--only", "A,E-idem", "--worker-bin"])
        .arg(&worker)
        .arg("--reports-dir")
        .arg(dir.join("reports-1"));
    let (code, text) = run(&mut first, &dir.join("first"));
    assert_eq!(code, Some(1), "the broken worker FAILs:\n{text}");
    let line = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("reproduce: "))
        .find(|l| l.contains("--only E-idem"))
        .unwrap_or_else(|| panic!("no reproduce line for E-idem:\n{text}"))
        .to_string();
    for flag in ["--worker-bin", "--skip-conformance", "--barriers proxy"] {
        assert!(line.contains(flag), "the reproduce line keeps {flag}: {line}");
    }
    assert!(line.starts_with(&format!("{FENCEPROOF} verify ")), "the path it was invoked by: {line}");

    // Run it as printed, by a shell (its run folder goes to reports/ where it runs).
    let (code2, text2) = run(Command::new("bash").args(["-c", &line]).current_dir(&dir), &dir.join("second"));
    assert_eq!(code2, Some(1), "the reproduce line FAILs the row again:\n{text2}");
    let (a, b) = (failed(&text), failed(&text2));
    assert!(!b.is_empty() && b.iter().all(|c| a.contains(c)), "the same checks fail: first {a:?}, again {b:?}");
    assert!(b.iter().any(|c| c.contains("no operation_id carries an owner id")), "{text2}");
}

/// Write `text` as the server's pg_hba.conf (as the server's own user, through a large object)
/// and reload it.
async fn set_hba(admin: &sqlx::PgPool, text: &str) {
    let file: String = sqlx::query_scalar("SHOW hba_file").fetch_one(admin).await.unwrap();
    let oid: sqlx::postgres::types::Oid = sqlx::query_scalar("SELECT lo_from_bytea(0, convert_to($1, 'UTF8'))")
        .bind(text)
        .fetch_one(admin)
        .await
        .unwrap();
    sqlx::query("SELECT lo_export($1, $2)").bind(oid).bind(&file).execute(admin).await.unwrap();
    sqlx::query("SELECT lo_unlink($1)").bind(oid).execute(admin).await.unwrap();
    sqlx::query("SELECT pg_reload_conf()").execute(admin).await.unwrap();
}

#[tokio::test]
async fn an_external_reproduce_line_runs_with_only_pgpassword_set() {
    use fenceproof_harness::db::databases;
    let dir = scratch("reproduce_line_external");
    let worker = broken_worker(&dir);
    let tc = fenceproof_harness::testkit::TestCluster::start(fenceproof_harness::test_dir!("reproduce_external")).await;
    let admin = databases::pool(&tc.url_for("postgres"), "test-admin", 1).await.unwrap();
    for sql in [
        "CREATE DATABASE teamdb",
        "CREATE ROLE pwapp LOGIN PASSWORD 's3cret'",
        "GRANT CREATE ON DATABASE teamdb TO pwapp",
    ] {
        sqlx::query(sql).execute(&admin).await.unwrap();
    }
    // pwapp must give its password; everyone else keeps the cluster's trust.
    let hba: String =
        sqlx::query_scalar("SELECT pg_read_file(current_setting('hba_file'))").fetch_one(&admin).await.unwrap();
    set_hba(&admin, &format!("local all pwapp scram-sha-256\nhost all pwapp all scram-sha-256\n{hba}")).await;
    let url = tc.url_for("teamdb").replacen("fenceproof@", "pwapp:s3cret@", 1);
    assert!(url.contains("pwapp:s3cret@"), "{url}");

    let mut first = Command::new(FENCEPROOF);
    first
        .args(["verify", "--skip-conformance", "--only", "E-idem", "--database-url", &url, "--worker-bin"])
        .arg(&worker)
        .current_dir(&dir)
        .env_remove("PGPASSWORD");
    let (code, text) = run(&mut first, &dir.join("first"));
    assert_eq!(code, Some(1), "the broken worker FAILs in the team's database:\n{text}");
    let line = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("reproduce: "))
        .find(|l| l.contains("--only E-idem"))
        .unwrap_or_else(|| panic!("no reproduce line:\n{text}"))
        .to_string();
    assert!(!line.contains("s3cret") && !line.contains("***"), "no password, not even masked: {line}");
    assert!(line.contains(&url.replacen("pwapp:s3cret@", "pwapp@", 1)) && line.contains("PGPASSWORD"), "{line}");

    // As printed, with only PGPASSWORD set: the same FAIL.
    let mut again = Command::new("bash");
    again.args(["-c", &line]).current_dir(&dir).env("PGPASSWORD", "s3cret");
    let (code2, text2) = run(&mut again, &dir.join("second"));
    assert_eq!(code2, Some(1), "the line reruns the row:\n{text2}");
    assert_eq!(failed(&text2), failed(&text), "the same checks fail");
    // Without it the server refuses the role: the password really was needed.
    let mut bare = Command::new("bash");
    bare.args(["-c", &line]).current_dir(&dir).env_remove("PGPASSWORD");
    let (code3, text3) = run(&mut bare, &dir.join("third"));
    assert_eq!(code3, Some(3), "{text3}");
    assert!(text3.contains("password"), "{text3}");
    admin.close().await;
}
