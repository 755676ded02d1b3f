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

const SECRET: &str = "team-secret-pw";

/// Wait for the bench `child`, reading every other process's command line meanwhile: none may
/// carry the password (the bench's own holds it only because this test gives it on the command
/// line; a team gives it in PGPASSWORD). With `load`, pgbench must have been seen. The exit code.
fn watch_process_list(mut child: std::process::Child, load: bool) -> Option<i32> {
    let me = child.id().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
    let mut seen_pgbench = false;
    while child.try_wait().unwrap().is_none() {
        assert!(std::time::Instant::now() < deadline, "the bench did not end within 600 s");
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            if e.file_name().to_string_lossy() == me {
                continue;
            }
            let Ok(c) = std::fs::read(e.path().join("cmdline")) else { continue };
            let c = String::from_utf8_lossy(&c).replace('\0', " ");
            // A child between fork and exec still shows the bench's own command line.
            if c.starts_with(FENCEPROOF) {
                continue;
            }
            seen_pgbench |= c.contains("pgbench-neutral");
            assert!(!c.contains(SECRET), "a password on a command line: {c}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(seen_pgbench || !load, "the process list was read while pgbench ran");
    child.wait().unwrap().code()
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
        let (o, e) = (reports.join("out.json"), reports.join("err.txt"));
        std::fs::create_dir_all(&reports).unwrap();
        cmd.stdout(std::fs::File::create(&o).unwrap()).stderr(std::fs::File::create(&e).unwrap());
        cmd.args(["bench", "--database-url", &url, "--duration", "0.3", "--size", "1000", "--json"])
            .args(["--runs", "2000", "--heartbeat-ms", "400", "--max-rate", "3000", "--reports-dir"])
            .arg(&reports);
        if consent {
            cmd.arg("--yes-load-this-database");
        }
        let code = watch_process_list(cmd.spawn().unwrap(), consent);
        (code, std::fs::read_to_string(o).unwrap(), std::fs::read_to_string(e).unwrap())
    };
    let (code, _, err) = bench(false);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("--yes-load-this-database") && err.contains(&format!(":{port}/teamdb")), "{err}");
    assert!(!err.contains("team-secret-pw"), "{err}");

    let (code, stdout, stderr) = bench(true);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
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

/// `fenceproof cleanup --database-url`: what killed runs left (schemas and a role tagged with a
/// harness pid that is gone, of this host or another) goes; the team's own schema and role stay.
#[tokio::test]
async fn cleanup_removes_what_fenceproof_runs_left_and_nothing_else() {
    let dir = fenceproof_harness::test_dir!("cleanup_external");
    std::fs::create_dir_all(&dir).unwrap();
    let bin = PgBin::locate(None).expect("PostgreSQL binaries");
    let server = NativeCluster::start(bin, &dir.join("postgres.log")).await.expect("server starts");
    let admin = databases::pool(&server.url_for("postgres"), "test-admin", 1).await.unwrap();
    for sql in
        ["CREATE DATABASE teamdb", "CREATE ROLE team LOGIN CREATEROLE", "GRANT CREATE ON DATABASE teamdb TO team"]
    {
        sqlx::query(sql).execute(&admin).await.unwrap();
    }
    let url = server.url_for("teamdb").replacen("fenceproof@", "team@", 1);
    let team = databases::pool(&url, "test-team", 1).await.unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string();
    let dead = format!("fenceproof harness pid=99999999 host={host}");
    for sql in [
        "CREATE SCHEMA fp_killed_here".to_string(),
        format!("COMMENT ON SCHEMA fp_killed_here IS '{dead}'"),
        "CREATE SCHEMA fp_bench_killed_there".into(),
        "COMMENT ON SCHEMA fp_bench_killed_there IS 'fenceproof harness pid=1 host=another-host'".into(),
        "CREATE SCHEMA teams_own".into(),
        "CREATE ROLE fenceproof_worker NOLOGIN".into(),
        format!("COMMENT ON ROLE fenceproof_worker IS '{dead}'"),
        "CREATE ROLE teams_own_role NOLOGIN".into(),
    ] {
        sqlx::query(&sql).execute(&team).await.unwrap();
    }
    let out = Command::new(FENCEPROOF).args(["cleanup", "--database-url", &url]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("dropped 2 schema(s)") && stdout.contains("1 role(s) [fenceproof_worker]"), "{stdout}");
    let (schemas, _, roles) = inventory(&team).await;
    assert!(schemas.contains(&"teams_own".to_string()) && !schemas.iter().any(|s| s.contains("killed")), "{schemas:?}");
    assert!(roles.contains(&"teams_own_role".to_string()) && !roles.contains(&"fenceproof_worker".to_string()));
    team.close().await;
    admin.close().await;
}

/// Ctrl-C in the middle of `bench --database-url`: the run's schema is dropped before it exits.
#[tokio::test]
async fn ctrl_c_drops_the_benchs_schema() {
    let dir = fenceproof_harness::test_dir!("bench_external_sigint");
    std::fs::create_dir_all(&dir).unwrap();
    let bin = PgBin::locate(None).expect("PostgreSQL binaries");
    let server = NativeCluster::start(bin, &dir.join("postgres.log")).await.expect("server starts");
    let admin = databases::pool(&server.url_for("postgres"), "test-admin", 1).await.unwrap();
    for sql in ["CREATE DATABASE teamdb", "CREATE ROLE team LOGIN", "GRANT CREATE ON DATABASE teamdb TO team"] {
        sqlx::query(sql).execute(&admin).await.unwrap();
    }
    let url = server.url_for("teamdb").replacen("fenceproof@", "team@", 1);
    let team = databases::pool(&server.url_for("teamdb"), "test-admin", 1).await.unwrap();
    let mut child = Command::new(FENCEPROOF)
        .args(["bench", "--database-url", &url, "--yes-load-this-database", "--duration", "5", "--reports-dir"])
        .arg(dir.join("reports"))
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("err.txt")).unwrap())
        .spawn()
        .unwrap();
    let count = "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'fp\\_bench\\_%'";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while sqlx::query_scalar::<_, i64>(count).fetch_one(&team).await.unwrap() == 0 {
        assert!(std::time::Instant::now() < deadline, "the bench never made its schema");
        assert!(child.try_wait().unwrap().is_none(), "the bench ended before it made its schema");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // In the middle of the first phases.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let code = child.wait().unwrap().code();
    let err = std::fs::read_to_string(dir.join("err.txt")).unwrap();
    assert_eq!(code, Some(130), "{err}");
    assert_eq!(sqlx::query_scalar::<_, i64>(count).fetch_one(&team).await.unwrap(), 0, "schema left: {err}");
    team.close().await;
    admin.close().await;
}
