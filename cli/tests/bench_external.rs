//! `fenceproof bench --database-url` against a separately started server standing in for a team's
//! database (another port, a role without superuser): it refuses to load it without consent, gives
//! the goals and a sizing answer naming that server, and leaves nothing in it: no schema, no
//! function, no role of the run.

use std::process::Command;

use fenceproof_harness::db::databases;
use fenceproof_harness::db::native::NativeCluster;
use fenceproof_harness::db::pgbin::PgBin;
use fenceproof_harness::db::Backend;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

/// Everything a run could leave: schemas, functions outside the system schemas, and roles.
async fn inventory(pool: &sqlx::PgPool) -> (Vec<String>, Vec<String>, Vec<String>) {
    let q = |sql: &'static str| async move { sqlx::query_scalar::<_, String>(sql).fetch_all(pool).await.unwrap() };
    let schemas = q("SELECT nspname::text FROM pg_namespace ORDER BY 1").await;
    let functions = q("SELECT p.proname::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                        WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1")
    .await;
    let roles = q("SELECT rolname::text FROM pg_roles ORDER BY 1").await;
    (schemas, functions, roles)
}

#[tokio::test]
async fn bench_sizes_a_teams_database_and_leaves_nothing_in_it() {
    let dir = fenceproof_harness::test_dir!("bench_external");
    std::fs::create_dir_all(&dir).unwrap();
    let bin = PgBin::locate(None).expect("PostgreSQL binaries");
    let server = NativeCluster::start(bin, &dir.join("postgres.log")).await.expect("the team's server starts");
    let admin = databases::pool(&server.url_for("postgres"), "test-admin", 1).await.unwrap();
    // A role without superuser that may create roles: the run creates fenceproof_worker, and must
    // drop it again.
    for sql in [
        "CREATE DATABASE teamdb",
        "CREATE ROLE team LOGIN NOSUPERUSER CREATEROLE PASSWORD 'team-secret-pw'",
        "GRANT CREATE ON DATABASE teamdb TO team",
    ] {
        sqlx::query(sql).execute(&admin).await.unwrap();
    }
    let team_pool = databases::pool(&server.url_for("teamdb"), "test-admin", 1).await.unwrap();
    let before = inventory(&team_pool).await;
    let url = server.url_for("teamdb").replacen("fenceproof@", "team:team-secret-pw@", 1);
    let port = url.split(':').nth(3).and_then(|p| p.split('/').next()).unwrap().to_string();
    let reports = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench_external_reports");

    let bench = |consent: bool| {
        let mut cmd = Command::new(FENCEPROOF);
        cmd.args(["bench", "--database-url", &url, "--duration", "0.3", "--size", "1000", "--json"])
            .args(["--runs", "2000", "--heartbeat-ms", "400", "--max-rate", "3000", "--reports-dir"])
            .arg(&reports);
        if consent {
            cmd.arg("--yes-load-this-database");
        }
        cmd.output().unwrap()
    };
    let refused = bench(false);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("--yes-load-this-database") && err.contains(&format!(":{port}/teamdb")), "{err}");
    assert!(!err.contains("team-secret-pw"), "{err}");

    let out = bench(true);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stderr.contains("dropped role fenceproof_worker, which this run created"), "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let goals = v["goals"].as_array().unwrap();
    assert!(goals.len() >= 5, "the goals: {goals:?}");
    let sizing = v["sizing"].as_str().unwrap();
    println!("{sizing}");
    for part in [
        format!("Server: 127.0.0.1:{port}/teamdb"),
        "PostgreSQL 15".into(),
        "synchronous_commit=on".into(),
        "fsync=".into(),
        "replicas=0".into(),
        "max_connections=".into(),
        "round trip from this load host".into(),
        "the renewal timeout of".into(),
        "2000 active runs at a 400 ms heartbeat need 5000 renewals/s".into(),
    ] {
        assert!(sizing.contains(&part), "{part} not in the sizing answer: {sizing}");
    }
    for p in v["phases"].as_array().unwrap().iter().chain(v["pgbench"].as_array().unwrap()) {
        assert_eq!(p["errors"].as_u64().unwrap_or(0), 0, "{p}");
    }
    assert!(v["pgbench"].as_array().unwrap().iter().any(|p| p["group"] == "neutral-renewal"), "driver-neutral ran");

    let after = inventory(&team_pool).await;
    assert_eq!(after.0, before.0, "schemas left behind");
    assert_eq!(after.1, before.1, "functions left behind");
    assert_eq!(after.2, before.2, "roles left behind (fenceproof_worker was made by the run)");
    team_pool.close().await;
    admin.close().await;
}
