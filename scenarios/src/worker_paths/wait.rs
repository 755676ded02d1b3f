//! What a worker path waits on, all of it on the database: a command's answer or its session
//! waiting at a barrier, a clock tick (every term of the run passed on the database clock), and
//! the terms a step came after (to tell a late step from a wrong one).

use std::time::{Duration, Instant};

use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::{wait, HarnessError};
use fenceproof_model::action::Action;
use serde_json::Value;
use uuid::Uuid;

use sqlx::PgPool;

use crate::ctx::STEP;

/// How often a wait on two things at once looks at each.
const POLL: Duration = Duration::from_millis(5);

/// How a command sent beside a barrier ended its wait.
pub enum Waited {
    /// It answered.
    Answered(Value),
    /// Its session waits on the barrier's holder.
    AtBarrier,
    /// Its session waits on another session (an open transaction the path holds): why, named.
    Blocked(String),
}

/// The barriers a wait looks at: the one its command was given (the session holding it), and
/// those other commands already wait at (their waiting sessions are no command's new wait).
pub struct Barriers<'a> {
    pub own: Option<i32>,
    pub others: &'a [i32],
}

/// Wait for command `id` of `w` (whose sessions are named `owner`) to answer, or for its session
/// to wait at its own barrier, or on a session that is no barrier's (an open transaction).
pub async fn answer_or_wait(
    pool: &PgPool,
    w: &mut WorkerProc,
    id: u64,
    owner: &str,
    barriers: Barriers<'_>,
) -> Result<Waited, HarnessError> {
    let began = Instant::now();
    loop {
        if let Some(ev) = w.poll_event(|e| e["id"] == serde_json::json!(id)) {
            return Ok(Waited::Answered(ev));
        }
        if let Some(w) = waits_on(pool, owner, &barriers).await? {
            return Ok(w);
        }
        if began.elapsed() > STEP {
            // One last look at the answer, with the worker's own timeout rules.
            return Ok(Waited::Answered(w.reply(id, STEP).await?));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// What the sessions named `owner` wait on, if anything: their command's barrier, or a session
/// that holds no barrier (named with its statement). A session waiting at another command's
/// barrier is that command's, already held.
async fn waits_on(pool: &PgPool, owner: &str, barriers: &Barriers<'_>) -> Result<Option<Waited>, HarnessError> {
    let blockers: Vec<(i32, String, String)> = sqlx::query_as(
        "SELECT b.pid, coalesce(b.application_name, ''), left(coalesce(b.query, ''), 120)
           FROM pg_stat_activity a, unnest(pg_blocking_pids(a.pid)) AS blocker(pid)
           JOIN pg_stat_activity b ON b.pid = blocker.pid
          WHERE a.application_name = $1",
    )
    .bind(owner)
    .fetch_all(pool)
    .await?;
    if blockers.iter().any(|(pid, _, _)| Some(*pid) == barriers.own) {
        return Ok(Some(Waited::AtBarrier));
    }
    let mut open = blockers.iter().filter(|(pid, _, _)| !barriers.others.contains(pid));
    Ok(open.next().map(|(_, app, query)| {
        Waited::Blocked(format!("its session waits on a lock held by {app}'s open transaction ({query})"))
    }))
}

/// The terms of a run's grants before a step: its lease's expiry (when held) and each of its
/// operations' claim deadline, as µs of the database clock.
pub struct Terms {
    lease: Option<i64>,
    claims: Vec<(String, i64)>,
}

/// The run's terms now.
pub async fn terms(pool: &PgPool, run_id: Uuid) -> Result<Terms, HarnessError> {
    let lease: Option<i64> = sqlx::query_scalar(
        "SELECT (extract(epoch FROM expires_at) * 1e6)::bigint FROM worker_leases
          WHERE run_id = $1 AND owner IS NOT NULL",
    )
    .bind(run_id)
    .fetch_optional(pool)
    .await?;
    let claims: Vec<(String, i64)> = sqlx::query_as(
        "SELECT operation_id, (extract(epoch FROM dispatch_until) * 1e6)::bigint FROM tool_operations
          WHERE run_id = $1 AND status = 'dispatching'",
    )
    .bind(run_id)
    .fetch_all(pool)
    .await?;
    Ok(Terms { lease, claims })
}

/// Whether a takeover or an unknown marking the model refuses (the lease, or that operation's
/// claim, still live there) came after that very term had passed on the database clock: the
/// harness was late, and the worker was right to commit it. No other refusal hangs on time.
pub async fn late(pool: &PgPool, a: Action, before: &Terms, ops: &[Option<String>]) -> Result<bool, HarnessError> {
    let term = match a {
        Action::Acquire(_) => before.lease,
        Action::MarkUnknown(n) => {
            let id = ops.get(n as usize).cloned().flatten();
            before.claims.iter().find(|(op, _)| Some(op) == id.as_ref()).map(|(_, t)| *t)
        }
        _ => return Ok(false),
    };
    let now: i64 =
        sqlx::query_scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint").fetch_one(pool).await?;
    Ok(term.is_some_and(|t| t <= now))
}

/// The clock's tick: every term of the run has passed on the database clock.
pub async fn tick(pool: &PgPool, run_id: Uuid, grant_ms: i64) -> Result<(), HarnessError> {
    let pool = pool.clone();
    let bound = STEP + Duration::from_millis(grant_ms.max(0) as u64);
    wait::until("every term of the path's run to pass on the database clock", bound, || {
        let pool = pool.clone();
        async move {
            let passed: bool = sqlx::query_scalar(
                "SELECT NOT EXISTS (SELECT 1 FROM worker_leases WHERE run_id = $1 AND owner IS NOT NULL
                                       AND expires_at > clock_timestamp())
                    AND NOT EXISTS (SELECT 1 FROM tool_operations WHERE run_id = $1 AND status = 'dispatching'
                                       AND dispatch_until > clock_timestamp())",
            )
            .bind(run_id)
            .fetch_one(&pool)
            .await?;
            Ok(passed.then_some(()))
        }
    })
    .await
}
