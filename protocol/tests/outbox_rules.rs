//! The outbox rules of the reference protocol against a real PostgreSQL: intents registered in the
//! protected transaction, mismatches refused, claims only for live runs, result writes guarded by
//! owner + revision + digest, reconciler conditions, and advancing only on one's own verified result.

use std::time::Duration;

use fenceproof_harness::testkit::TestCluster;
use fenceproof_harness::wait;
use fenceproof_protocol::operation::Intent;
use fenceproof_protocol::outbox::{self, Registration, Settled};
use fenceproof_protocol::retry::RetryBudget;
use fenceproof_protocol::{lease, protected_transition, runs, FaultPoints, Lease, ProtocolError, Transition, Ttl};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

async fn running(pool: &PgPool, owner: &str) -> Lease {
    let run = runs::create_run(pool, &format!("task-{}", Uuid::new_v4()), json!({})).await.unwrap();
    let l = lease::acquire(pool, run, owner, Ttl::from_millis(60_000).unwrap()).await.unwrap().lease;
    protected_transition(pool, &l, 0, &Transition::start(None), &FaultPoints::none(), RetryBudget::default())
        .await
        .unwrap();
    l
}

fn intent(l: &Lease, tenant: &str, body: serde_json::Value) -> Intent {
    Intent::new(tenant, l.run_id, "charge", 1, "idem", body).unwrap()
}

async fn plan(pool: &PgPool, l: &Lease, rev: i64, i: &Intent) -> Result<(i64, Registration), ProtocolError> {
    outbox::plan_step(pool, l, rev, json!({"planned": i.step_id}), i, &FaultPoints::none(), RetryBudget::default())
        .await
}

async fn count_ops(pool: &PgPool, run: Uuid) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM tool_operations WHERE run_id = $1")
        .bind(run)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn outbox_rules_hold_on_real_postgres() {
    let tc = TestCluster::start(fenceproof_harness::test_dir!("outbox_rules")).await;
    intents_commit_with_the_state_or_not_at_all(&tc).await;
    claims_and_result_writes_are_guarded(&tc).await;
    reconciler_conditions(&tc).await;
    advance_only_on_own_verified_result(&tc).await;
}

