//! The side-effect ledger (spec sections 08 and 09): intents registered together with the state
//! that plans them, the dispatcher's protected claim, result writes guarded by dispatch owner +
//! ledger revision (+ digest), the reconciler's move of expired claims to `unknown`, and the
//! convergence of `unknown` to the remote fact. Nothing here ever resets `dispatching` to
//! `prepared`, and nothing ever mints a new operation_id for an existing intent.

use serde::Serialize;
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use crate::commit::{attempt, Transition, Within};
use crate::error::ProtocolError;
use crate::faults::FaultPoints;
use crate::ids::{Lease, Ttl};
pub use crate::intents::Registration;
use crate::mutant::{self, Mutant};
use crate::operation::Intent;
use crate::retry::{classify_write_error, with_retry, RetryBudget};
use crate::sql;
use crate::write_path;

/// A ledger row.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Operation {
    pub operation_id: String,
    pub run_id: Uuid,
    pub step_id: String,
    pub effect_version: i32,
    pub tool_name: String,
    pub request_digest: String,
    pub request_body: Value,
    pub status: String,
    pub dispatch_owner: Option<String>,
    pub revision: i64,
    pub remote_id: Option<String>,
    pub result: Option<Value>,
}

const OPERATION_COLUMNS: &str =
    "operation_id, run_id, step_id, effect_version, tool_name, request_digest, request_body, \
     status, dispatch_owner, revision, remote_id, result";

/// Advance the checkpoint to "step planned" and register the step's intent, in one protected
/// transaction: both commit together or neither does.
pub async fn plan_step(
    pool: &PgPool,
    lease: &Lease,
    expected_revision: i64,
    checkpoint: Value,
    intent: &Intent,
    faults: &FaultPoints,
    budget: RetryBudget,
) -> Result<(i64, Registration), ProtocolError> {
    let r = crate::notices::durable("plan", lease.run_id, async {
        if intent.run_id != lease.run_id {
            return Err(ProtocolError::InvalidIntent(format!(
                "intent of run {} planned under the lease of run {}",
                intent.run_id, lease.run_id
            )));
        }
        let t = Transition::save(checkpoint);
        let (rev, reg) =
            with_retry(budget, || attempt(pool, lease, expected_revision, &t, faults, Within::RegisterIntent(intent)))
                .await?;
        Ok((rev, reg.unwrap_or(Registration::New)))
    })
    .await;
    crate::metrics::METRICS.protected(&r);
    r
}

/// The current owner advances the run on a verified ledger result of its own run.
pub async fn advance_on_result(
    pool: &PgPool,
    lease: &Lease,
    expected_revision: i64,
    operation_id: &str,
    checkpoint: Value,
    budget: RetryBudget,
) -> Result<i64, ProtocolError> {
    let r = crate::notices::durable("advance", lease.run_id, async {
        let t = Transition::save(checkpoint);
        let none = FaultPoints::none();
        with_retry(budget, || attempt(pool, lease, expected_revision, &t, &none, Within::RequireResult(operation_id)))
            .await
            .map(|(r, _)| r)
    })
    .await;
    crate::metrics::METRICS.protected(&r);
    r
}

/// A claimed operation: what the dispatcher needs to call the tool and to write the result back.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Claim {
    pub operation_id: String,
    pub run_id: Uuid,
    pub tool_name: String,
    pub request_digest: String,
    pub request_body: Value,
    pub dispatch_owner: String,
    /// The ledger revision after the claim; the result write is conditioned on it.
    pub revision: i64,
}

/// Claim up to `limit` prepared operations of runs that are still pending or running, with a finite
/// deadline. The claim transaction ends before any remote call.
pub async fn claim(
    pool: &PgPool,
    dispatch_owner: &str,
    claim_ttl: Ttl,
    limit: i64,
) -> Result<Vec<Claim>, ProtocolError> {
    crate::notices::durable("claim", Uuid::nil(), async {
        with_retry(RetryBudget::default(), || async {
            let api = "SELECT operation_id, run_id, tool_name, request_digest, request_body, dispatch_owner, revision
                          FROM fp_claim($1, $2, $3)";
            // The same statement as fp_claim (migration 0002), shaped for a cached generic plan.
            let direct = sql::stmt("claim", sql::CLAIM);
            sqlx::query_as::<_, Claim>(if write_path::api() { api } else { &direct })
                .bind(dispatch_owner)
                .bind(claim_ttl.millis())
                .bind(limit)
                .fetch_all(pool)
                .await
                .map_err(|e| classify_write_error(e, "claim", Uuid::nil()))
        })
        .await
    })
    .await
}

