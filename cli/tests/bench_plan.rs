//! `bench plan` + two plain pgbench load hosts + `bench merge`: two `run.sh` processes on this
//! machine stand in for two load hosts, each renewing its own share of the leases; the merged
//! report's total matches the sum of the two hosts' own logs, read here independently. While they
//! run, no process on the machine carries the password on its command line.

use std::path::{Path, PathBuf};
use std::process::Command;

use fenceproof_harness::db::databases;
use fenceproof_harness::db::native::NativeCluster;
use fenceproof_harness::db::pgbin::PgBin;
use fenceproof_harness::db::Backend;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");
const SECRET: &str = "plan-secret-pw";

/// Completed transactions and first/last completion (s) in a host folder's pgbench logs.
fn read_logs(host: &Path) -> (u64, f64, f64) {
    let (mut n, mut first, mut last) = (0, f64::INFINITY, 0.0f64);
    for e in std::fs::read_dir(host.join("log")).unwrap().flatten() {
        for line in std::fs::read_to_string(e.path()).unwrap().lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() >= 6 && f[2].parse::<u64>().is_ok() {
                let t = f[4].parse::<f64>().unwrap() + f[5].parse::<f64>().unwrap() / 1e6;
                n += 1;
                first = first.min(t);
                last = last.max(t);
            }
        }
    }
    (n, first, last)
}

/// Command lines of every process that names `needle`.
fn cmdlines_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            let c = String::from_utf8_lossy(&c).replace('\0', " ");
            if c.contains(needle) {
                found.push(c);
            }
        }
    }
    found
}

#[tokio::test]
async fn two_load_hosts_merge_into_one_report() {
    let dir = fenceproof_harness::test_dir!("bench_plan");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bin = PgBin::locate(None).expect("PostgreSQL binaries");
    let bin_dir = bin.dir.clone();
    let server = NativeCluster::start(bin, &dir.join("postgres.log")).await.expect("server starts");
    let admin = databases::pool(&server.url_for("postgres"), "test-admin", 1).await.unwrap();
    for sql in [
        "CREATE DATABASE teamdb",
        &format!("CREATE ROLE team LOGIN PASSWORD '{SECRET}'"),
        "GRANT CREATE ON DATABASE teamdb TO team",
    ] {
        sqlx::query(sql).execute(&admin).await.unwrap();
    }
    let pgurl = server.url_for("teamdb").replacen("fenceproof@", "team@", 1);
    let with_pw = pgurl.replacen("team@", &format!("team:{SECRET}@"), 1);
    let plan = dir.join("plan");
    make_plan(&plan, &with_pw);
    let written: String = walk(&plan).iter().map(|f| std::fs::read_to_string(f).unwrap_or_default()).collect();
    assert!(!written.contains(SECRET), "the plan holds no password");

    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let env = [("PGURL", pgurl.as_str()), ("PGPASSWORD", SECRET), ("PATH", path.as_str())];
    let psql = |file: &str| {
        let o = Command::new(bin_dir.join("psql"))
            .args(["-q", "-X", "-f"])
            .arg(plan.join(file))
            .arg(&pgurl)
            .envs(env)
            .output()
            .unwrap();
        assert!(o.status.success(), "{file}: {}", String::from_utf8_lossy(&o.stderr));
    };
    psql("setup.sql");
    let hosts: Vec<PathBuf> = ["host-1", "host-2"].iter().map(|h| plan.join(h)).collect();
    run_hosts_watching_the_process_list(&hosts, &env);

    let out = Command::new(FENCEPROOF)
        .args(["bench", "merge", "--json", "--database-url", &pgurl])
        .args(&hosts)
        .env("PGPASSWORD", SECRET)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let m: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let (a, b) = (read_logs(&hosts[0]), read_logs(&hosts[1]));
    assert!(a.0 > 0 && b.0 > 0, "both hosts renewed: {a:?} {b:?}");
    assert_eq!(m["transactions"].as_u64().unwrap(), a.0 + b.0);
    let window = a.2.max(b.2) - a.1.min(b.1);
    let rate = (a.0 + b.0) as f64 * 50.0 / window;
    let merged = m["renewals_per_s"].as_f64().unwrap();
    assert!((merged - rate).abs() < 1e-6 * rate, "merged {merged} vs the logs' {rate}");
    let sizing = m["sizing"].as_str().unwrap();
    println!("{sizing}");
    assert!(sizing.contains("2 of 2 load hosts") && sizing.contains("/teamdb"), "{sizing}");
    assert!(sizing.contains("PostgreSQL 15") && sizing.contains("synchronous_commit=on"), "{sizing}");

    let team = databases::pool(&server.url_for("teamdb"), "test-admin", 1).await.unwrap();
    each_owner_renewed(&team).await;
    psql("teardown.sql");
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'fp_plan_%'")
        .fetch_one(&team)
        .await
        .unwrap();
    assert_eq!(left, 0);
    team.close().await;
    admin.close().await;
}

/// Run every host's run.sh at once; while they run, pgbench is seen and no command line on the
/// machine carries the password.
fn run_hosts_watching_the_process_list(hosts: &[PathBuf], env: &[(&str, &str)]) {
    let mut children: Vec<_> =
        hosts.iter().map(|h| Command::new(h.join("run.sh")).envs(env.iter().copied()).spawn().unwrap()).collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut seen_pgbench = false;
    while std::time::Instant::now() < deadline && children.iter_mut().any(|c| c.try_wait().unwrap().is_none()) {
        seen_pgbench |= !cmdlines_with("renew.sql").is_empty();
        assert!(cmdlines_with(SECRET).is_empty(), "a password on a command line: {:?}", cmdlines_with(SECRET));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for c in &mut children {
        assert!(c.wait().unwrap().success(), "a load host failed");
    }
    assert!(seen_pgbench, "the process list was read while pgbench ran");
}

/// Each host renewed only its own leases (owners plan-w0, plan-w2 for host 1; w1, w3 for host 2),
/// and every owner's fenced renewals wrote.
async fn each_owner_renewed(team: &sqlx::PgPool) {
    // Each host renewed only its own leases: owners plan-w0, plan-w2 for host 1; w1, w3 for host 2.
    let schema: String = sqlx::query_scalar("SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'fp_plan_%'")
        .fetch_one(team)
        .await
        .unwrap();
    // Setup made every lease expire in a day; a fenced renewal sets it to the plan's TTL.
    let renewed: Vec<String> = sqlx::query_scalar(&format!(
        "SELECT DISTINCT owner FROM {schema}.worker_leases WHERE expires_at < now() + interval '1 hour' ORDER BY 1"
    ))
    .fetch_all(team)
    .await
    .unwrap();
    assert_eq!(renewed, ["plan-w0", "plan-w1", "plan-w2", "plan-w3"], "every owner's fenced renewals wrote");
}

/// `bench plan` for two hosts of two clients: 2000 leases every second, 50 per statement, 3 s.
fn make_plan(plan: &Path, url: &str) {
    let out = Command::new(FENCEPROOF)
        .args(["bench", "plan"])
        .arg(plan)
        .args(["--hosts", "2", "--clients", "2", "--runs", "2000", "--heartbeat-ms", "1000"])
        .args(["--renew-batch", "50", "--duration", "3", "--database-url", url])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.path().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}
