//! The reference protocol's rules, each checked against a real PostgreSQL (one cluster for the
//! file, a fresh database per rule).

use std::time::Duration;

use fenceproof_harness::testkit::TestCluster;
use fenceproof_harness::wait;
use fenceproof_protocol::commit::{confirm_transition, ReadBack};
use fenceproof_protocol::heartbeat::{Heartbeat, HeartbeatEnd};
use fenceproof_protocol::retry::{with_retry, RetryBudget};
use fenceproof_protocol::{lease, protected_transition, runs, FaultPoints, ProtocolError, Transition, Ttl};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

fn ttl(ms: i64) -> Ttl {
    Ttl::from_millis(ms).unwrap()
}

async fn new_run(pool: &PgPool) -> Uuid {
    runs::create_run(pool, &format!("task-{}", Uuid::new_v4()), json!({})).await.unwrap()
}

async fn wait_expired(pool: &PgPool, run: Uuid) {
    wait::until("lease expiry on the database clock", Duration::from_secs(10), || async {
        Ok(lease::inspect(pool, run).await.unwrap().filter(|l| !l.live).map(|_| ()))
    })
    .await
    .unwrap();
}

async fn save(
    pool: &PgPool,
    l: &fenceproof_protocol::Lease,
    rev: i64,
    cp: serde_json::Value,
) -> Result<i64, ProtocolError> {
    protected_transition(pool, l, rev, &Transition::save(cp), &FaultPoints::none(), RetryBudget::default()).await
}

#[tokio::test]
async fn protocol_rules_hold_on_real_postgres() {
    let tc = TestCluster::start(fenceproof_harness::test_dir!("protocol_rules")).await;
    takeover_only_when_free_or_expired(&tc).await;
    renew_needs_owner_epoch_and_life(&tc).await;
    release_keeps_epoch_and_checks_holder(&tc).await;
    state_machine_transitions(&tc).await;
    retry_is_a_new_run(&tc).await;
    revision_conflict_and_read_back(&tc).await;
    serialization_failures_retry_under_budget(&tc).await;
    heartbeat_cancels_execution_when_lease_is_lost(&tc).await;
}

async fn takeover_only_when_free_or_expired(tc: &TestCluster) {
    let (_, pool) = tc.fresh_db("t").await;
    let run = new_run(&pool).await;
    let a = lease::acquire(&pool, run, "w1", ttl(60_000)).await.unwrap();
    assert_eq!(a.lease.epoch, 1);
    match lease::acquire(&pool, run, "w2", ttl(60_000)).await {
        Err(ProtocolError::LeaseBusy { holder, epoch, .. }) => assert_eq!((holder.as_str(), epoch), ("w1", 1)),
        other => panic!("held lease taken over: {other:?}"),
    }
    let short = lease::acquire(&pool, new_run(&pool).await, "w3", ttl(50)).await.unwrap();
    wait_expired(&pool, short.lease.run_id).await;
    let t = lease::acquire(&pool, short.lease.run_id, "w4", ttl(60_000)).await.unwrap();
    assert_eq!(t.lease.epoch, 2, "expired lease is taken over with epoch + 1");
    assert!(matches!(lease::acquire(&pool, Uuid::new_v4(), "w", ttl(1000)).await, Err(ProtocolError::RunNotFound(_))));
}

async fn renew_needs_owner_epoch_and_life(tc: &TestCluster) {
    let (_, pool) = tc.fresh_db("t").await;
    let run = new_run(&pool).await;
    let l = lease::acquire(&pool, run, "w1", ttl(60_000)).await.unwrap().lease;
    let r = lease::renew(&pool, &l, ttl(120_000)).await.unwrap();
    assert!(r.expires_at > chrono::Utc::now() + chrono::Duration::seconds(90));
    let mut wrong_owner = l.clone();
    wrong_owner.owner = "intruder".into();
    assert!(matches!(lease::renew(&pool, &wrong_owner, ttl(1000)).await, Err(ProtocolError::LeaseLost { .. })));
    let mut wrong_epoch = l.clone();
    wrong_epoch.epoch += 1;
    assert!(matches!(lease::renew(&pool, &wrong_epoch, ttl(1000)).await, Err(ProtocolError::LeaseLost { .. })));
    // Expired: cannot be resurrected by its own owner.
    let run2 = new_run(&pool).await;
    let l2 = lease::acquire(&pool, run2, "w2", ttl(50)).await.unwrap().lease;
    wait_expired(&pool, run2).await;
    assert!(matches!(lease::renew(&pool, &l2, ttl(60_000)).await, Err(ProtocolError::LeaseLost { .. })));
}

