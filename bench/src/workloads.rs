//! The data a benchmark needs and the SQL of each workload: ours (the reference protocol, through
//! the same calls the reference worker makes) and the raw equivalent on the same server.

use std::time::Duration;

use fenceproof_protocol::faults::FaultPoints;
use fenceproof_protocol::ids::{Lease, Ttl};
use fenceproof_protocol::retry::RetryBudget;
use fenceproof_protocol::{lease, outbox, protected_transition, Transition};
use sqlx::PgPool;
use uuid::Uuid;

use super::driver::{acquire, Done};

/// A lease the benchmark holds (owner `bench-w<k>`, epoch 1, far from expiry).
#[derive(Debug, Clone)]
pub struct HeldLease {
    pub run_id: Uuid,
    pub owner: String,
    pub epoch: i64,
}

/// The TTL every renewal asks for.
pub fn ttl() -> Ttl {
    Ttl::from_millis(600_000).expect("ten minutes is a valid TTL")
}

/// The raw table of the driver-overhead comparison: pgbench and our driver run the same UPDATE.
pub const RAW_ROWS: i64 = 10_000;
pub const RAW_UPDATE: &str = "UPDATE bench_raw SET v = v + 1 WHERE id = $1";
pub const RAW_UPDATE_PGBENCH: &str = "\\set id random(1, 10000)\nUPDATE bench_raw SET v = v + 1 WHERE id = :id;\n";

pub async fn create_raw_table(admin: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(&format!(
        "CREATE TABLE bench_raw (id int PRIMARY KEY, v bigint NOT NULL DEFAULT 0);
         INSERT INTO bench_raw (id) SELECT g FROM generate_series(1, {RAW_ROWS}) g;"
    ))
    .execute(admin)
    .await?;
    vacuum(admin, "VACUUM ANALYZE bench_raw").await
}

/// Grow the held leases (with their tasks and running runs) to `total`, owners spread over
/// `workers`; returns every held lease. Lease g's run_id is `md5('bench-l-' || g)::uuid` and its
/// owner `bench-w<g mod workers>`, so a pgbench script can name any lease without a lookup.
pub async fn leases_up_to(admin: &PgPool, total: u64, workers: usize) -> Result<Vec<HeldLease>, sqlx::Error> {
    let have: i64 =
        sqlx::query_scalar("SELECT count(*) FROM agent_tasks WHERE task_id LIKE 'bench-l-%'").fetch_one(admin).await?;
    if (have as u64) < total {
        sqlx::raw_sql(&format!(
            "BEGIN;
             INSERT INTO agent_tasks (task_id) SELECT 'bench-l-' || g FROM generate_series({from}, {to}) g;
             INSERT INTO agent_runs (run_id, task_id, status)
                  SELECT md5('bench-l-' || g)::uuid, 'bench-l-' || g, 'running' FROM generate_series({from}, {to}) g;
             INSERT INTO worker_leases (run_id, owner, epoch, expires_at)
                  SELECT r.run_id, 'bench-w' || (substr(r.task_id, 9)::bigint % {workers}), 1,
                         clock_timestamp() + interval '1 day'
                    FROM agent_runs r
                   WHERE r.task_id LIKE 'bench-l-%' AND substr(r.task_id, 9)::bigint BETWEEN {from} AND {to};
             UPDATE agent_tasks t SET active_run_id = r.run_id FROM agent_runs r
              WHERE r.task_id = t.task_id AND t.task_id LIKE 'bench-l-%' AND t.active_run_id IS NULL;
             COMMIT;",
            from = have + 1,
            to = total
        ))
        .execute(admin)
        .await?;
        vacuum(admin, "VACUUM ANALYZE agent_tasks, agent_runs, worker_leases").await?;
    }
    let rows: Vec<(Uuid, String, i64)> = sqlx::query_as(
        "SELECT l.run_id, l.owner, l.epoch FROM worker_leases l JOIN agent_runs r USING (run_id)
          WHERE r.task_id LIKE 'bench-l-%' ORDER BY substr(r.task_id, 9)::bigint",
    )
    .fetch_all(admin)
    .await?;
    Ok(rows.into_iter().map(|(run_id, owner, epoch)| HeldLease { run_id, owner, epoch }).collect())
}

/// One run per protected-commit client (`bench-c<i>`), each with its own lease; returns the leases
/// and the runs' current revisions.
pub async fn commit_runs(admin: &PgPool, clients: usize) -> Result<Vec<(Lease, i64)>, sqlx::Error> {
    let mut out = Vec::new();
    for i in 0..clients {
        let task = format!("bench-c-{i}");
        let owner = format!("bench-c{i}");
        let existing: Option<(Uuid, i64)> =
            sqlx::query_as("SELECT r.run_id, r.revision FROM agent_runs r WHERE r.task_id = $1")
                .bind(&task)
                .fetch_optional(admin)
                .await?;
        let (run_id, revision) = match existing {
            Some(x) => x,
            None => {
                let run_id = Uuid::new_v4();
                let mut tx = admin.begin().await?;
                sqlx::query("INSERT INTO agent_tasks (task_id, active_run_id) VALUES ($1, NULL)")
                    .bind(&task)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query("INSERT INTO agent_runs (run_id, task_id, status) VALUES ($1, $2, 'running')")
                    .bind(run_id)
                    .bind(&task)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(
                    "INSERT INTO worker_leases (run_id, owner, epoch, expires_at)
                     VALUES ($1, $2, 1, clock_timestamp() + interval '1 day')",
                )
                .bind(run_id)
                .bind(&owner)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                (run_id, 0)
            }
        };
        out.push((Lease { run_id, owner, epoch: 1 }, revision));
    }
    Ok(out)
}

