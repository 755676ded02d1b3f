//! Lock waits, named. When a row's moment waits on a worker's command that itself waits on a row
//! lock another worker's transaction holds, the delay is neither the machine's nor the harness's:
//! PostgreSQL says who holds the lock (`pg_blocking_pids`) and what that session last ran and since
//! when (`pg_stat_activity`). A row that watches a command through [`request_watched`] learns of
//! such a wait while it lasts, and says it with the holder's owner, backend, state and statement.

use std::time::Duration;

use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::HarnessError;
use serde_json::Value;
use sqlx::PgPool;

/// One backend that waits on a lock, and the backend of a named worker that holds it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct LockWait {
    pub waiter_pid: i32,
    /// The waiting session's `application_name` (a worker's owner id).
    pub waiter: String,
    pub waiter_query: String,
    pub holder_pid: i32,
    /// The holding session's `application_name`.
    pub holder: String,
    /// `idle in transaction`, `active`, …
    pub holder_state: String,
    /// When the holder's transaction began, on the database's clock.
    pub holder_since: String,
    /// How long the holder's transaction has been open (ms, database clock).
    pub holder_open_ms: i64,
    /// The last statement the holder sent.
    pub holder_query: String,
}

impl LockWait {
    /// `b's backend 123 (UPDATE worker_leases …) waits on a row lock held by a's backend 120, idle
    /// in transaction for 2300 ms since …, whose last statement was SELECT … FOR UPDATE`.
    pub fn describe(&self) -> String {
        format!(
            "{}'s backend {} (`{}`) waits on a lock held by {}'s backend {}, {} for {} ms (since {}), whose last statement was `{}`",
            self.waiter,
            self.waiter_pid,
            short(&self.waiter_query),
            self.holder,
            self.holder_pid,
            self.holder_state,
            self.holder_open_ms,
            self.holder_since,
            short(&self.holder_query)
        )
    }
}

/// A statement on one line, at most 160 characters.
fn short(sql: &str) -> String {
    let flat = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(160) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}

/// Every backend blocked by a backend whose `application_name` is `holder`.
const BLOCKED_BY: &str =
    "SELECT w.pid AS waiter_pid, w.application_name AS waiter, coalesce(w.query, '') AS waiter_query,
        h.pid AS holder_pid, h.application_name AS holder, coalesce(h.state, '') AS holder_state,
        coalesce(h.xact_start::text, '') AS holder_since,
        coalesce((extract(epoch FROM clock_timestamp() - h.xact_start) * 1000)::bigint, 0) AS holder_open_ms,
        coalesce(h.query, '') AS holder_query
   FROM pg_stat_activity w
   CROSS JOIN LATERAL unnest(pg_blocking_pids(w.pid)) AS b(pid)
   JOIN pg_stat_activity h ON h.pid = b.pid
  WHERE h.application_name = $1
  ORDER BY w.pid";

/// The lock waits on the backends of worker `holder` now.
pub async fn blocked_by(pool: &PgPool, holder: &str) -> Result<Vec<LockWait>, HarnessError> {
    Ok(sqlx::query_as(BLOCKED_BY).bind(holder).fetch_all(pool).await?)
}

/// Poll (every 50 ms) until some backend waits on a lock of worker `holder`; never returns
/// otherwise (the caller races it with what it waits for).
async fn first_wait(pool: &PgPool, holder: &str) -> Result<LockWait, HarnessError> {
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    loop {
        tick.tick().await;
        if let Some(w) = blocked_by(pool, holder).await?.into_iter().next() {
            return Ok(w);
        }
    }
}

/// What a watched command came to: its answer, and the lock wait on `holder` seen while it ran.
pub struct Watched {
    pub answer: Result<Value, HarnessError>,
    pub waited: Option<LockWait>,
}

/// Send `cmd` to `worker` and wait (at most `timeout`) for its answer, watching meanwhile whether
/// any backend waits on a lock held by worker `holder`. On the first such wait `on_wait` runs once
/// (to say it, or to end the holder's session as a server-side bound would) and the answer is
/// still awaited.
pub async fn request_watched<F, Fut>(
    pool: &PgPool,
    worker: &mut WorkerProc,
    cmd: Value,
    timeout: Duration,
    holder: &str,
    on_wait: F,
) -> Watched
where
    F: FnOnce(LockWait) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let request = worker.request(cmd, timeout);
    tokio::pin!(request);
    let watch = first_wait(pool, holder);
    tokio::pin!(watch);
    let mut on_wait = Some(on_wait);
    let (mut waited, mut watching) = (None, true);
    loop {
        tokio::select! {
            answer = &mut request => return Watched { answer, waited },
            w = &mut watch, if watching => {
                watching = false;
                // A watch that could not read the server leaves the answer alone to decide.
                if let Ok(w) = w {
                    waited = Some(w.clone());
                    if let Some(f) = on_wait.take() {
                        f(w).await;
                    }
                }
            }
        }
    }
}

/// End backend `pid`'s session (`pg_terminate_backend`), as a server-side bound on a cut-off
/// session would (`idle_in_transaction_session_timeout`, or TCP keepalives): its transaction rolls
/// back and its locks go. Whether it was ended.
pub async fn end_session(pool: &PgPool, pid: i32) -> bool {
    sqlx::query_scalar::<_, bool>("SELECT pg_terminate_backend($1)").bind(pid).fetch_one(pool).await.unwrap_or(false)
}

/// The settings that bound how long a cut-off session can hold its locks, as the server has them:
/// `idle_in_transaction_session_timeout=0, tcp_keepalives_idle=7200, …` (0: no bound).
pub async fn session_bounds(pool: &PgPool) -> String {
    const BOUNDS: &str = "SELECT string_agg(name || '=' || setting || coalesce(unit, ''), ', ' ORDER BY name)
           FROM pg_settings
          WHERE name IN ('idle_in_transaction_session_timeout', 'tcp_keepalives_idle', 'tcp_keepalives_interval',
                         'tcp_keepalives_count', 'tcp_user_timeout')";
    sqlx::query_scalar::<_, Option<String>>(BOUNDS)
        .fetch_one(pool)
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| "(the server's settings could not be read)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_names_both_sessions_and_the_holders_statement() {
        let w = LockWait {
            waiter_pid: 7,
            waiter: "b".into(),
            waiter_query: "UPDATE worker_leases\n   SET owner = $2".into(),
            holder_pid: 5,
            holder: "a".into(),
            holder_state: "idle in transaction".into(),
            holder_since: "2026-12-07 20:00:00+00".into(),
            holder_open_ms: 2300,
            holder_query: "SELECT owner, epoch FROM worker_leases WHERE run_id = $1 FOR UPDATE".into(),
        };
        let s = w.describe();
        for part in [
            "b's backend 7",
            "`UPDATE worker_leases SET owner = $2`",
            "a's backend 5",
            "idle in transaction for 2300 ms",
            "FOR UPDATE`",
        ] {
            assert!(s.contains(part), "{part} missing from {s}");
        }
        assert_eq!(short(&"x".repeat(200)).chars().count(), 161);
    }
}
