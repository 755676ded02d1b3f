//! The shipped fenced functions keep the spec's state table (§07) themselves. Logged in as the
//! worker role, with a live lease of the run at its current revision (so nothing but the state table
//! can refuse), every (from, to) pair of run statuses the table does not give a worker is called
//! through `fp_run_transition`, and a lease is asked on every final run once it is free: the run and
//! its lease row must not change, ever.

use fenceproof_harness::db::databases::{url_as, WORKER_LOGIN};
use fenceproof_harness::testkit::TestCluster;
use fenceproof_protocol::runs;
use serde_json::{json, Value};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use uuid::Uuid;

const STATUSES: [&str; 5] = ["pending", "running", "succeeded", "failed", "cancelled"];
/// What §07 gives a worker; everything else among the 25 pairs is forbidden.
const WORKER_MAY: [(&str, &str); 4] =
    [("pending", "running"), ("running", "running"), ("running", "succeeded"), ("running", "failed")];
const OWNER: &str = "w-table";

async fn transition(worker: &PgPool, run: Uuid, expected: i64, from: &str, to: &str) -> Value {
    sqlx::query_scalar(
        "SELECT to_jsonb(x) FROM fp_run_transition($1, $2, 1, $3, $4, $5, '{}'::jsonb,
                NULL, NULL, NULL, NULL, NULL, NULL, NULL) x",
    )
    .bind(run)
    .bind(OWNER)
    .bind(expected)
    .bind(from)
    .bind(to)
    .fetch_one(worker)
    .await
    .unwrap()
}

/// The run's and its lease's rows, whole.
async fn rows(admin: &PgPool, run: Uuid) -> (Value, Value) {
    sqlx::query_as(
        "SELECT (SELECT to_jsonb(r) FROM agent_runs r WHERE run_id = $1),
                (SELECT to_jsonb(l) FROM worker_leases l WHERE run_id = $1)",
    )
    .bind(run)
    .fetch_one(admin)
    .await
    .unwrap()
}

/// A run in `status`, leased (epoch 1) by OWNER through the worker role; its revision.
async fn run_in(admin: &PgPool, worker: &PgPool, status: &str) -> (Uuid, i64) {
    let run = runs::create_run(admin, &format!("task-{status}-{}", Uuid::new_v4()), json!({})).await.unwrap();
    let epoch: i64 = sqlx::query_scalar("SELECT epoch FROM fp_lease_acquire($1, $2, 600000)")
        .bind(run)
        .bind(OWNER)
        .fetch_one(worker)
        .await
        .unwrap();
    assert_eq!(epoch, 1);
    if status != "pending" {
        assert_eq!(transition(worker, run, 0, "pending", "running").await["outcome"], "ok");
    }
    if status == "succeeded" || status == "failed" {
        assert_eq!(transition(worker, run, 1, "running", status).await["outcome"], "ok");
    }
    if status == "cancelled" {
        runs::cancel(admin, run).await.unwrap();
    }
    let (r, _) = rows(admin, run).await;
    assert_eq!(r["status"], status);
    (run, r["revision"].as_i64().unwrap())
}

#[tokio::test]
async fn as_the_worker_role_no_forbidden_transition_moves_a_run_and_no_final_run_is_leased() {
    let tc = TestCluster::start(fenceproof_harness::test_dir!("state_table")).await;
    let (url, admin) = tc.fresh_db("control").await;
    let worker = PgPoolOptions::new().max_connections(2).connect(&url_as(&url, WORKER_LOGIN).unwrap()).await.unwrap();
    let mut tried = 0;
    for from in STATUSES {
        let (run, rev) = run_in(&admin, &worker, from).await;
        for to in STATUSES.iter().filter(|to| !WORKER_MAY.contains(&(from, to))) {
            let before = rows(&admin, run).await;
            let answer = transition(&worker, run, rev, from, to).await;
            assert_eq!(rows(&admin, run).await, before, "{from} -> {to} changed the run or its lease: {answer}");
            assert_eq!(answer["outcome"], "forbidden_transition", "{from} -> {to}: {answer}");
            tried += 1;
        }
        if ["succeeded", "failed", "cancelled"].contains(&from) {
            let released: i64 = sqlx::query_scalar("SELECT fp_lease_release($1, $2, 1)")
                .bind(run)
                .bind(OWNER)
                .fetch_one(&worker)
                .await
                .unwrap();
            assert_eq!(released, 1, "the holder lets go of the {from} run");
            let before = rows(&admin, run).await;
            let got: Vec<i64> = sqlx::query_scalar("SELECT epoch FROM fp_lease_acquire($1, 'w-next', 600000)")
                .bind(run)
                .fetch_all(&worker)
                .await
                .unwrap();
            assert!(got.is_empty(), "a lease on a {from} run was taken: epoch {got:?}");
            assert_eq!(rows(&admin, run).await, before, "a lease asked on a {from} run changed a row");
        }
    }
    assert_eq!(tried, 21, "every forbidden pair was tried");
}