async fn intents_commit_with_the_state_or_not_at_all(tc: &TestCluster) {
    let (_, pool) = tc.fresh_db("t").await;
    let l = running(&pool, "w1").await;
    let i = intent(&l, "acme", json!({"amount": 10, "to": "x"}));
    assert_eq!(plan(&pool, &l, 1, &i).await.unwrap(), (2, Registration::New));
    // The same intent again (a takeover resuming the plan; key order differs): no new row.
    let same = intent(&l, "acme", serde_json::from_str(r#"{"to": "x", "amount": 10.0}"#).unwrap());
    assert_eq!(plan(&pool, &l, 2, &same).await.unwrap(), (3, Registration::AlreadyRegistered));
    // Same operation_id, another body: refused, and the state write rolled back with it.
    let changed = intent(&l, "acme", json!({"amount": 11, "to": "x"}));
    assert!(matches!(plan(&pool, &l, 3, &changed).await, Err(ProtocolError::IntentMismatch { .. })));
    // Same (run, step, effect_version) under another operation_id: refused too.
    let other_id = intent(&l, "other-tenant", json!({"amount": 10, "to": "x"}));
    assert!(matches!(plan(&pool, &l, 3, &other_id).await, Err(ProtocolError::IntentMismatch { .. })));
    assert_eq!(runs::read_run(&pool, l.run_id).await.unwrap().revision, 3, "refused plans wrote no state");
    assert_eq!(count_ops(&pool, l.run_id).await, 1);
    // A stale owner's plan: neither the state nor the intent commits.
    let mut stale = l.clone();
    stale.owner = "w-stale".into();
    let late = Intent::new("acme", l.run_id, "refund", 1, "idem", json!({})).unwrap();
    assert!(matches!(plan(&pool, &stale, 3, &late).await, Err(ProtocolError::LeaseLost { .. })));
    assert_eq!(count_ops(&pool, l.run_id).await, 1, "the intent rolled back with the refused write");
    // An intent for another run cannot be planned under this lease.
    let foreign = Intent::new("acme", Uuid::new_v4(), "charge", 1, "idem", json!({})).unwrap();
    assert!(matches!(plan(&pool, &l, 3, &foreign).await, Err(ProtocolError::InvalidIntent(_))));
}

async fn claims_and_result_writes_are_guarded(tc: &TestCluster) {
    let (_, pool) = tc.fresh_db("t").await;
    let ttl = Ttl::from_millis(60_000).unwrap();
    let l = running(&pool, "w1").await;
    plan(&pool, &l, 1, &intent(&l, "acme", json!({"n": 1}))).await.unwrap();
    // A prepared operation of a finished run is never claimed.
    let done = running(&pool, "w2").await;
    plan(&pool, &done, 1, &intent(&done, "acme", json!({"n": 2}))).await.unwrap();
    protected_transition(&pool, &done, 2, &Transition::succeed(None), &FaultPoints::none(), RetryBudget::default())
        .await
        .unwrap();
    let claims = outbox::claim(&pool, "d1", ttl, 10).await.unwrap();
    assert_eq!(claims.len(), 1, "only the live run's operation");
    let c = &claims[0];
    assert_eq!((c.run_id, c.dispatch_owner.as_str(), c.revision), (l.run_id, "d1", 1));
    assert!(outbox::claim(&pool, "d2", ttl, 10).await.unwrap().is_empty(), "a claimed operation is not claimed twice");
    let ok = Settled::Succeeded { remote_id: "r1".into(), result: json!({}) };
    for (what, bad) in [
        ("another dispatcher", outbox::Claim { dispatch_owner: "d2".into(), ..c.clone() }),
        ("a stale ledger revision", outbox::Claim { revision: 0, ..c.clone() }),
        ("another request digest", outbox::Claim { request_digest: "0".repeat(64), ..c.clone() }),
    ] {
        match outbox::record_result(&pool, &bad, &ok).await {
            Err(ProtocolError::LedgerWriteRejected { status, .. }) => assert_eq!(status, "dispatching", "{what}"),
            other => panic!("result write by {what} accepted: {other:?}"),
        }
    }
    assert_eq!(outbox::record_result(&pool, c, &ok).await.unwrap(), 2);
    let op = outbox::read_operation(&pool, &c.operation_id).await.unwrap();
    assert_eq!((op.status.as_str(), op.remote_id.as_deref()), ("succeeded", Some("r1")));
    assert!(
        matches!(outbox::record_result(&pool, c, &ok).await, Err(ProtocolError::LedgerWriteRejected { .. })),
        "written once"
    );
}

async fn reconciler_conditions(tc: &TestCluster) {
    let (_, pool) = tc.fresh_db("t").await;
    let l = running(&pool, "w1").await;
    plan(&pool, &l, 1, &intent(&l, "acme", json!({"n": 1}))).await.unwrap();
    let c = outbox::claim(&pool, "d1", Ttl::from_millis(200).unwrap(), 1).await.unwrap().remove(0);
    assert!(
        !outbox::mark_expired_unknown(&pool, &c.operation_id, "d1", c.revision).await.unwrap(),
        "not before the claim expires"
    );
    wait::until("claim expiry", Duration::from_secs(10), || async {
        Ok(outbox::expired_claims(&pool).await.unwrap().into_iter().find(|e| e.0 == c.operation_id).map(|_| ()))
    })
    .await
    .unwrap();
    assert!(
        !outbox::mark_expired_unknown(&pool, &c.operation_id, "d-other", c.revision).await.unwrap(),
        "only the claim it saw"
    );
    assert!(
        !outbox::mark_expired_unknown(&pool, &c.operation_id, "d1", c.revision - 1).await.unwrap(),
        "only at the revision it saw"
    );
    assert!(outbox::mark_expired_unknown(&pool, &c.operation_id, "d1", c.revision).await.unwrap());
    let op = outbox::read_operation(&pool, &c.operation_id).await.unwrap();
    assert_eq!((op.status.as_str(), op.dispatch_owner.as_deref()), ("unknown", None));
    // The late dispatcher's write is refused: the reconciler owns it now.
    let ok = Settled::Succeeded { remote_id: "r".into(), result: json!({}) };
    assert!(matches!(outbox::record_result(&pool, &c, &ok).await, Err(ProtocolError::LedgerWriteRejected { .. })));
    assert_eq!(outbox::unknown_operations(&pool).await.unwrap().len(), 1);
    assert!(matches!(
        outbox::converge(&pool, &op.operation_id, op.revision - 1, &ok).await,
        Err(ProtocolError::LedgerWriteRejected { .. })
    ));
    outbox::converge(&pool, &op.operation_id, op.revision, &ok).await.unwrap();
    assert_eq!(outbox::read_operation(&pool, &op.operation_id).await.unwrap().status, "succeeded");
}

async fn advance_only_on_own_verified_result(tc: &TestCluster) {
    let (_, pool) = tc.fresh_db("t").await;
    let ttl = Ttl::from_millis(60_000).unwrap();
    let a = running(&pool, "wa").await;
    let b = running(&pool, "wb").await;
    let ia = intent(&a, "acme", json!({"n": 1}));
    let ib = intent(&b, "acme", json!({"n": 1}));
    plan(&pool, &a, 1, &ia).await.unwrap();
    plan(&pool, &b, 1, &ib).await.unwrap();
    let adv = |l: Lease, rev: i64, op: String| {
        let pool = pool.clone();
        async move { outbox::advance_on_result(&pool, &l, rev, &op, json!({"done": op}), RetryBudget::default()).await }
    };
    assert!(matches!(adv(b.clone(), 2, ib.operation_id.clone()).await, Err(ProtocolError::OperationNotSettled { .. })));
    for c in outbox::claim(&pool, "d", ttl, 10).await.unwrap() {
        outbox::record_result(&pool, &c, &Settled::Succeeded { remote_id: "r".into(), result: json!({}) })
            .await
            .unwrap();
    }
    assert!(matches!(adv(b.clone(), 2, ia.operation_id.clone()).await, Err(ProtocolError::ForeignOperation { .. })));
    assert!(matches!(adv(b.clone(), 2, "nope".into()).await, Err(ProtocolError::OperationNotFound(_))));
    assert_eq!(runs::read_run(&pool, b.run_id).await.unwrap().revision, 2, "refused advances wrote nothing");
    assert_eq!(adv(b.clone(), 2, ib.operation_id.clone()).await.unwrap(), 3);
}