/// A remote outcome as the ledger records it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Settled {
    Succeeded { remote_id: String, result: Value },
    FailedFinal { result: Value },
}

impl Settled {
    /// The ledger status this outcome writes.
    pub fn status_label(&self) -> &'static str {
        self.status()
    }

    fn status(&self) -> &'static str {
        match self {
            Settled::Succeeded { .. } => "succeeded",
            Settled::FailedFinal { .. } => "failed_final",
        }
    }
    fn parts(&self) -> (Option<&str>, &Value) {
        match self {
            Settled::Succeeded { remote_id, result } => (Some(remote_id), result),
            Settled::FailedFinal { result } => (None, result),
        }
    }
}

/// Write the verified result of a claim: only while it is still this dispatcher's claim at the
/// claimed ledger revision with the same request digest. Zero rows is
/// [`ProtocolError::LedgerWriteRejected`], a signal to investigate.
pub async fn record_result(pool: &PgPool, c: &Claim, outcome: &Settled) -> Result<i64, ProtocolError> {
    crate::notices::durable("record_result", c.run_id, async {
        let (remote_id, result) = outcome.parts();
        // MUTANT result-write-skips-claim-check: the result is written whatever became of the claim.
        let sql = if write_path::api() {
            "SELECT revision FROM fp_record_result($1, $2, $3, $4, $5, $6, $7::jsonb)".to_string()
        } else if mutant::active(Mutant::ResultWriteSkipsClaimCheck) {
            sql::RECORD_RESULT.replace(
                "status = 'dispatching' AND dispatch_owner = $2 AND revision = $3",
                "$2::text IS NOT NULL AND $3::bigint IS NOT NULL",
            )
        } else {
            sql::stmt("record_result", sql::RECORD_RESULT).into_owned()
        };
        let done: Option<(i64,)> = sqlx::query_as(&sql)
            .bind(&c.operation_id)
            .bind(&c.dispatch_owner)
            .bind(c.revision)
            .bind(&c.request_digest)
            .bind(outcome.status())
            .bind(remote_id)
            .bind(result)
            .fetch_optional(pool)
            .await
            .map_err(|e| classify_write_error(e, "record_result", c.run_id))?;
        match done {
            Some((rev,)) => Ok(rev),
            None => Err(rejected(pool, &c.operation_id).await),
        }
    })
    .await
}

/// The dispatcher itself saw an unknown outcome (timeout, dropped connection, 5xx): move its own
/// claim to `unknown`, keeping the evidence. Never back to `prepared`.
pub async fn mark_unknown_own(pool: &PgPool, c: &Claim, evidence: &str) -> Result<i64, ProtocolError> {
    crate::notices::durable("mark_unknown", c.run_id, async {
        let sql = if write_path::api() {
            "SELECT revision FROM fp_mark_unknown_own($1, $2, $3, $4)".to_string()
        } else {
            unknown_status(sql::stmt("mark_unknown_own", sql::MARK_UNKNOWN_OWN).into_owned())
        };
        let done: Option<(i64,)> = sqlx::query_as(&sql)
            .bind(&c.operation_id)
            .bind(&c.dispatch_owner)
            .bind(c.revision)
            .bind(evidence)
            .fetch_optional(pool)
            .await
            .map_err(|e| classify_write_error(e, "mark_unknown", c.run_id))?;
        match done {
            Some((rev,)) => {
                crate::metrics::METRICS.moved_to_unknown();
                Ok(rev)
            }
            None => Err(rejected(pool, &c.operation_id).await),
        }
    })
    .await
}

/// Claims whose deadline passed on the database clock: (operation_id, dispatch_owner, revision).
pub async fn expired_claims(pool: &PgPool) -> Result<Vec<(String, String, i64)>, ProtocolError> {
    Ok(sqlx::query_as(&sql::stmt("expired_claims", sql::EXPIRED_CLAIMS)).fetch_all(pool).await?)
}