/// Make the prepared backlog exactly `size` operations (claimed ones are deleted first), spread
/// over the held leases' runs, then vacuum so every phase starts from the same table.
pub async fn prepared_backlog(admin: &PgPool, size: u64) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(&format!(
        "DELETE FROM tool_operations WHERE status <> 'prepared';
         INSERT INTO tool_operations (operation_id, run_id, step_id, effect_version, tool_name, request_digest,
                                      request_body, status, updated_at)
         SELECT 'bench/' || gen_random_uuid(), r.a[1 + (g % cardinality(r.a))::int], gen_random_uuid()::text, 1, 'idem',
                md5(g::text), '{{\"n\": 1}}', 'prepared', clock_timestamp()
           FROM (SELECT array_agg(run_id) AS a FROM agent_runs WHERE task_id LIKE 'bench-l-%') r,
                generate_series(1, greatest({size} - (SELECT count(*) FROM tool_operations), 0)) g;
         DELETE FROM tool_operations WHERE operation_id IN (
           SELECT operation_id FROM tool_operations ORDER BY updated_at DESC
            LIMIT greatest((SELECT count(*) FROM tool_operations) - {size}, 0));"
    ))
    .execute(admin)
    .await?;
    vacuum(admin, "VACUUM ANALYZE tool_operations").await
}

/// Run VACUUM (or any statement that cannot run in a transaction block) on its own.
pub async fn vacuum(admin: &PgPool, sql: &str) -> Result<(), sqlx::Error> {
    sqlx::query(sql).execute(admin).await?;
    Ok(())
}

