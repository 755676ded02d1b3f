//! Experiment H against an external deployment: a primary + standby started separately stand in
//! for the team's own pair, and the contract's [failover] hooks (shell commands) pause replication,
//! fence the primary and promote the standby. The run must pass, report the async loss, log every
//! hook, and leave no schema behind on the promoted server. The URLs carry a password: the hooks
//! get them without it and a 0600 PGPASSFILE, and while the promote hook's psql runs, no command
//! line on the machine shows the password.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fenceproof_harness::db::native::NativeCluster;
use fenceproof_harness::db::pgbin::PgBin;
use fenceproof_harness::db::{databases, Backend};
use fenceproof_harness::wait;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");
const SECRET: &str = "hook-secret-pw";

/// The promote hook: psql on the standby URL in the background (sleeping a moment before it
/// promotes), every command line on the machine written to `cmdlines.txt` meanwhile, and what the
/// hook was given (its URL, the password file's mode and lines) to `hook-env.txt`.
fn promote_hook(dir: &Path, psql: &Path) -> String {
    format!(
        "#!/bin/sh\n{psql} \"$FENCEPROOF_STANDBY_URL\" -Atc 'select pg_sleep(1), pg_promote()' &\n\
         i=0\nuntil tr '\\0' ' ' < /proc/$!/cmdline | grep -q pg_promote || [ $i -gt 1000 ]; do i=$((i+1)); sleep 0.01; done\n\
         {{ tr '\\0' ' ' < /proc/$!/cmdline; echo; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < \"$f\"; echo; done; }} > {d}/cmdlines.txt 2>/dev/null\n\
         echo \"$FENCEPROOF_STANDBY_URL\" > {d}/hook-env.txt\nstat -c %a \"$PGPASSFILE\" >> {d}/hook-env.txt\n\
         wc -l < \"$PGPASSFILE\" >> {d}/hook-env.txt\nwait\n",
        psql = psql.display(),
        d = dir.display()
    )
}

/// What the promote hook wrote: psql ran with no password on its command line (nor did any other
/// process), and the hook got a URL without one and a 0600 password file for both servers.
fn hooks_saw_no_password(dir: &Path) {
    let cmdlines = std::fs::read_to_string(dir.join("cmdlines.txt")).unwrap();
    assert!(cmdlines.contains("select pg_sleep(1), pg_promote()"), "psql was running: {cmdlines}");
    assert!(!cmdlines.contains(SECRET), "a password on a command line: {cmdlines}");
    let env = std::fs::read_to_string(dir.join("hook-env.txt")).unwrap();
    let lines: Vec<&str> = env.lines().collect();
    assert!(lines[0].starts_with("postgres://fenceproof@") && !env.contains(SECRET), "{env}");
    assert_eq!(&lines[1..], ["600", "2"], "a 0600 password file with both servers: {env}");
}

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
    let promote = dir.join("promote.sh");
    std::fs::write(&promote, promote_hook(&dir, &psql)).unwrap();
    let with_pw = |u: String| u.replacen("fenceproof@", &format!("fenceproof:{SECRET}@"), 1);
    let contract = dir.join("contract.toml");
    std::fs::write(
        &contract,
        format!(
            "[database]\nbackend = \"external\"\nurl = \"{}\"\n\n[replication]\nmode = \"async\"\nacknowledged_epochs_survive_failover = false\n\n[failover]\nstandby_url = \"{}\"\npause_replication_command = \"kill -STOP {walsender}\"\nfence_command = \"sh {}\"\npromote_command = \"sh {}\"\n",
            with_pw(primary.url_for("postgres")),
            with_pw(standby.url_for("postgres")),
            fence.display(),
            promote.display()
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
    for h in ["kill -STOP", "fence.sh", "promote.sh"] {
        assert!(hooks.contains(h), "hook {h} not run: {hooks}");
    }
    hooks_saw_no_password(&dir);
    let promoted = databases::pool(&standby.url_for("postgres"), "test-admin", 1).await.unwrap();
    let left: Vec<String> = sqlx::query_scalar("SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'fp\\_%'")
        .fetch_all(&promoted)
        .await
        .unwrap();
    assert!(left.is_empty(), "schemas left on the promoted server: {left:?}");
    promoted.close().await;
}
