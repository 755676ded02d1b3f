//! The backend against the real Patroni and etcd setup installs: a leader is found, its crash
//! makes the other node a writable leader, and stopping leaves no process and no folder.

use std::time::{Duration, Instant};

use super::*;

fn settings() -> PatroniSettings {
    PatroniSettings {
        synchronous_mode: false,
        synchronous_mode_strict: false,
        synchronous_node_count: 1,
        maximum_lag_on_failover: 1_048_576,
        ttl: 20,
        loop_wait: 2,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_leader_is_replaced_and_nothing_survives_the_stop() {
    let bin = PgBin::locate(None).expect("PostgreSQL binaries");
    let logs = std::env::temp_dir().join(format!("fp-patroni-test-{}", std::process::id()));
    std::fs::create_dir_all(&logs).unwrap();
    let t = Instant::now();
    let mut c = PatroniCluster::start(&bin, &settings(), &logs).await.expect("a Patroni cluster");
    eprintln!("bootstrap: {:.1} s", t.elapsed().as_secs_f64());
    let old = c.leader;
    assert!(c.postmaster(old).is_some() && c.postmaster(1 - old).is_some(), "both postmasters run");
    assert!(takes_a_write(&c.url_for("postgres")).await, "the leader takes writes");
    let killed = c.crash(old);
    assert!(!killed.is_empty());
    let took = c.wait_writable(1 - old, Duration::from_secs(80)).await.expect("a new leader");
    eprintln!("crash -> writable new leader: {:.1} s", took.as_secs_f64());
    assert_eq!(c.find_leader().await, Some(1 - old));
    let root = c.root().to_path_buf();
    assert!(!c.alive().is_empty());
    c.stop();
    let left = wait::until("the cluster's processes to be gone", Duration::from_secs(10), || async {
        Ok(processes_in(&root).is_empty().then_some(()))
    })
    .await;
    assert!(left.is_ok(), "left running: {:?}", processes_in(&root));
    assert!(!root.exists());
    let _ = std::fs::remove_dir_all(&logs);
}
