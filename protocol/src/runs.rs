//! Runs and tasks: creation (task + run + lease in one transaction), the control-plane cancel, and
//! read-back of a run's state from the primary.

use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::error::ProtocolError;
use crate::ids::RunStatus;
use crate::mutant::{self, Mutant};
use crate::retry::{classify_write_error, with_retry, RetryBudget};
use crate::sql;

/// A run as read back from the primary.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RunSnapshot {
    pub run_id: Uuid,
    pub task_id: String,
    pub status: String,
    pub revision: i64,
    pub checkpoint: Value,
}

/// Create a run of `task_id` (creating the task on first use) with its lease row, and make it the
/// task's active run, all in one short transaction. Every call mints a fresh run_id: a retry is a
/// new run, never a reused one. Refused while the task's active run is still live.
pub async fn create_run(pool: &PgPool, task_id: &str, checkpoint: Value) -> Result<Uuid, ProtocolError> {
    crate::notices::durable("create_run", Uuid::nil(), async {
        with_retry(RetryBudget::default(), || async {
            let run_id = Uuid::new_v4();
            let mut tx = pool.begin().await?;
            let r = create_in(&mut tx, task_id, run_id, &checkpoint).await;
            crate::tx::finish(tx, r, "create_run", run_id).await
        })
        .await
    })
    .await
}

/// `create_run`'s statements, inside the transaction it ends; the run id the task now runs.
async fn create_in(
    tx: &mut PgConnection,
    task_id: &str,
    run_id: Uuid,
    checkpoint: &Value,
) -> Result<Uuid, ProtocolError> {
    sqlx::query(&sql::stmt("run_create_task", sql::RUN_CREATE_TASK)).bind(task_id).execute(&mut *tx).await?;
    let active: Option<Uuid> =
        sqlx::query_scalar(&sql::stmt("run_lock_task", sql::RUN_LOCK_TASK)).bind(task_id).fetch_one(&mut *tx).await?;
    if let Some(active) = active {
        let status: String = sqlx::query_scalar("SELECT status FROM agent_runs WHERE run_id = $1")
            .bind(active)
            .fetch_one(&mut *tx)
            .await?;
        if !RunStatus::parse(&status).is_some_and(RunStatus::is_terminal) {
            return Err(ProtocolError::ActiveRunLive { task_id: task_id.to_string(), run_id: active });
        }
        // MUTANT retry-reuses-run-id: the finished run is reset and run again.
        if mutant::active(Mutant::RetryReusesRunId) {
            sqlx::query(
                "UPDATE agent_runs SET status = 'pending', revision = revision + 1, checkpoint = $2,
                        updated_at = clock_timestamp() WHERE run_id = $1",
            )
            .bind(active)
            .bind(checkpoint)
            .execute(&mut *tx)
            .await?;
            return Ok(active);
        }
    }
    sqlx::query(&sql::stmt("run_insert", sql::RUN_INSERT))
        .bind(run_id)
        .bind(task_id)
        .bind(checkpoint)
        .execute(&mut *tx)
        .await?;
    sqlx::query(&sql::stmt("run_insert_lease", sql::RUN_INSERT_LEASE)).bind(run_id).execute(&mut *tx).await?;
    sqlx::query(&sql::stmt("run_set_active", sql::RUN_SET_ACTIVE)).bind(task_id).bind(run_id).execute(&mut *tx).await?;
    Ok(run_id)
}

/// The control plane's cancel: pending or running -> cancelled, no lease needed (the caller is the
/// authorized control plane, not a worker). Returns the new revision.
///
/// In the same transaction the run's `prepared` operations become `cancelled` (never to be
/// dispatched). `dispatching` and `unknown` ones keep their status: they may already have happened
/// remotely, so they are left for query, compensation or manual handling — never recorded as
/// unexecuted.
pub async fn cancel(pool: &PgPool, run_id: Uuid) -> Result<i64, ProtocolError> {
    crate::notices::durable("cancel", run_id, async {
        with_retry(RetryBudget::default(), || async {
            let mut tx = pool.begin().await?;
            let done: Option<(i64,)> =
                sqlx::query_as(&sql::stmt("cancel_run", sql::CANCEL_RUN)).bind(run_id).fetch_optional(&mut *tx).await?;
            match done {
                Some((revision,)) => {
                    sqlx::query(&sql::stmt("cancel_operations", sql::CANCEL_OPERATIONS))
                        .bind(run_id)
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await.map_err(|e| classify_write_error(e, "cancel", run_id))?;
                    Ok(revision)
                }
                None => {
                    let run = read_run(pool, run_id).await?;
                    Err(ProtocolError::InvalidState { run_id, found: run.status, needed: "pending or running".into() })
                }
            }
        })
        .await
    })
    .await
}

/// Read a run from the primary.
pub async fn read_run(pool: &PgPool, run_id: Uuid) -> Result<RunSnapshot, ProtocolError> {
    let row: Option<(String, String, i64, Value)> =
        sqlx::query_as("SELECT task_id, status, revision, checkpoint FROM agent_runs WHERE run_id = $1")
            .bind(run_id)
            .fetch_optional(pool)
            .await?;
    let (task_id, status, revision, checkpoint) = row.ok_or(ProtocolError::RunNotFound(run_id))?;
    Ok(RunSnapshot { run_id, task_id, status, revision, checkpoint })
}