async fn release_keeps_epoch_and_checks_holder(tc: &TestCluster) {
    let (_, pool) = tc.fresh_db("t").await;
    let run = new_run(&pool).await;
    let l = lease::acquire(&pool, run, "w1", ttl(60_000)).await.unwrap().lease;
    let mut other = l.clone();
    other.owner = "w2".into();
    assert!(matches!(lease::release(&pool, &other).await, Err(ProtocolError::LeaseLost { .. })));
    assert_eq!(lease::inspect(&pool, run).await.unwrap().unwrap().owner.as_deref(), Some("w1"));
    lease::release(&pool, &l).await.unwrap();
    let row = lease::inspect(&pool, run).await.unwrap().unwrap();
    assert_eq!((row.owner, row.epoch, row.live), (None, 1, false), "release frees the lease and keeps the epoch");
    let next = lease::acquire(&pool, run, "w2", ttl(60_000)).await.unwrap();
    assert_eq!(next.lease.epoch, 2);
    // The released holder can no longer write.
    assert!(matches!(save(&pool, &l, 0, json!({})).await, Err(ProtocolError::LeaseLost { .. })));
}

async fn state_machine_transitions(tc: &TestCluster) {
    let (_, pool) = tc.fresh_db("t").await;
    let run = new_run(&pool).await;
    let l = lease::acquire(&pool, run, "w1", ttl(60_000)).await.unwrap().lease;
    let go = |t: Transition, rev: i64| {
        let (pool, l) = (pool.clone(), l.clone());
        async move { protected_transition(&pool, &l, rev, &t, &FaultPoints::none(), RetryBudget::default()).await }
    };
    assert!(
        matches!(go(Transition::save(json!({})), 0).await, Err(ProtocolError::InvalidState { .. })),
        "save needs running"
    );
    assert_eq!(go(Transition::start(None), 0).await.unwrap(), 1);
    assert!(
        matches!(go(Transition::start(None), 1).await, Err(ProtocolError::InvalidState { .. })),
        "start only from pending"
    );
    assert_eq!(go(Transition::save(json!({"s": 1})), 1).await.unwrap(), 2);
    assert_eq!(go(Transition::succeed(None), 2).await.unwrap(), 3);
    for t in [Transition::save(json!({})), Transition::fail(None), Transition::succeed(None), Transition::start(None)] {
        assert!(matches!(go(t, 3).await, Err(ProtocolError::InvalidState { .. })), "terminal state is final");
    }
    assert!(
        matches!(runs::cancel(&pool, run).await, Err(ProtocolError::InvalidState { .. })),
        "cannot cancel a terminal run"
    );
    // Control-plane cancel of a running run; the worker can no longer write.
    let run2 = new_run(&pool).await;
    let l2 = lease::acquire(&pool, run2, "w2", ttl(60_000)).await.unwrap().lease;
    protected_transition(&pool, &l2, 0, &Transition::start(None), &FaultPoints::none(), RetryBudget::default())
        .await
        .unwrap();
    assert_eq!(runs::cancel(&pool, run2).await.unwrap(), 2);
    assert!(matches!(save(&pool, &l2, 2, json!({})).await, Err(ProtocolError::InvalidState { .. })));
    assert_eq!(runs::read_run(&pool, run2).await.unwrap().status, "cancelled");
}

