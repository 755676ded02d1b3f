//! Experiment H against an external deployment: a primary + standby started separately stand in
//! for the team's own pair, and the contract's [failover] hooks (shell commands) pause replication,
//! fence the primary and promote the standby. The run must pass, report the async loss, log every
//! hook, and leave no schema behind on the promoted server.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fenceproof_harness::db::native::NativeCluster;
use fenceproof_harness::db::pgbin::PgBin;
use fenceproof_harness::db::{databases, Backend};
use fenceproof_harness::wait;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

#[tokio::test]
async fn h_runs_against_an_external_pair_through_the_contract_hooks() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("external_failover");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bin = PgBin::locate(None).expect("PostgreSQL binaries");
    let primary = NativeCluster::start(bin.clone(), &dir.join("users-primary.log")).await.unwrap();
    let standby =
        NativeCluster::start_standby(&primary, "users_standby", &dir.join("users-standby.log")).await.unwrap();
    let admin = databases::pool(&primary.url_for("postgres"), "test-admin", 1).await.unwrap();
    let walsender: i32 = wait::until("streaming", Duration::from_secs(20), || async {
        Ok(sqlx::query_scalar("SELECT pid FROM pg_stat_replication WHERE state = 'streaming'")
            .fetch_optional(&admin)
            .await?)
    })
    .await
    .unwrap();
    admin.close().await;

    // The team's hooks: pause replication, kill the primary's whole tree, promote the standby.
    let postmaster = primary.pid().unwrap().as_raw();
    let fence = dir.join("fence.sh");
    std::fs::write(
        &fence,
        format!(
            "#!/bin/sh\nfor p in /proc/[0-9]*; do\n  [ \"$(cut -d' ' -f4 \"$p/stat\" 2>/dev/null)\" = \"{postmaster}\" ] && kill -9 \"${{p#/proc/}}\"\ndone\nkill -9 {postmaster}\n"
        ),
    )
    .unwrap();
    let psql = bin.tool("psql");
    let contract = dir.join("contract.toml");
    std::fs::write(
        &contract,
        format!(
            "[database]\nbackend = \"external\"\nurl = \"{}\"\n\n[replication]\nmode = \"async\"\nacknowledged_epochs_survive_failover = false\n\n[failover]\nstandby_url = \"{}\"\npause_replication_command = \"kill -STOP {walsender}\"\nfence_command = \"sh {}\"\npromote_command = \"{} \\\"$FENCEPROOF_STANDBY_URL\\\" -Atc 'select pg_promote()'\"\n",
            primary.url_for("postgres"),
            standby.url_for("postgres"),
            fence.display(),
            psql.display()
        ),
    )
    .unwrap();

    let out = Command::new(FENCEPROOF)
        .args(["verify", "--contract"])
        .arg(&contract)
        .args(["--only", "H-async", "--reports-dir"])
        .arg(dir.join("reports"))
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{stdout}{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("external backend") && stdout.contains("H-async") && stdout.contains("lost epoch"),
        "{stdout}"
    );
    let hooks = std::fs::read_to_string(dir.join("reports/latest/H-async/hooks.log")).unwrap();
    for h in ["kill -STOP", "fence.sh", "pg_promote"] {
        assert!(hooks.contains(h), "hook {h} not run: {hooks}");
    }
    let promoted = databases::pool(&standby.url_for("postgres"), "test-admin", 1).await.unwrap();
    let left: Vec<String> = sqlx::query_scalar("SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'fp\\_%'")
        .fetch_all(&promoted)
        .await
        .unwrap();
    assert!(left.is_empty(), "schemas left on the promoted server: {left:?}");
    promoted.close().await;
}
