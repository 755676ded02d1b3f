//! External database mode: a server the test starts separately stands in for "the user's".
//! `fenceproof verify --database-url` runs A-G inside dedicated schemas of one of its databases
//! as an ordinary role, drops every schema it made afterwards, and refuses a role that may not
//! create schemas with a one-line error.

use std::process::Command;

use fenceproof_harness::db::databases;
use fenceproof_harness::testkit::TestCluster;
use fenceproof_scenarios::experiment::TeamFailover;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

fn verify(url: &str, reports: &std::path::Path) -> (Option<i32>, String, String) {
    let out = Command::new(FENCEPROOF)
        .args(["verify", "--database-url", url, "--reports-dir"])
        .arg(reports)
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// What a SIGKILLed run left: schemas tagged with a harness pid that no longer exists on this host
/// (to be swept and reported), and one of another host (to be left alone).
async fn leave_dead_schemas(url: &str) {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string();
    let app_pool = databases::pool(url, "test-app", 1).await.unwrap();
    for (schema, tag) in [
        ("fp_dead_1", format!("fenceproof harness pid=99999999 host={host}")),
        ("keep_other_host", "fenceproof harness pid=99999999 host=some-other-host".to_string()),
    ] {
        sqlx::query(&format!("CREATE SCHEMA {schema}")).execute(&app_pool).await.unwrap();
        sqlx::query(&format!("COMMENT ON SCHEMA {schema} IS '{tag}'")).execute(&app_pool).await.unwrap();
    }
    app_pool.close().await;
}

#[tokio::test]
async fn experiments_run_inside_an_existing_database_and_leave_nothing() {
    let tc = TestCluster::start(fenceproof_harness::test_dir!("external_db")).await;
    let admin = databases::pool(&tc.url_for("postgres"), "test-admin", 1).await.unwrap();
    for sql in [
        "CREATE DATABASE userdb",
        "CREATE ROLE app LOGIN",
        "CREATE ROLE weak LOGIN",
        "GRANT CREATE ON DATABASE userdb TO app",
    ] {
        sqlx::query(sql).execute(&admin).await.unwrap();
    }
    admin.close().await;
    let user_url = |role: &str| tc.url_for("userdb").replacen("fenceproof@", &format!("{role}@"), 1);
    let user_pool = databases::pool(&tc.url_for("userdb"), "test-admin", 1).await.unwrap();
    sqlx::query("CREATE TABLE public.users_own_table (id int)").execute(&user_pool).await.unwrap();
    let reports = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("external_db_reports");

    leave_dead_schemas(&user_url("app")).await;

    let (code, out, err) = verify(&user_url("app"), &reports);
    println!("{out}{err}");
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(err.contains("dropped 1 schema(s)") && err.contains("fp_dead_1"), "the dead run's schema is swept: {err}");
    let kept: Vec<String> =
        sqlx::query_scalar("SELECT nspname::text FROM pg_namespace WHERE nspname = 'keep_other_host'")
            .fetch_all(&user_pool)
            .await
            .unwrap();
    assert_eq!(kept.len(), 1, "another host's schema is left alone");
    sqlx::query("DROP SCHEMA keep_other_host").execute(&user_pool).await.unwrap();
    assert!(out.contains("external backend") && out.contains("as app on userdb"), "{out}");
    let runs_there =
        |e: &&fenceproof_scenarios::Experiment| !e.opt_in() && e.external_skip(TeamFailover::None).is_none();
    let n = fenceproof_scenarios::all().iter().filter(runs_there).count();
    assert!(out.contains(&format!("{n}/{n} experiments passed")), "every row without a skip reason runs there: {out}");
    let skip = |rows: &str, why: &str| skipped_with(&err, rows, why);
    assert!(
        skip("P-role, P-api-lease", "needs a login in the fenceproof_worker role"),
        "P-role and P-api are skipped with a note: {err}"
    );
    assert!(skip("B-dbfreeze", "freezes the whole database server"), "B-dbfreeze is skipped with a note: {err}");
    assert!(skip("N-restore", "backs up and restores a server of its own"), "N-restore is skipped with a note: {err}");
    assert!(!out.contains("H-async"), "H does not run against an external database");

    let left: Vec<String> = sqlx::query_scalar("SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'fp\\_%'")
        .fetch_all(&user_pool)
        .await
        .unwrap();
    assert!(left.is_empty(), "schemas left behind: {left:?}");
    let public: Vec<String> = sqlx::query_scalar("SELECT tablename::text FROM pg_tables WHERE schemaname = 'public'")
        .fetch_all(&user_pool)
        .await
        .unwrap();
    assert_eq!(public, vec!["users_own_table".to_string()], "the user's own schema is untouched");

    proxy_barriers_hold_a_worker_without_faults(&user_url("app"), &reports);

    let (code, out, err) = verify(&user_url("weak"), &reports);
    assert_eq!(code, Some(3), "{out}{err}");
    let last = err.trim().lines().last().unwrap_or_default();
    assert!(
        last.starts_with("fenceproof: role weak") && last.contains("GRANT CREATE ON DATABASE userdb TO weak"),
        "the error is one line naming the fix: {err}"
    );
    let (code, _, err) = verify("postgres://nobody@127.0.0.1:1/none", &reports);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("cannot connect"), "{err}");
    user_pool.close().await;
}