async fn retry_is_a_new_run(tc: &TestCluster) {
    let (_, pool) = tc.fresh_db("t").await;
    let first = runs::create_run(&pool, "task-retry", json!({})).await.unwrap();
    assert!(matches!(runs::create_run(&pool, "task-retry", json!({})).await, Err(ProtocolError::ActiveRunLive { .. })));
    runs::cancel(&pool, first).await.unwrap();
    let second = runs::create_run(&pool, "task-retry", json!({})).await.unwrap();
    assert_ne!(first, second);
    let active: Uuid = sqlx::query_scalar("SELECT active_run_id FROM agent_tasks WHERE task_id = 'task-retry'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(active, second, "active_run_id switched in the creating transaction");
    assert_eq!(runs::read_run(&pool, first).await.unwrap().status, "cancelled", "the old run is kept as it was");
    assert_eq!(lease::inspect(&pool, second).await.unwrap().unwrap().epoch, 0, "the new run has its own lease");
}

async fn revision_conflict_and_read_back(tc: &TestCluster) {
    let (_, pool) = tc.fresh_db("t").await;
    let run = new_run(&pool).await;
    let l = lease::acquire(&pool, run, "w1", ttl(60_000)).await.unwrap().lease;
    protected_transition(&pool, &l, 0, &Transition::start(None), &FaultPoints::none(), RetryBudget::default())
        .await
        .unwrap();
    match save(&pool, &l, 0, json!({"x": 1})).await {
        Err(ProtocolError::Conflict { expected, found, .. }) => assert_eq!((expected, found), (0, Some(1))),
        other => panic!("stale revision accepted: {other:?}"),
    }
    let t = Transition::save(json!({"x": 2}));
    assert_eq!(confirm_transition(&pool, run, 1, &t).await.unwrap(), ReadBack::NotCommitted);
    save(&pool, &l, 1, json!({"x": 2})).await.unwrap();
    assert_eq!(confirm_transition(&pool, run, 1, &t).await.unwrap(), ReadBack::Committed { revision: 2 });
    save(&pool, &l, 2, json!({"x": 3})).await.unwrap();
    assert!(matches!(confirm_transition(&pool, run, 1, &t).await.unwrap(), ReadBack::Superseded { revision: 3, .. }));
}

async fn serialization_failures_retry_under_budget(tc: &TestCluster) {
    let (_, pool) = tc.fresh_db("t").await;
    let raise = "DO $$ BEGIN RAISE EXCEPTION 'forced' USING ERRCODE = 'serialization_failure'; END $$";
    let calls = std::sync::atomic::AtomicU32::new(0);
    let r = with_retry(RetryBudget { attempts: 5 }, || async {
        let n = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n < 2 {
            sqlx::query(raise).execute(&pool).await?;
        }
        Ok(n)
    })
    .await;
    assert_eq!(r.unwrap(), 2, "two real 40001s retried, third attempt succeeds");
    let r: Result<(), _> = with_retry(RetryBudget { attempts: 3 }, || async {
        sqlx::query(raise).execute(&pool).await?;
        Ok(())
    })
    .await;
    assert!(matches!(r, Err(ProtocolError::RetryBudgetExhausted { attempts: 3 })));
}

async fn heartbeat_cancels_execution_when_lease_is_lost(tc: &TestCluster) {
    let (_, pool) = tc.fresh_db("t").await;
    let run = new_run(&pool).await;
    // A heartbeat slower than the TTL: the lease expires between renewals.
    let l = lease::acquire(&pool, run, "w1", ttl(100)).await.unwrap().lease;
    let exec = tokio_util_token();
    let hb =
        Heartbeat::spawn(pool.clone(), l, ttl(100), Duration::from_millis(400), Duration::from_secs(2), exec.clone());
    tokio::time::timeout(Duration::from_secs(10), exec.cancelled()).await.expect("execution cancelled");
    let end = tokio::time::timeout(Duration::from_secs(5), hb.task).await.unwrap().unwrap();
    assert!(matches!(end, HeartbeatEnd::Lost(ProtocolError::LeaseLost { .. })), "{end:?}");
    // A healthy heartbeat keeps a short lease alive across several TTLs.
    let run2 = new_run(&pool).await;
    let l2 = lease::acquire(&pool, run2, "w2", ttl(1000)).await.unwrap().lease;
    let exec2 = tokio_util_token();
    let hb2 = Heartbeat::spawn(
        pool.clone(),
        l2.clone(),
        ttl(1000),
        Duration::from_millis(100),
        Duration::from_secs(1),
        exec2.clone(),
    );
    let renewed_past_ttl = wait::until("three renewals", Duration::from_secs(10), || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM fenceproof_oracle.commits WHERE table_name = 'worker_leases' AND writer = 't' AND run_id = $1 AND op = 'UPDATE'",
        )
        .bind(run2)
        .fetch_one(&pool)
        .await?;
        Ok((n >= 4).then_some(()))
    })
    .await;
    assert!(renewed_past_ttl.is_ok());
    assert!(!exec2.is_cancelled());
    hb2.stop.cancel();
    assert!(matches!(hb2.task.await.unwrap(), HeartbeatEnd::Stopped));
    lease::release(&pool, &l2).await.unwrap();
}

fn tokio_util_token() -> tokio_util::sync::CancellationToken {
    tokio_util::sync::CancellationToken::new()
}
