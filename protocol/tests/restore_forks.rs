//! The reference recovery after a restore against a real PostgreSQL: a side effect the restored
//! ledger lost (a history fork) is registered `unknown` under its operation_id, so a run that plans
//! the step again after the restore finds it registered and no dispatcher claims it; a fork that
//! cannot be registered is reported; a recovery scoped to some runs leaves the others alone.

use fenceproof_harness::testkit::TestCluster;
use fenceproof_protocol::operation::{request_digest, Intent};
use fenceproof_protocol::outbox::{self, Registration};
use fenceproof_protocol::restore::{recover, recover_runs, RemoteHistory};
use fenceproof_protocol::retry::RetryBudget;
use fenceproof_protocol::{lease, protected_transition, runs, FaultPoints, Transition, Ttl};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

/// A run as a restore from a backup taken at its creation leaves it: pending, its lease free.
async fn restored_run(pool: &PgPool) -> Uuid {
    runs::create_run(pool, &format!("task-{}", Uuid::new_v4()), json!({})).await.unwrap()
}

fn created(op: &str, body: Option<serde_json::Value>) -> serde_json::Value {
    json!({"kind": "created", "operation_id": op, "resource_id": format!("r-{op}"), "tool": "plain", "at": "1.0", "body": body})
}

async fn status_of(pool: &PgPool, op: &str) -> Option<(String, String)> {
    sqlx::query_as("SELECT status, request_digest FROM tool_operations WHERE operation_id = $1")
        .bind(op)
        .fetch_optional(pool)
        .await
        .unwrap()
}

async fn epoch_of(pool: &PgPool, run: Uuid) -> i64 {
    sqlx::query_scalar("SELECT epoch FROM worker_leases WHERE run_id = $1").bind(run).fetch_one(pool).await.unwrap()
}

#[tokio::test]
async fn a_fork_is_registered_unknown_and_never_dispatched_again() {
    let tc = TestCluster::start(fenceproof_harness::test_dir!("restore_forks")).await;
    let (_, pool) = tc.fresh_db("t").await;
    let (run, other) = (restored_run(&pool).await, restored_run(&pool).await);
    let body = json!({"amount": 3});
    let intent = Intent::new("acme", run, "charge", 1, "plain", body.clone()).unwrap();
    let lost_run = Intent::new("acme", Uuid::new_v4(), "charge", 1, "plain", body.clone()).unwrap();
    let no_body = Intent::new("acme", run, "refund", 1, "plain", body.clone()).unwrap();
    let ledger = [
        created(&intent.operation_id, Some(body.clone())),
        created(&lost_run.operation_id, Some(body.clone())),
        created(&no_body.operation_id, None),
        json!({"kind": "rejected", "operation_id": "acme/x/y/v1", "tool": "plain"}),
    ];
    let remote = RemoteHistory::from_ledger(&ledger, |_| true);
    assert_eq!(remote.executed.len(), 3, "only the creations");

    // Scoped to `run`: its fork registered, its request-less fork reported, the other run untouched.
    let report = recover_runs(&pool, Some(&[run]), &remote, 1000).await.unwrap();
    assert_eq!(report.registered, std::slice::from_ref(&intent.operation_id));
    assert_eq!(report.forks, std::slice::from_ref(&no_body.operation_id));
    assert_eq!(status_of(&pool, &intent.operation_id).await, Some(("unknown".into(), request_digest(&body))));
    assert!(epoch_of(&pool, run).await >= 1000, "the run's lease is raised to the margin");
    assert_eq!(epoch_of(&pool, other).await, 0, "a run outside the scope is left as it was");

    // The run plans the same step again after the restore: the same operation_id, found registered,
    // still unknown, and no dispatcher claims it.
    let l = lease::acquire(&pool, run, "w1", Ttl::from_millis(60_000).unwrap()).await.unwrap().lease;
    let rev =
        protected_transition(&pool, &l, 0, &Transition::start(None), &FaultPoints::none(), RetryBudget::default())
            .await
            .unwrap();
    let (_, registration) =
        outbox::plan_step(&pool, &l, rev, json!({}), &intent, &FaultPoints::none(), RetryBudget::default())
            .await
            .unwrap();
    assert_eq!(registration, Registration::AlreadyRegistered);
    assert_eq!(status_of(&pool, &intent.operation_id).await.map(|s| s.0), Some("unknown".into()));
    let claims = outbox::claim(&pool, "d1", Ttl::from_millis(60_000).unwrap(), 10).await.unwrap();
    assert!(claims.is_empty(), "an unknown intent is never claimed: {claims:?}");

    // Unscoped: a fork whose run the restored database does not hold is reported, not registered.
    let report = recover(&pool, &remote, 1000).await.unwrap();
    assert!(report.registered.is_empty());
    assert!(report.forks.contains(&lost_run.operation_id), "{:?}", report.forks);
    assert!(epoch_of(&pool, other).await >= 1000, "every lease is raised");
}
