//! A refused protected write ends its transaction before the call returns. The pool's release of
//! the connection is held back here (`after_release` waits on a gate), which is what a loaded
//! machine does to sqlx's background release task: the refused call's row locks must already be
//! gone, or a dispatcher's `SKIP LOCKED` claim passes the operation by.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fenceproof_harness::testkit::TestCluster;
use fenceproof_protocol::operation::Intent;
use fenceproof_protocol::outbox;
use fenceproof_protocol::retry::RetryBudget;
use fenceproof_protocol::{lease, protected_transition, runs, FaultPoints, ProtocolError, Transition, Ttl};
use serde_json::json;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection};
use tokio::sync::Notify;
use uuid::Uuid;

/// While `held`, every connection released to the pool waits (at most 30 s) before it is pooled.
struct Gate {
    held: AtomicBool,
    open: Notify,
}

async fn gated_pool(url: &str, gate: Arc<Gate>) -> sqlx::PgPool {
    PgPoolOptions::new()
        .max_connections(4)
        .after_release(move |_, _| {
            let gate = gate.clone();
            Box::pin(async move {
                if gate.held.load(Ordering::SeqCst) {
                    let _ = tokio::time::timeout(Duration::from_secs(30), gate.open.notified()).await;
                }
                Ok(true)
            })
        })
        .connect(url)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_refused_advance_holds_no_row_lock_after_it_returns() {
    let tc = TestCluster::start(fenceproof_harness::test_dir!("refusals_release_locks")).await;
    let (url, _) = tc.fresh_db("t").await;
    let gate = Arc::new(Gate { held: AtomicBool::new(false), open: Notify::new() });
    let pool = gated_pool(&url, gate.clone()).await;
    let run = runs::create_run(&pool, &format!("task-{}", Uuid::new_v4()), json!({})).await.unwrap();
    let l = lease::acquire(&pool, run, "w", Ttl::from_millis(60_000).unwrap()).await.unwrap().lease;
    let none = FaultPoints::none();
    protected_transition(&pool, &l, 0, &Transition::start(None), &none, RetryBudget::default()).await.unwrap();
    let i = Intent::new("acme", l.run_id, "charge", 1, "idem", json!({"n": 1})).unwrap();
    outbox::plan_step(&pool, &l, 1, json!({}), &i, &none, RetryBudget::default()).await.unwrap();

    gate.held.store(true, Ordering::SeqCst);
    let refused = outbox::advance_on_result(&pool, &l, 2, &i.operation_id, json!({}), RetryBudget::default()).await;
    assert!(matches!(refused, Err(ProtocolError::OperationNotSettled { .. })), "{refused:?}");
    // Another session, at once: the operation and the lease row must be free to lock.
    let mut other = PgConnection::connect(&url).await.unwrap();
    let op_free = sqlx::query("SELECT 1 FROM tool_operations WHERE operation_id = $1 FOR UPDATE NOWAIT")
        .bind(&i.operation_id)
        .fetch_optional(&mut other)
        .await;
    let lease_free = sqlx::query("SELECT 1 FROM worker_leases WHERE run_id = $1 FOR UPDATE NOWAIT")
        .bind(l.run_id)
        .fetch_optional(&mut other)
        .await;
    gate.held.store(false, Ordering::SeqCst);
    gate.open.notify_waiters();
    assert!(op_free.is_ok(), "the refused call still locks its operation: {op_free:?}");
    assert!(lease_free.is_ok(), "the refused call still locks the lease row: {lease_free:?}");
}
