//! A protected commit held open between its validation and its commit: it waits at a barrier (an
//! advisory lock the driver holds on a session of its own) inside the database, with the lease row
//! locked, until the model's path commits it.

use std::time::{Duration, Instant};

use fenceproof_model::state::Write;
use fenceproof_protocol::commit::{protected_transition, Transition};
use fenceproof_protocol::error::ProtocolError;
use fenceproof_protocol::faults::{FaultPoint, FaultPoints};
use fenceproof_protocol::ids::Lease;
use fenceproof_protocol::operation::Intent;
use fenceproof_protocol::outbox;
use fenceproof_protocol::retry::RetryBudget;
use serde_json::json;
use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};
use tokio::task::JoinHandle;

use super::Driver;

/// One commit waiting at its barrier.
pub struct Held {
    holder: PoolConnection<Postgres>,
    key: i64,
    task: JoinHandle<Result<i64, ProtocolError>>,
}

/// What a protected commit writes, as the protocol's calls take it.
pub struct Commit {
    pub pool: PgPool,
    pub lease: Lease,
    pub expected: i64,
    pub write: Write,
    /// The intent a `Plan` registers.
    pub intent: Option<Intent>,
    pub checkpoint: serde_json::Value,
}

/// Start `c` behind barrier `key`: `Ok(Some(held))` once it waits there (its lease validated),
/// `Ok(None)` when it was refused before reaching it.
pub async fn validate(d: &Driver, key: i64, c: Commit) -> Result<Option<Held>, ProtocolError> {
    let mut holder = d.barrier().await?;
    sqlx::query("SELECT pg_advisory_lock($1)").bind(key).execute(&mut *holder).await?;
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut *holder).await?;
    let task = tokio::spawn(commit(c, FaultPoints::with(FaultPoint::AfterLeaseValidated, key)));
    let deadline = Instant::now() + d.step_timeout;
    loop {
        if task.is_finished() {
            sqlx::query("SELECT pg_advisory_unlock_all()").execute(&mut *holder).await?;
            return match super::answered(task.await.map_err(|e| ProtocolError::InvalidIntent(e.to_string()))?)? {
                Ok(_) => Err(ProtocolError::InvalidIntent("a held commit passed its barrier".into())),
                Err(_) => Ok(None),
            };
        }
        let waiting: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)))")
                .bind(pid)
                .fetch_one(d.observer())
                .await?;
        if waiting {
            return Ok(Some(Held { holder, key, task }));
        }
        if Instant::now() > deadline {
            task.abort();
            let _ = holder.close().await;
            return Err(ProtocolError::InvalidIntent(format!(
                "a validation neither waited at barrier {key} nor answered"
            )));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

impl Held {
    /// Release the barrier and wait for the commit's answer: its new revision, or its refusal.
    pub async fn commit(mut self, timeout: Duration) -> Result<Result<i64, ProtocolError>, ProtocolError> {
        sqlx::query("SELECT pg_advisory_unlock($1)").bind(self.key).execute(&mut *self.holder).await?;
        let answer = tokio::time::timeout(timeout, self.task)
            .await
            .map_err(|_| ProtocolError::InvalidIntent("a released commit did not answer".into()))?
            .map_err(|e| ProtocolError::InvalidIntent(e.to_string()))?;
        // The session goes back to the driver's barrier pool with no lock held.
        sqlx::query("SELECT pg_advisory_unlock_all()").execute(&mut *self.holder).await?;
        Ok(answer)
    }
}

/// The protocol's call for `c.write`, armed with `faults`.
async fn commit(c: Commit, faults: FaultPoints) -> Result<i64, ProtocolError> {
    let budget = RetryBudget::default();
    let t = match c.write {
        Write::Start => Transition::start(None),
        Write::Checkpoint => Transition::save(c.checkpoint.clone()),
        Write::Complete => Transition::succeed(None),
        Write::Plan(_) => {
            let intent =
                c.intent.as_ref().ok_or_else(|| ProtocolError::InvalidIntent("a plan without an intent".into()))?;
            let checkpoint = json!({ "planned": intent.step_id, "at": c.checkpoint });
            return outbox::plan_step(&c.pool, &c.lease, c.expected, checkpoint, intent, &faults, budget)
                .await
                .map(|(r, _)| r);
        }
    };
    protected_transition(&c.pool, &c.lease, c.expected, &t, &faults, budget).await
}