/// A cheap deterministic generator for picking rows (no shared state between clients).
pub fn pick(client: usize, seq: u64, n: usize) -> usize {
    let mut x = (client as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seq.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 31;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 29;
    (x % n.max(1) as u64) as usize
}

pub fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Ours: renew one lease, fenced by owner + epoch + expiry (the worker's heartbeat call).
pub async fn renew_ours(pool: PgPool, l: HeldLease) -> Result<Done, String> {
    // The protocol crate takes its own connection: no probe acquire (it would be a second
    // acquire and release per call, which no worker pays); the wait is inside the latency.
    let wait = Duration::ZERO;
    let lease = Lease { run_id: l.run_id, owner: l.owner, epoch: l.epoch };
    lease::renew(&pool, &lease, ttl()).await.map_err(err)?;
    Ok(Done { units: 1, pool_wait: wait, commit: None })
}

/// Raw: the same row, UPDATE by primary key, no fencing.
pub async fn renew_raw(pool: PgPool, l: HeldLease) -> Result<Done, String> {
    let (mut c, wait) = acquire(&pool).await?;
    sqlx::query(
        "UPDATE worker_leases SET expires_at = clock_timestamp() + interval '10 minutes', updated_at = clock_timestamp()
          WHERE run_id = $1",
    )
    .bind(l.run_id)
    .execute(&mut *c)
    .await
    .map_err(err)?;
    Ok(Done { units: 1, pool_wait: wait, commit: None })
}

/// Ours: one statement renews a worker's batch, each lease fenced by its own epoch.
pub async fn renew_many_ours(pool: PgPool, owner: String, batch: Vec<(Uuid, i64)>) -> Result<Done, String> {
    // The protocol crate takes its own connection: no probe acquire (it would be a second
    // acquire and release per call, which no worker pays); the wait is inside the latency.
    let wait = Duration::ZERO;
    let renewed = lease::renew_many(&pool, &owner, &batch, ttl()).await.map_err(err)?;
    if renewed.len() != batch.len() {
        return Err(format!("{} of {} leases renewed", renewed.len(), batch.len()));
    }
    Ok(Done { units: renewed.len() as u64, pool_wait: wait, commit: None })
}

/// Raw: the same rows by primary key in one statement, no fencing.
pub async fn renew_many_raw(pool: PgPool, batch: Vec<Uuid>) -> Result<Done, String> {
    let (mut c, wait) = acquire(&pool).await?;
    let done = sqlx::query(
        "UPDATE worker_leases SET expires_at = clock_timestamp() + interval '10 minutes', updated_at = clock_timestamp()
          WHERE run_id = ANY($1)",
    )
    .bind(&batch)
    .execute(&mut *c)
    .await
    .map_err(err)?;
    Ok(Done { units: done.rows_affected(), pool_wait: wait, commit: None })
}

/// Ours: a checkpoint through the protected transition (lease lock + validation + revision CAS).
pub async fn commit_ours(pool: PgPool, lease: Lease, expected: i64, seq: u64) -> Result<(i64, Done), String> {
    // The protocol crate takes its own connection: no probe acquire (it would be a second
    // acquire and release per call, which no worker pays); the wait is inside the latency.
    let wait = Duration::ZERO;
    let t = Transition::save(serde_json::json!({ "step": seq }));
    let rev = protected_transition(&pool, &lease, expected, &t, &FaultPoints::none(), RetryBudget::default())
        .await
        .map_err(err)?;
    Ok((rev, Done { units: 1, pool_wait: wait, commit: None }))
}

/// The spec's section-06 transaction: BEGIN, lock the lease, validate, CAS the run, COMMIT.
pub async fn commit_spec(pool: PgPool, lease: Lease, expected: i64, seq: u64) -> Result<(i64, Done), String> {
    let (mut c, wait) = acquire(&pool).await?;
    sqlx::query("BEGIN").execute(&mut *c).await.map_err(err)?;
    let r: Result<i64, String> = async {
        sqlx::query("SELECT run_id FROM worker_leases WHERE run_id = $1 FOR UPDATE")
            .bind(lease.run_id)
            .fetch_one(&mut *c)
            .await
            .map_err(err)?;
        let valid: bool = sqlx::query_scalar(
            "SELECT COALESCE(owner = $2 AND epoch = $3 AND expires_at > clock_timestamp(), false)
               FROM worker_leases WHERE run_id = $1",
        )
        .bind(lease.run_id)
        .bind(&lease.owner)
        .bind(lease.epoch)
        .fetch_one(&mut *c)
        .await
        .map_err(err)?;
        if !valid {
            return Err("lease lost".into());
        }
        sqlx::query_scalar(
            "UPDATE agent_runs SET checkpoint = $3::jsonb, revision = revision + 1, updated_at = clock_timestamp()
              WHERE run_id = $1 AND revision = $2 AND status = 'running' RETURNING revision",
        )
        .bind(lease.run_id)
        .bind(expected)
        .bind(serde_json::json!({ "step": seq }))
        .fetch_one(&mut *c)
        .await
        .map_err(err)
    }
    .await;
    match r {
        Ok(rev) => {
            let t = std::time::Instant::now();
            sqlx::query("COMMIT").execute(&mut *c).await.map_err(err)?;
            Ok((rev, Done { units: 1, pool_wait: wait, commit: Some(t.elapsed()) }))
        }
        Err(e) => {
            let _ = sqlx::query("ROLLBACK").execute(&mut *c).await;
            Err(e)
        }
    }
}

/// Raw: the run's row, UPDATE by primary key (autocommit), no lease and no CAS.
pub async fn commit_raw(pool: PgPool, run_id: Uuid, seq: u64) -> Result<Done, String> {
    let (mut c, wait) = acquire(&pool).await?;
    sqlx::query(
        "UPDATE agent_runs SET checkpoint = $2::jsonb, revision = revision + 1, updated_at = clock_timestamp()
          WHERE run_id = $1",
    )
    .bind(run_id)
    .bind(serde_json::json!({ "step": seq }))
    .execute(&mut *c)
    .await
    .map_err(err)?;
    Ok(Done { units: 1, pool_wait: wait, commit: None })
}

/// Ours: the dispatcher's protected claim (live runs only, oldest first, SKIP LOCKED, deadline).
pub async fn claim_ours(pool: PgPool, owner: String, k: i64) -> Result<Done, String> {
    // The protocol crate takes its own connection: no probe acquire (it would be a second
    // acquire and release per call, which no worker pays); the wait is inside the latency.
    let wait = Duration::ZERO;
    let claims = outbox::claim(&pool, &owner, Ttl::from_millis(600_000).map_err(err)?, k).await.map_err(err)?;
    Ok(Done { units: claims.len() as u64, pool_wait: wait, commit: None })
}

/// Raw: a bare FOR UPDATE SKIP LOCKED claim of the oldest prepared rows.
pub async fn claim_bare(pool: PgPool, owner: String, k: i64) -> Result<Done, String> {
    let (mut c, wait) = acquire(&pool).await?;
    let done = sqlx::query(
        "WITH c AS (SELECT operation_id FROM tool_operations WHERE status = 'prepared'
                     ORDER BY updated_at LIMIT $1 FOR UPDATE SKIP LOCKED)
         UPDATE tool_operations o SET status = 'dispatching', dispatch_owner = $2
           FROM c WHERE o.operation_id = c.operation_id",
    )
    .bind(k)
    .bind(&owner)
    .execute(&mut *c)
    .await
    .map_err(err)?;
    Ok(Done { units: done.rows_affected(), pool_wait: wait, commit: None })
}

/// Raw driver-overhead statement.
pub async fn raw_update(pool: PgPool, id: i32) -> Result<Done, String> {
    let (mut c, wait) = acquire(&pool).await?;
    sqlx::query(RAW_UPDATE).bind(id).execute(&mut *c).await.map_err(err)?;
    Ok(Done { units: 1, pool_wait: wait, commit: None })
}

/// How long a phase of the default run lasts.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(2);
