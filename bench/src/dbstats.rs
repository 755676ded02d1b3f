//! What the database says about a phase: WAL written, row changes (HOT or not), dead tuples and
//! autovacuum runs on the hot tables, commits, and the time backends spent waiting for row locks,
//! sampled from `pg_stat_activity` while the phase runs.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use sqlx::PgPool;

/// The tables whose statistics a phase reports.
pub const HOT_TABLES: &[&str] = &["worker_leases", "agent_runs", "tool_operations", "bench_raw"];

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct TableStats {
    pub n_tup_upd: i64,
    pub n_tup_hot_upd: i64,
    pub n_dead_tup: i64,
    pub autovacuum_count: i64,
}

#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub wal_bytes: i64,
    pub xact_commit: i64,
    pub tables: BTreeMap<String, TableStats>,
}

pub async fn snapshot(pool: &PgPool) -> Result<Snapshot, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    sqlx::query("SELECT pg_stat_clear_snapshot()").execute(&mut *conn).await?;
    let (wal_bytes, xact_commit): (i64, i64) = sqlx::query_as(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
                (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database())",
    )
    .fetch_one(&mut *conn)
    .await?;
    let rows: Vec<(String, i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT relname::text, n_tup_upd, n_tup_hot_upd, n_dead_tup, autovacuum_count
           FROM pg_stat_user_tables WHERE relname = ANY($1) AND schemaname = current_schema()",
    )
    .bind(HOT_TABLES)
    .fetch_all(&mut *conn)
    .await?;
    let tables = rows
        .into_iter()
        .map(|(t, n_tup_upd, n_tup_hot_upd, n_dead_tup, autovacuum_count)| {
            (t, TableStats { n_tup_upd, n_tup_hot_upd, n_dead_tup, autovacuum_count })
        })
        .collect();
    Ok(Snapshot { wal_bytes, xact_commit, tables })
}

/// The change between two snapshots, per table (tables that did not change are left out).
pub fn table_deltas(before: &Snapshot, after: &Snapshot) -> BTreeMap<String, TableStats> {
    after
        .tables
        .iter()
        .filter_map(|(t, a)| {
            let b = before.tables.get(t).cloned().unwrap_or_default();
            let d = TableStats {
                n_tup_upd: a.n_tup_upd - b.n_tup_upd,
                n_tup_hot_upd: a.n_tup_hot_upd - b.n_tup_hot_upd,
                // Dead tuples are a level, not a counter: report where the phase left them.
                n_dead_tup: a.n_dead_tup,
                autovacuum_count: a.autovacuum_count - b.autovacuum_count,
            };
            (d.n_tup_upd != 0 || d.autovacuum_count != 0).then(|| (t.clone(), d))
        })
        .collect()
}

/// Samples, every `every`, how many backends of the database wait on a lock (`wait_event_type =
/// 'Lock'`: row and transaction locks). The integral is the lock-wait time the server saw.
pub struct LockSampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(f64, u64)>,
}

impl LockSampler {
    pub fn start(pool: PgPool, every: Duration) -> LockSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let (mut waited_s, mut samples) = (0.0f64, 0u64);
            let mut last = Instant::now();
            while !flag.load(Ordering::Relaxed) {
                tokio::time::sleep(every).await;
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity
                      WHERE datname = current_database() AND wait_event_type = 'Lock'",
                )
                .fetch_one(&pool)
                .await
                .unwrap_or(0);
                let now = Instant::now();
                waited_s += n as f64 * (now - last).as_secs_f64();
                last = now;
                samples += 1;
            }
            (waited_s, samples)
        });
        LockSampler { stop, task }
    }

    /// Stop sampling; returns the lock-wait seconds summed over backends, and the sample count.
    pub async fn finish(self) -> (f64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or((0.0, 0))
    }
}

/// After a phase: wait (bounded by `timeout`) for the load's backends to leave. A slow disconnect
/// never aborts the benchmark: it comes back as a warning to print (the phase's table statistics
/// may then be partial). An error of the observing query is a warning too.
pub async fn settle(pool: &PgPool, app: &str, timeout: Duration) -> Option<String> {
    wait_gone(pool, app, timeout).await.err().map(|e| format!("{e}; this phase's table statistics may be partial"))
}

/// Wait (bounded) until no backend of `application_name` is left, so their statistics are flushed.
pub async fn wait_gone(pool: &PgPool, app: &str, timeout: Duration) -> Result<(), String> {
    let until = Instant::now() + timeout;
    loop {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1")
            .bind(app)
            .fetch_one(pool)
            .await
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok(());
        }
        if Instant::now() >= until {
            return Err(format!("{n} backends of {app} still connected after {timeout:?}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