/// The reconciler moves one expired claim to `unknown`, conditioned on the claim it saw (owner and
/// revision), so a record just re-claimed or already written back is left alone. Returns whether
/// it moved.
pub async fn mark_expired_unknown(
    pool: &PgPool,
    operation_id: &str,
    dispatch_owner: &str,
    revision: i64,
) -> Result<bool, ProtocolError> {
    crate::notices::durable("mark_unknown", Uuid::nil(), async {
        let sql = unknown_status(sql::stmt("mark_expired_unknown", sql::MARK_EXPIRED_UNKNOWN).into_owned());
        let moved = if write_path::api() {
            sqlx::query_scalar::<_, i64>("SELECT fp_mark_expired_unknown($1, $2, $3)")
                .bind(operation_id)
                .bind(dispatch_owner)
                .bind(revision)
                .fetch_one(pool)
                .await
                .map(|n| n as u64)
        } else {
            sqlx::query(&sql)
                .bind(operation_id)
                .bind(dispatch_owner)
                .bind(revision)
                .execute(pool)
                .await
                .map(|d| d.rows_affected())
        }
        .map_err(|e| classify_write_error(e, "mark_unknown", Uuid::nil()))?
            == 1;
        if moved {
            crate::metrics::METRICS.moved_to_unknown();
        }
        Ok(moved)
    })
    .await
}

/// Every operation in `unknown`.
pub async fn unknown_operations(pool: &PgPool) -> Result<Vec<Operation>, ProtocolError> {
    Ok(sqlx::query_as::<_, Operation>(&format!(
        "SELECT {OPERATION_COLUMNS} FROM tool_operations WHERE status = 'unknown' ORDER BY updated_at"
    ))
    .fetch_all(pool)
    .await?)
}

/// Read one operation.
pub async fn read_operation(pool: &PgPool, operation_id: &str) -> Result<Operation, ProtocolError> {
    sqlx::query_as::<_, Operation>(&format!("SELECT {OPERATION_COLUMNS} FROM tool_operations WHERE operation_id = $1"))
        .bind(operation_id)
        .fetch_optional(pool)
        .await?
        .ok_or_else(|| ProtocolError::OperationNotFound(operation_id.into()))
}

/// Converge an `unknown` operation to the remote fact, conditioned on the revision it was read at.
pub async fn converge(
    pool: &PgPool,
    operation_id: &str,
    expected_revision: i64,
    outcome: &Settled,
) -> Result<i64, ProtocolError> {
    crate::notices::durable("converge", Uuid::nil(), async {
        let (remote_id, result) = outcome.parts();
        let sql = if write_path::api() {
            std::borrow::Cow::Borrowed("SELECT revision FROM fp_converge($1, $2, $3, $4, $5::jsonb)")
        } else {
            sql::stmt("converge", sql::CONVERGE)
        };
        let done: Option<(i64,)> = sqlx::query_as(&sql)
            .bind(operation_id)
            .bind(expected_revision)
            .bind(outcome.status())
            .bind(remote_id)
            .bind(result)
            .fetch_optional(pool)
            .await
            .map_err(|e| classify_write_error(e, "converge", Uuid::nil()))?;
        match done {
            Some((rev,)) => Ok(rev),
            None => Err(rejected(pool, operation_id).await),
        }
    })
    .await
}

/// Where an unknown outcome goes: `unknown`, or (MUTANT dispatcher-resets-to-prepared) back to
/// `prepared`, to be dispatched again.
/// A statement that moves a claim to `unknown`, as the named mutant dispatcher-resets-to-prepared
/// would have it (back to `prepared`) when that mutant is on.
fn unknown_status(sql: String) -> String {
    if mutant::active(Mutant::DispatcherResetsToPrepared) {
        sql.replacen("status = 'unknown'", "status = 'prepared'", 1)
    } else {
        sql
    }
}

async fn rejected(pool: &PgPool, operation_id: &str) -> ProtocolError {
    match read_operation(pool, operation_id).await {
        Ok(op) => ProtocolError::LedgerWriteRejected {
            operation_id: operation_id.into(),
            status: op.status,
            dispatch_owner: op.dispatch_owner,
            revision: op.revision,
        },
        Err(e) => e,
    }
}