/// A worker that does not implement the `faults` field (the reference with it switched off), on
/// the direct write path a team's own role has: C and D hold its transactions through the proxy
/// alone, D right after the lease row is locked and checked.
fn proxy_barriers_hold_a_worker_without_faults(url: &str, reports: &std::path::Path) {
    let out = Command::new(FENCEPROOF)
        .args(["verify", "--database-url", url, "--only", "C,D", "--barriers", "proxy", "--reports-dir"])
        .arg(reports)
        .env("FENCEPROOF_IGNORE_FAULTS", "1")
        .output()
        .unwrap();
    let (o, e) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{o}{e}");
    assert!(o.contains("2 saves held (proxy connection"), "C held both saves in the proxy: {o}");
    assert!(o.contains("B blocked by it"), "D held A after its lease check and B waited on it: {o}");
}

/// Whether `err` has the line that skips `rows` against --database-url for reason `why`.
fn skipped_with(err: &str, rows: &str, why: &str) -> bool {
    err.lines()
        .any(|l| l.starts_with("fenceproof: skipped against --database-url: ") && l.contains(rows) && l.contains(why))
}

/// Two runs at once against one database (parallel CI jobs against one staging database): every
/// schema, barrier key and file of a run is its own, so both pass, and nothing of either is left.
/// Rows C, D, E, F and G hold barriers on advisory locks, which are per database.
#[tokio::test]
async fn two_runs_at_once_against_one_database_both_pass() {
    let tc = TestCluster::start(fenceproof_harness::test_dir!("external_db_twice")).await;
    let admin = databases::pool(&tc.url_for("postgres"), "test-admin", 1).await.unwrap();
    for sql in ["CREATE DATABASE shareddb", "CREATE ROLE ci LOGIN", "GRANT CREATE ON DATABASE shareddb TO ci"] {
        sqlx::query(sql).execute(&admin).await.unwrap();
    }
    admin.close().await;
    let url = tc.url_for("shareddb").replacen("fenceproof@", "ci@", 1);
    let reports = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("external_db_twice_reports");
    let run = |n: &'static str| {
        let (url, dir) = (url.clone(), reports.join(n));
        std::thread::spawn(move || {
            let mut cmd = Command::new(FENCEPROOF);
            cmd.args([
                "verify",
                "--quiet",
                "--database-url",
                &url,
                "--only",
                "C,D,E,F,G",
                "--jobs",
                "2",
                "--reports-dir",
            ])
            .arg(dir.join("reports"));
            let (out, _) =
                fenceproof_harness::testkit::run_bounded(&mut cmd, &dir, std::time::Duration::from_secs(300));
            (
                out.status.code(),
                format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
            )
        })
    };
    let (one, two) = (run("one"), run("two"));
    let picked: Vec<String> = ["C", "D", "E", "F", "G"].iter().map(|s| s.to_string()).collect();
    let n = fenceproof_scenarios::select(Some(&picked))
        .unwrap()
        .iter()
        .filter(|e| e.external_skip(TeamFailover::None).is_none())
        .count();
    for (name, handle) in [("one", one), ("two", two)] {
        let (code, text) = handle.join().unwrap();
        assert_eq!(code, Some(0), "run {name} passes beside the other:\n{text}");
        assert!(text.contains(&format!("{n}/{n} experiments passed")), "run {name}:\n{text}");
    }
    let pool = databases::pool(&tc.url_for("shareddb"), "test-admin", 1).await.unwrap();
    let left: Vec<String> = sqlx::query_scalar("SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'fp\\_%'")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert!(left.is_empty(), "schemas left behind: {left:?}");
    pool.close().await;
}
