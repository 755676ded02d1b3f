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
//!    not know is a fork of history. It is registered in the ledger as `unknown` under that
//!    operation_id (its run restored, its request known from the remote side): a run that plans
//!    the step again after the restore names the same operation_id and finds it already
//!    registered, no dispatcher sends an `unknown` intent, and a reconciler asks the tool what
//!    became of it. A fork that cannot be registered is reported. Neither is re-created remotely.
//!
//! The protocol knows no HTTP: the caller gathers the remote history ([`RemoteHistory`]) from the
//! tools' own records.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

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
    /// operation_id -> (tool, request body) the remote received: what the recovery registers a
    /// fork's ledger row with.
    pub requests: BTreeMap<String, (String, Value)>,
    /// The highest epoch any outside record shows (a tool's fencing high-water, worker logs).
    pub epoch_high_water: Option<i64>,
}

impl RemoteHistory {
    /// The history a tools' ledger shows: each `created` record (a JSON object with
    /// `operation_id`, `resource_id`, `tool`, `at` and the request `body`, the fake tools' ledger
    /// format) of an operation `only` accepts, the first for each operation_id.
    pub fn from_ledger<'a>(entries: impl IntoIterator<Item = &'a Value>, only: impl Fn(&str) -> bool) -> RemoteHistory {
        let mut h = RemoteHistory::default();
        for e in entries.into_iter().filter(|e| e["kind"] == "created") {
            let Some(op) = e["operation_id"].as_str().filter(|op| only(op)) else { continue };
            let id = e["resource_id"].as_str().unwrap_or_default().to_string();
            h.executed.entry(op.to_string()).or_insert((id, json!({"tool": e["tool"], "at": e["at"]})));
            if let (Some(tool), Some(body)) = (e["tool"].as_str(), e.get("body").filter(|b| b.is_object())) {
                h.requests.entry(op.to_string()).or_insert((tool.to_string(), body.clone()));
            }
        }
        h
    }
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
    /// Remote side effects the restored ledger did not know, registered `unknown` (history forks
    /// resolved in the ledger: never dispatched again, reconciled by query or by a person).
    pub registered: Vec<String>,
    /// Remote side effects the recovery could not register (their run is not in the restored
    /// database, or their request is not known): history forks for the operator.
    pub forks: Vec<String>,
    /// Ledger rows still claimed (`dispatching`) at the backup's moment: left to the reconciler once
    /// their claim expires, listed here for the operator.
    pub claims_left: Vec<String>,
}

/// Run the recovery on the restored database (see the module's doc). Call it before any worker or
/// dispatcher can reach the server, as a login that owns the protocol's tables.
pub async fn recover(pool: &PgPool, remote: &RemoteHistory, margin: i64) -> Result<RestoreReport, ProtocolError> {
    recover_runs(pool, None, remote, margin).await
}

/// [`recover`] for the runs `runs` only (every run when `None`): the leases, ledger rows and forks
/// of other runs are left as they are (a restore of some runs' rows, the others live on).
pub async fn recover_runs(
    pool: &PgPool,
    runs: Option<&[Uuid]>,
    remote: &RemoteHistory,
    margin: i64,
) -> Result<RestoreReport, ProtocolError> {
    let scope: Option<Vec<Uuid>> = runs.map(<[Uuid]>::to_vec);
    let mut tx = pool.begin().await?;
    // Nothing else may change the tables while the recovery decides.
    sqlx::query("LOCK TABLE worker_leases, tool_operations IN EXCLUSIVE MODE").execute(&mut *tx).await?;
    let restored_max: i64 = sqlx::query_scalar(
        "SELECT coalesce(max(epoch), 0) FROM worker_leases WHERE $1::uuid[] IS NULL OR run_id = ANY($1)",
    )
    .bind(&scope)
    .fetch_one(&mut *tx)
    .await?;
    let floor = restored_max.max(remote.epoch_high_water.unwrap_or(0)).saturating_add(margin.max(1));
    let raised = sqlx::query(
        "UPDATE worker_leases
            SET epoch = greatest(epoch + 1, $1), owner = NULL,
                expires_at = clock_timestamp(), updated_at = clock_timestamp()
          WHERE $2::uuid[] IS NULL OR run_id = ANY($2)",
    )
    .bind(floor)
    .bind(&scope)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT operation_id, status FROM tool_operations
          WHERE $1::uuid[] IS NULL OR run_id = ANY($1) ORDER BY operation_id",
    )
    .bind(&scope)
    .fetch_all(&mut *tx)
    .await?;
    let known: BTreeMap<String, String> = rows.into_iter().collect();
    let mut report = RestoreReport { epoch_floor: floor, leases_raised: raised, ..RestoreReport::default() };
    settle_known(&mut tx, &known, remote, &mut report).await?;
    register_forks(&mut tx, scope.as_deref(), &known, remote, &mut report).await?;
    tx.commit().await?;
    Ok(report)
}

type Tx = sqlx::Transaction<'static, sqlx::Postgres>;

/// Step 2: each known row the remote history contradicts, settled through legal transitions.
async fn settle_known(
    tx: &mut Tx,
    known: &BTreeMap<String, String>,
    remote: &RemoteHistory,
    report: &mut RestoreReport,
) -> Result<(), ProtocolError> {
    for (op, status) in known {
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
                .execute(&mut **tx)
                .await?;
                settle(tx, op, remote_id, &result).await?;
            }
            "unknown" => settle(tx, op, remote_id, &result).await?,
            "dispatching" => {
                report.claims_left.push(op.clone());
                continue;
            }
            _ => continue,
        }
        report.corrected.push(Corrected { operation_id: op.clone(), from: status.clone(), to: "succeeded".into() });
    }
    Ok(())
}

/// Step 3: each side effect the restored ledger does not know (of a run in `scope`), registered
/// `unknown` under its operation_id when its run was restored and its request is known (no
/// dispatcher sends an `unknown` intent; a reconciler asks the tool what became of it), reported
/// as a fork otherwise.
async fn register_forks(
    tx: &mut Tx,
    scope: Option<&[Uuid]>,
    known: &BTreeMap<String, String>,
    remote: &RemoteHistory,
    report: &mut RestoreReport,
) -> Result<(), ProtocolError> {
    for op in remote.executed.keys().filter(|op| !known.contains_key(*op)) {
        let parsed = crate::operation::parse_operation_id(op);
        if parsed.as_ref().is_some_and(|(_, run, _, _)| scope.is_some_and(|s| !s.contains(run))) {
            continue;
        }
        let registered = match (parsed, remote.requests.get(op)) {
            (Some((_, run, step, version)), Some((tool, body))) => {
                sqlx::query(
                    "INSERT INTO tool_operations
                       (operation_id, run_id, step_id, effect_version, tool_name, request_digest, request_body, status)
                     SELECT $1, $2, $3, $4, $5, $6, $7, 'unknown' WHERE EXISTS (SELECT 1 FROM agent_runs WHERE run_id = $2)",
                )
                .bind(op)
                .bind(run)
                .bind(step)
                .bind(version)
                .bind(tool)
                .bind(crate::operation::request_digest(body))
                .bind(body)
                .execute(&mut **tx)
                .await?
                .rows_affected()
                    == 1
            }
            _ => false,
        };
        if registered {
            report.registered.push(op.clone());
        } else {
            report.forks.push(op.clone());
        }
    }
    Ok(())
}

async fn settle(tx: &mut Tx, op: &str, remote_id: &str, result: &Value) -> Result<(), ProtocolError> {
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
