//! A team's own Patroni, driven only through its REST API: a cluster this test starts with the
//! harness's Patroni backend stands in for the team's (the contract names its nodes' REST
//! addresses, `backend = "external"` and a database on its leader). Without
//! `--yes-fail-over-this-cluster` the run refuses in one line naming the node it would demote and
//! the one it would promote, and the cluster is untouched; with it, H-patroni-switchover passes,
//! the leader moved to the named candidate, the team's database holds nothing of the run
//! (schemas, functions, roles as before), and the run started no process of its own. Ctrl-C in the
//! middle of the row (before the switchover) exits 130 and leaves nothing in the team's database.

use std::process::Command;

use fenceproof_harness::contract::PatroniSettings;
use fenceproof_harness::db::databases;
use fenceproof_harness::db::patroni::PatroniCluster;
use fenceproof_harness::db::pgbin::PgBin;
use fenceproof_harness::testkit::poll;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::time::Duration;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

/// Schemas, functions outside the system schemas, and roles of the database `pool` is on.
async fn inventory(pool: &sqlx::PgPool) -> (Vec<String>, Vec<String>, Vec<String>) {
    let q = |sql: &'static str| async move { sqlx::query_scalar::<_, String>(sql).fetch_all(pool).await.unwrap() };
    let schemas = q("SELECT nspname::text FROM pg_namespace ORDER BY 1").await;
    let functions = q("SELECT p.proname::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                        WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1")
    .await;
    let roles = q("SELECT rolname::text FROM pg_roles ORDER BY 1").await;
    (schemas, functions, roles)
}

/// The processes working inside a run folder of the harness `pid` (`/tmp/fenceproof-<pid>-…`).
fn started_by(pid: u32) -> Vec<String> {
    let prefix = std::env::temp_dir().join(format!("fenceproof-{pid}-")).display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_link(e.path().join("cwd")).is_ok_and(|c| c.display().to_string().starts_with(&prefix))
        })
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect()
}

fn contract(team_url: &str, rest: &[String]) -> String {
    let rest: Vec<String> = rest.iter().map(|r| format!("\"{r}\"")).collect();
    format!(
        "[database]\nbackend = \"external\"\nurl = \"{team_url}\"\n\n[replication]\nmode = \"async\"\nacknowledged_epochs_survive_failover = false\n\n[failover]\nmanager = \"patroni\"\nsynchronous_mode = false\nrest = [{}]\n",
        rest.join(", ")
    )
}

fn verify(contract: &std::path::Path, reports: &std::path::Path, yes: bool) -> std::process::Child {
    let mut cmd = Command::new(FENCEPROOF);
    cmd.args(["verify", "--only", "H-patroni-switchover", "--contract"])
        .arg(contract)
        .arg("--reports-dir")
        .arg(reports);
    if yes {
        cmd.arg("--yes-fail-over-this-cluster");
    }
    cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap()
}

/// The "team's" cluster, with a database `teamdb` on its leader; the contract naming it; what
/// the database holds before any run.
struct Team {
    dir: std::path::PathBuf,
    cluster: PatroniCluster,
    contract: std::path::PathBuf,
    before: (Vec<String>, Vec<String>, Vec<String>),
}

async fn team(name: &str) -> Team {
    let dir = fenceproof_harness::test_dir!(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bin = PgBin::locate(None).expect("PostgreSQL binaries");
    let settings = PatroniSettings {
        synchronous_mode: false,
        synchronous_mode_strict: false,
        synchronous_node_count: 1,
        maximum_lag_on_failover: 1_048_576,
        ttl: 20,
        loop_wait: 2,
    };
    let cluster = PatroniCluster::start(&bin, &settings, &dir).await.expect("the team's Patroni cluster");
    let admin = databases::pool(&cluster.url_of(cluster.leader, "postgres"), "team-admin", 2).await.unwrap();
    sqlx::query("CREATE DATABASE teamdb").execute(&admin).await.unwrap();
    admin.close().await;
    let before = inventory_on(&cluster, cluster.leader).await;
    let rest: Vec<String> = cluster.nodes.iter().map(|n| format!("http://127.0.0.1:{}", n.rest_port)).collect();
    let path = dir.join("team.toml");
    std::fs::write(&path, contract(&cluster.url_of(cluster.leader, "teamdb"), &rest)).unwrap();
    Team { dir, cluster, contract: path, before }
}

/// [`inventory`] of `teamdb` on node `i`.
async fn inventory_on(cluster: &PatroniCluster, i: usize) -> (Vec<String>, Vec<String>, Vec<String>) {
    let team = databases::pool(&cluster.url_of(i, "teamdb"), "team-admin", 2).await.unwrap();
    let found = inventory(&team).await;
    team.close().await;
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn a_teams_patroni_is_switched_over_only_with_the_flag_and_keeps_nothing_of_the_run() {
    let Team { dir, mut cluster, contract: path, before } = team("patroni_team").await;
    let (leader, replica) = (cluster.leader, 1 - cluster.leader);
    let (leader_name, replica_name) = (cluster.nodes[leader].name.clone(), cluster.nodes[replica].name.clone());

    // Without the flag: one line, exit 2, naming what it would do; nothing done.
    let out = verify(&path, &dir.join("refused"), false).wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("demote the leader {leader_name}")) && err.contains(&format!("promote {replica_name}")),
        "{err}"
    );
    assert!(err.contains("--yes-fail-over-this-cluster"), "{err}");
    assert_eq!(cluster.find_leader().await, Some(leader), "the refused run changed the leader");

    // With it: the switchover row passes and the candidate it named leads.
    let child = verify(&path, &dir.join("run"), true);
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("H-patroni-switchover PASS"), "{text}");
    assert!(text.contains(&format!("demote the leader {leader_name}")), "{text}");
    assert_eq!(cluster.find_leader().await, Some(replica), "{text}");
    assert!(started_by(pid).is_empty(), "the run left processes of its own: {:?}", started_by(pid));

    // Nothing of the run is left in the team's database (read on its new leader).
    assert_eq!(inventory_on(&cluster, replica).await, before, "{text}");
    cluster.stop();
    assert!(cluster.alive().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_during_the_switchover_row_leaves_nothing_in_the_teams_database() {
    let Team { dir, mut cluster, contract: path, before } = team("patroni_team_sigint").await;
    let leader = cluster.leader;
    let mut child = verify(&path, &dir.join("run"), true);
    // SIGINT once the row's schemas exist on the leader (the story is starting).
    let pool = databases::pool(&cluster.url_of(leader, "teamdb"), "team-admin", 2).await.unwrap();
    let started = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'fp\\_%'")
                .fetch_one(&pool)
                .await
                .unwrap();
            if n > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    pool.close().await;
    assert!(started.is_ok(), "the row's schemas never appeared");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let status = poll("fenceproof to exit", Duration::from_secs(60), || child.try_wait().unwrap());
    assert_eq!(status.code(), Some(130));
    assert!(started_by(child.id()).is_empty(), "left running after Ctrl-C: {:?}", started_by(child.id()));
    let now = cluster.find_leader().await.expect("a leader");
    assert_eq!(inventory_on(&cluster, now).await, before, "the run's schemas or role stayed after Ctrl-C");
    cluster.stop();
    assert!(cluster.alive().is_empty());
}
