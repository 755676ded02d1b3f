//! Experiment H against an external deployment: a primary + standby started separately stand in
//! for the team's own pair, and the contract's [failover] hooks (shell commands) pause replication,
//! fence the primary and promote the standby. The run must pass, report the async loss, log every
//! hook, and leave no schema or role behind on the promoted server. The URLs carry a password: the hooks
//! get them without it and a 0600 PGPASSFILE, and while the promote hook's psql runs, no command
//! line on the machine shows the password.

use std::path::{Path, PathBuf};
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

/// A team's pair: a primary and its streaming standby (`users_standby`), their folder, and the
/// pid of the primary's walsender that serves the standby.
struct TeamPair {
    dir: PathBuf,
    bin: PgBin,
    primary: NativeCluster,
    standby: NativeCluster,
    walsender: i32,
}

async fn team_pair(name: &str) -> TeamPair {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bin = PgBin::locate(None).expect("PostgreSQL binaries");
    let primary = NativeCluster::start(bin.clone(), &dir.join("users-primary.log")).await.unwrap();
    let standby =
        NativeCluster::start_standby(&primary, "users_standby", &dir.join("users-standby.log")).await.unwrap();
    let admin = databases::pool(&primary.url_for("postgres"), "test-admin", 1).await.unwrap();
    let on_standby = databases::pool(&standby.url_for("postgres"), "test-admin", 1).await.unwrap();
    // The standby's own walsender: once the standby's receiver streams and it is the primary's
    // only walsender (pg_basebackup's, under the same application_name, may still be on its way
    // out while the receiver connects).
    let walsender: i32 = wait::until("the standby's walsender alone", Duration::from_secs(20), || async {
        let receiving: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming')")
                .fetch_one(&on_standby)
                .await?;
        if !receiving {
            return Ok(None);
        }
        Ok(sqlx::query_scalar(
            "SELECT max(pid) FROM pg_stat_replication
              HAVING count(*) = 1 AND bool_and(state = 'streaming' AND application_name = 'users_standby')",
        )
        .fetch_optional(&admin)
        .await?
        .flatten())
    })
    .await
    .unwrap();
    on_standby.close().await;
    admin.close().await;
    TeamPair { dir, bin, primary, standby, walsender }
}

/// The team's hooks: `pause` to pause replication, a kill of the primary's whole tree (after
/// `before_fence`, shell), and the promote hook; the contract that names them, with the password
/// in both URLs.
fn contract_with(pair: &TeamPair, pause: &str, before_fence: &str) -> PathBuf {
    let dir = &pair.dir;
    let postmaster = pair.primary.pid().unwrap().as_raw();
    let fence = dir.join("fence.sh");
    std::fs::write(
        &fence,
        format!(
            "#!/bin/sh\n{before_fence}\nfor p in /proc/[0-9]*; do\n  [ \"$(cut -d' ' -f4 \"$p/stat\" 2>/dev/null)\" = \"{postmaster}\" ] && kill -9 \"${{p#/proc/}}\"\ndone\nkill -9 {postmaster}\n"
        ),
    )
    .unwrap();
    let promote = dir.join("promote.sh");
    std::fs::write(&promote, promote_hook(dir, &pair.bin.tool("psql"))).unwrap();
    let with_pw = |u: String| u.replacen("fenceproof@", &format!("fenceproof:{SECRET}@"), 1);
    let contract = dir.join("contract.toml");
    std::fs::write(
        &contract,
        format!(
            "[database]\nbackend = \"external\"\nurl = \"{}\"\n\n[replication]\nmode = \"async\"\nacknowledged_epochs_survive_failover = false\n\n[failover]\nstandby_url = \"{}\"\npause_replication_command = \"{pause}\"\nfence_command = \"sh {}\"\npromote_command = \"sh {}\"\n",
            with_pw(pair.primary.url_for("postgres")),
            with_pw(pair.standby.url_for("postgres")),
            fence.display(),
            promote.display()
        ),
    )
    .unwrap();
    contract
}

fn verify_h_async(pair: &TeamPair, contract: &Path) -> (Option<i32>, String, String) {
    let out = Command::new(FENCEPROOF)
        .args(["verify", "--contract"])
        .arg(contract)
        .args(["--only", "H-async", "--reports-dir"])
        .arg(pair.dir.join("reports"))
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{stdout}{stderr}");
    (out.status.code(), stdout.into_owned(), stderr.into_owned())
}

#[tokio::test]
async fn h_runs_against_an_external_pair_through_the_contract_hooks() {
    let pair = team_pair("external_failover").await;
    let contract = contract_with(&pair, &format!("kill -STOP {}", pair.walsender), "");
    let (code, stdout, stderr) = verify_h_async(&pair, &contract);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("external backend") && stdout.contains("H-async") && stdout.contains("lost epoch"),
        "{stdout}"
    );
    let hooks = std::fs::read_to_string(pair.dir.join("reports/latest/H-async/hooks.log")).unwrap();
    for h in ["kill -STOP", "fence.sh", "promote.sh"] {
        assert!(hooks.contains(h), "hook {h} not run: {hooks}");
    }
    hooks_saw_no_password(&pair.dir);
    let promoted = databases::pool(&pair.standby.url_for("postgres"), "test-admin", 1).await.unwrap();
    let left: Vec<String> = sqlx::query_scalar("SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'fp\\_%'")
        .fetch_all(&promoted)
        .await
        .unwrap();
    assert!(left.is_empty(), "schemas left on the promoted server: {left:?}");
    let roles: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_roles WHERE rolname = 'fenceproof_worker'")
        .fetch_one(&promoted)
        .await
        .unwrap();
    assert_eq!(roles, 0, "the run's worker role left on the promoted server");
    assert!(!stderr.contains("could not drop"), "{stderr}");
    promoted.close().await;
}

/// A pause hook that pauses nothing: the promoted standby holds every acknowledged commit, so the
/// fault never happened. That is no verdict (ERROR, saying the fault did not take effect), never
/// a FAIL of the worker or the deployment.
#[tokio::test]
async fn a_pause_hook_that_pauses_nothing_is_no_verdict() {
    let pair = team_pair("external_failover_noop").await;
    // The fence waits (bounded) until the standby replayed everything: no lag of its own either.
    let psql = pair.bin.tool("psql");
    let caught_up = format!(
        "i=0; until [ \"$({} \"$FENCEPROOF_PRIMARY_URL\" -Atc 'select coalesce(bool_and(replay_lsn >= pg_current_wal_lsn()), false) from pg_stat_replication')\" = t ] || [ $i -gt 400 ]; do i=$((i+1)); sleep 0.05; done",
        psql.display()
    );
    let contract = contract_with(&pair, "true", &caught_up);
    let (code, stdout, stderr) = verify_h_async(&pair, &contract);
    assert_eq!(code, Some(3), "{stdout}{stderr}");
    assert!(stdout.contains("ERROR") && !stdout.contains("FAIL"), "{stdout}");
    assert!(stdout.contains("the fault did not take effect"), "{stdout}");
}
