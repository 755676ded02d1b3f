//! Two first runs against one database at the same moment: the worker role does not exist yet, and
//! both runs' migrations create it. The moment is made, not hoped for: run one's migrations are
//! applied in a transaction left open (its `CREATE ROLE` done, not committed), run two's migrations
//! start in another schema and are seen waiting on it, then run one commits. Run two must finish,
//! with its functions granted to the role run one made.

use std::time::Duration;

use fenceproof_harness::db::databases::{pool, pool_in, MIGRATIONS};
use fenceproof_harness::db::native::NativeCluster;
use fenceproof_harness::db::pgbin::PgBin;
use fenceproof_harness::db::Backend;
use fenceproof_harness::wait;
use sqlx::{Connection, PgConnection};

#[tokio::test]
async fn two_first_runs_at_once_both_create_the_worker_role_without_an_error() {
    let dir = fenceproof_harness::test_dir!("worker_role_race");
    std::fs::create_dir_all(&dir).unwrap();
    // A cluster of its own, without the template (which would make the role first).
    let cluster = NativeCluster::start(PgBin::locate(None).unwrap(), &dir.join("postgres.log")).await.unwrap();
    let url = cluster.url_for("postgres");
    let admin = pool(&url, "test-admin", 1).await.unwrap();
    for s in ["CREATE SCHEMA run_one", "CREATE SCHEMA run_two"] {
        sqlx::query(s).execute(&admin).await.unwrap();
    }
    let absent: bool =
        sqlx::query_scalar("SELECT NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fenceproof_worker')")
            .fetch_one(&admin)
            .await
            .unwrap();
    assert!(absent, "the role must not exist before the two runs");

    let mut one = PgConnection::connect(&format!("{url}?options=-csearch_path%3Drun_one")).await.unwrap();
    sqlx::query("SET application_name = 'run-one'").execute(&mut one).await.unwrap();
    sqlx::raw_sql("BEGIN").execute(&mut one).await.unwrap();
    for (_, sql) in MIGRATIONS {
        sqlx::raw_sql(sql).execute(&mut one).await.unwrap();
    }
    let two_pool = pool_in(&url, "run_two", "run-two", 1).await.unwrap();
    let two = tokio::spawn(async move {
        let mut r = Ok(());
        for (_, sql) in MIGRATIONS {
            r = sqlx::raw_sql(sql).execute(&two_pool).await.map(|_| ());
            if r.is_err() {
                break;
            }
        }
        r
    });
    let one_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut one).await.unwrap();
    wait::until("run two's CREATE ROLE to wait on run one", Duration::from_secs(30), || {
        let admin = admin.clone();
        async move {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'run-two' AND $1 = ANY(pg_blocking_pids(pid))",
            )
            .bind(one_pid)
            .fetch_one(&admin)
            .await?;
            Ok((n > 0).then_some(()))
        }
    })
    .await
    .unwrap();
    sqlx::raw_sql("COMMIT").execute(&mut one).await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(30), two).await.unwrap().unwrap();
    assert!(r.is_ok(), "run two's migrations failed beside run one's: {r:?}");
    for schema in ["run_one", "run_two"] {
        let granted: bool = sqlx::query_scalar(&format!(
            "SELECT has_function_privilege('fenceproof_worker', '{schema}.fp_claim(text, bigint, bigint)', 'EXECUTE')"
        ))
        .fetch_one(&admin)
        .await
        .unwrap();
        assert!(granted, "{schema}'s functions are granted to the worker role");
    }
    admin.close().await;
}
