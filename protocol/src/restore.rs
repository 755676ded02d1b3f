//! Recovery after a restore from an old backup (spec §10): what must happen before dispatch resumes.
//!
//! A restore rolls the database back to the backup's moment, but the world did not roll back:
//! workers that acquired leases after the backup still run and believe in epochs the restored rows
//! never saw, and remote tools hold side effects the restored ledger forgot or still calls
//! `prepared`. Reopening the database as it is would let a fresh acquire hand out an epoch that a
//! live worker already holds, and a dispatcher send an intent a second time.
//!
//! [`recover`] is the operator's step, run while no worker can reach the restored server (the
//! caller holds dispatch: the server is not yet listening to them). In one transaction:
//! 1. every lease is freed and its epoch raised to at least `floor` = the highest epoch known
//!    anywhere (the restored rows, and any high-water the caller collected outside the database)
//!    plus a margin that covers the acquisitions no evidence recorded; every later acquire is above
//!    anything handed out before the restore, so every stale holder is fenced;
//! 2. every ledger row the remote side contradicts is corrected through legal transitions: an
//!    intent still `prepared` (or `unknown`) whose side effect the remote history shows is claimed
//!    by the recovery and settled `succeeded` with the remote's result, so no dispatcher sends it
//!    again;
//! 3. every side effect the remote history holds under an operation_id the restored ledger does
//!    not know is a fork of history: it is reported, never silently re-created.
//!
//! The protocol knows no HTTP: the caller gathers the remote history ([`RemoteHistory`]) from the
//! tools' own records.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{json, Value};
use sqlx::PgPool;

use crate::error::ProtocolError;

/// The dispatch owner the recovery claims contradicted intents under.
pub const RECOVERY_OWNER: &str = "restore-recovery";

/// The default margin added above the highest known epoch: larger than the number of acquisitions
/// any single lease could see between a backup and its restore.
pub const DEFAULT_EPOCH_MARGIN: i64 = 1 << 20;

/// What the remote side says happened, gathered by the caller from outside the database.
#[derive(Debug, Clone, Default)]
pub struct RemoteHistory {
    /// operation_id -> (remote resource id, the remote's answer) of every side effect that exists.
    pub executed: BTreeMap<String, (String, Value)>,
    /// The highest epoch any outside record shows (a tool's fencing high-water, worker logs).
    pub epoch_high_water: Option<i64>,
}

/// One ledger row the recovery corrected.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Corrected {
    pub operation_id: String,
    pub from: String,
    pub to: String,
}

/// What the recovery did, for the operator's record.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RestoreReport {
    /// Every lease's epoch is at least this after the recovery.
    pub epoch_floor: i64,
    /// Lease rows freed and raised.
    pub leases_raised: u64,
    /// Ledger rows settled from the remote history.
    pub corrected: Vec<Corrected>,
    /// Remote side effects under operation_ids the restored ledger does not know (history forks).
    pub forks: Vec<String>,
    /// Ledger rows still claimed (`dispatching`) at the backup's moment: left to the reconciler once
    /// their claim expires, listed here for the operator.
    pub claims_left: Vec<String>,
}

/// Run the recovery on the restored database (see the module's doc). Call it before any worker or
/// dispatcher can reach the server, as a login that owns the protocol's tables.
pub async fn recover(pool: &PgPool, remote: &RemoteHistory, margin: i64) -> Result<RestoreReport, ProtocolError> {
    let mut tx = pool.begin().await?;
    // Nothing else may change the tables while the recovery decides.
    sqlx::query("LOCK TABLE worker_leases, tool_operations IN EXCLUSIVE MODE").execute(&mut *tx).await?;
    let restored_max: i64 =
        sqlx::query_scalar("SELECT coalesce(max(epoch), 0) FROM worker_leases").fetch_one(&mut *tx).await?;
    let floor = restored_max.max(remote.epoch_high_water.unwrap_or(0)).saturating_add(margin.max(1));
    let raised = sqlx::query(
        "UPDATE worker_leases
            SET epoch = greatest(epoch + 1, $1), owner = NULL,
                expires_at = clock_timestamp(), updated_at = clock_timestamp()",
    )
    .bind(floor)
    .execute(&mut *tx)
    .await?
    .rows_affected();

    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT operation_id, status FROM tool_operations ORDER BY operation_id")
            .fetch_all(&mut *tx)
            .await?;
    let known: BTreeMap<String, String> = rows.into_iter().collect();
    let mut report = RestoreReport { epoch_floor: floor, leases_raised: raised, ..RestoreReport::default() };
    for (op, status) in &known {
        let Some((remote_id, answer)) = remote.executed.get(op) else {
            if status == "dispatching" {
                report.claims_left.push(op.clone());
            }
            continue;
        };
        let result = json!({"restored_from_remote": answer});
        match status.as_str() {
            "prepared" => {
                // Claimed by the recovery, then settled by it: the two legal steps of the outbox.
                sqlx::query(
                    "UPDATE tool_operations
                        SET status = 'dispatching', dispatch_owner = $2,
                            dispatch_until = clock_timestamp() + interval '1 minute',
                            revision = revision + 1, updated_at = clock_timestamp()
                      WHERE operation_id = $1",
                )
                .bind(op)
                .bind(RECOVERY_OWNER)
                .execute(&mut *tx)
                .await?;
                settle(&mut tx, op, remote_id, &result).await?;
            }
            "unknown" => settle(&mut tx, op, remote_id, &result).await?,
            "dispatching" => {
                report.claims_left.push(op.clone());
                continue;
            }
            _ => continue,
        }
        report.corrected.push(Corrected { operation_id: op.clone(), from: status.clone(), to: "succeeded".into() });
    }
    report.forks = remote.executed.keys().filter(|op| !known.contains_key(*op)).cloned().collect();
    tx.commit().await?;
    Ok(report)
}

async fn settle(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    op: &str,
    remote_id: &str,
    result: &Value,
) -> Result<(), ProtocolError> {
    sqlx::query(
        "UPDATE tool_operations
            SET status = 'succeeded', remote_id = $2, result = $3::jsonb, dispatch_until = NULL,
                revision = revision + 1, updated_at = clock_timestamp()
          WHERE operation_id = $1",
    )
    .bind(op)
    .bind(remote_id)
    .bind(result)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
