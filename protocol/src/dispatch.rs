//! The dispatcher and the reconciler (spec section 09), written against a [`ToolAdapter`] so the
//! protocol knows nothing of HTTP: the embedding application says how to call each tool and what
//! the tool can promise.
//!
//! Dispatcher: claim (short transaction) -> call the tool with the stable operation_id (no
//! transaction open) -> write the verified result under the claim's owner + revision + digest. An
//! unknown outcome moves the claim to `unknown` with the evidence; a rejected write is reported,
//! never ignored.
//!
//! Reconciler: move expired claims to `unknown` (conditioned on the claim it saw), then for each
//! `unknown` operation do what the tool's capability allows: retry with the same key (idempotency
//! key), query by the deterministic resource id (and create under it only when the query says it
//! is absent), query by operation (converge when found), or nothing — leave it `unknown` and raise
//! it for manual handling.

use std::future::Future;

use serde::Serialize;
use serde_json::Value;
use sqlx::PgPool;

use crate::error::ProtocolError;
use crate::faults::{FaultPoint, FaultPoints};
use crate::ids::Ttl;
use crate::mutant::{self, Mutant};
use crate::outbox::{self, Operation, Settled};

/// What a tool can promise (spec section 09's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    IdempotencyKey,
    DeterministicId,
    OperationQuery,
    Neither,
}

/// What a remote call told us.
#[derive(Debug, Clone, PartialEq)]
pub enum RemoteAnswer {
    /// A definite remote fact.
    Done(Settled),
    /// The call may or may not have had an effect (timeout, dropped connection, 5xx).
    Unknown(String),
    /// A query says the operation / resource does not exist.
    Absent,
}

/// How the application reaches its tools.
pub trait ToolAdapter {
    fn capability(&self, tool: &str) -> Option<Capability>;
    /// Create, passing `operation_id` so the tool can deduplicate where it is able to.
    fn create(&self, tool: &str, operation_id: &str, request: &Value) -> impl Future<Output = RemoteAnswer>;
    /// Query the operation's effect, by operation_id or by the deterministic resource id.
    fn query(&self, op: &Operation) -> impl Future<Output = RemoteAnswer>;
}

/// One claimed operation's fate in a dispatch pass.
#[derive(Debug, Clone, Serialize)]
pub struct Dispatched {
    pub operation_id: String,
    pub tool: String,
    /// succeeded | failed_final | unknown | write_rejected
    pub outcome: String,
    pub detail: Option<String>,
}

/// Claim up to `limit` operations and dispatch them.
pub async fn dispatch_once<A: ToolAdapter>(
    pool: &PgPool,
    tools: &A,
    owner: &str,
    claim_ttl: Ttl,
    limit: i64,
    faults: &FaultPoints,
) -> Result<Vec<Dispatched>, ProtocolError> {
    // MUTANT claim-across-call: the claim transaction stays open while the tool is called and
    // commits only after the call; a dispatcher dying during the call rolls its claim back.
    let (claims, mut held) = if mutant::active(Mutant::ClaimAcrossCall) {
        let (claims, tx) = claim_held_open(pool, owner, claim_ttl, limit).await?;
        (claims, Some(tx))
    } else {
        (outbox::claim(pool, owner, claim_ttl, limit).await?, None)
    };
    let mut out = Vec::new();
    for c in claims {
        let answer = tools.create(&c.tool_name, &c.operation_id, &c.request_body).await;
        if let Some(tx) = held.take() {
            tx.commit().await?;
        }
        faults.pass_outside_tx(FaultPoint::BeforeResultWrite, pool).await?;
        let written = match &answer {
            RemoteAnswer::Done(s) => outbox::record_result(pool, &c, s).await.map(|_| s.status_label().to_string()),
            RemoteAnswer::Unknown(why) => outbox::mark_unknown_own(pool, &c, why).await.map(|_| "unknown".to_string()),
            RemoteAnswer::Absent => {
                outbox::mark_unknown_own(pool, &c, "create answered 'absent'").await.map(|_| "unknown".to_string())
            }
        };
        let (outcome, detail) = match written {
            Ok(o) => (o, None),
            Err(e @ ProtocolError::LedgerWriteRejected { .. }) => {
                tracing::warn!(operation_id = %c.operation_id, error = %e, "result write rejected; investigate");
                ("write_rejected".to_string(), Some(e.to_string()))
            }
            Err(e) => return Err(e),
        };
        out.push(Dispatched { operation_id: c.operation_id, tool: c.tool_name, outcome, detail });
    }
    if let Some(tx) = held.take() {
        tx.commit().await?;
    }
    Ok(out)
}

/// The claim of mutant `claim-across-call`: the same statement, in a transaction left open.
async fn claim_held_open(
    pool: &PgPool,
    owner: &str,
    claim_ttl: Ttl,
    limit: i64,
) -> Result<(Vec<outbox::Claim>, sqlx::Transaction<'static, sqlx::Postgres>), ProtocolError> {
    let api = "SELECT operation_id, run_id, tool_name, request_digest, request_body, dispatch_owner, revision
                 FROM fp_claim($1, $2, $3)";
    let direct = crate::sql::stmt("claim", crate::sql::CLAIM);
    let mut tx = pool.begin().await?;
    let claims = sqlx::query_as::<_, outbox::Claim>(if crate::write_path::api() { api } else { &direct })
        .bind(owner)
        .bind(claim_ttl.millis())
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
    Ok((claims, tx))
}

/// What one reconciler pass did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Reconciled {
    /// Expired claims moved to unknown.
    pub marked_unknown: Vec<String>,
    /// Unknown operations converged: (operation_id, new status).
    pub converged: Vec<(String, String)>,
    /// Unknown operations left unknown and raised for manual handling: (operation_id, why).
    pub raised: Vec<(String, String)>,
}

/// One reconciler pass.
pub async fn reconcile_once<A: ToolAdapter>(pool: &PgPool, tools: &A) -> Result<Reconciled, ProtocolError> {
    let mut r = Reconciled::default();
    for (op, owner, rev) in outbox::expired_claims(pool).await? {
        if outbox::mark_expired_unknown(pool, &op, &owner, rev).await? {
            r.marked_unknown.push(op);
        }
    }
    let oldest: Option<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM clock_timestamp() - min(updated_at))::float8 FROM tool_operations WHERE status = 'unknown'",
    )
    .fetch_one(pool)
    .await?;
    crate::metrics::METRICS.oldest_unknown(oldest.unwrap_or(0.0));
    for op in outbox::unknown_operations(pool).await? {
        match reconcile_one(pool, tools, &op).await? {
            Ok(status) => r.converged.push((op.operation_id, status)),
            Err(why) => r.raised.push((op.operation_id, why)),
        }
    }
    Ok(r)
}

/// Converge one `unknown` operation by what its tool allows: `Ok(Ok(status))` when it converged,
/// `Ok(Err(why))` when it stays unknown and is raised for manual handling.
pub async fn reconcile_one<A: ToolAdapter>(
    pool: &PgPool,
    tools: &A,
    op: &Operation,
) -> Result<Result<String, String>, ProtocolError> {
    // MUTANT retry-new-operation-id: the retry is sent under a fresh key.
    let key = if mutant::active(Mutant::RetryNewOperationId) {
        format!("{}-retry", op.operation_id)
    } else {
        op.operation_id.clone()
    };
    let answer = match tools.capability(&op.tool_name) {
        Some(Capability::IdempotencyKey) => tools.create(&op.tool_name, &key, &op.request_body).await,
        Some(Capability::DeterministicId) => match tools.query(op).await {
            // Absent by its deterministic id: a create under that id cannot duplicate it.
            RemoteAnswer::Absent => tools.create(&op.tool_name, &key, &op.request_body).await,
            other => other,
        },
        Some(Capability::OperationQuery) => match tools.query(op).await {
            RemoteAnswer::Absent => {
                RemoteAnswer::Unknown("the tool has no record of it; its acceptance records may have gaps".into())
            }
            other => other,
        },
        Some(Capability::Neither) => RemoteAnswer::Unknown("the tool offers neither query nor idempotency".into()),
        None => RemoteAnswer::Unknown(format!("no adapter for tool {}", op.tool_name)),
    };
    Ok(match answer {
        RemoteAnswer::Done(s) => match outbox::converge(pool, &op.operation_id, op.revision, &s).await {
            Ok(_) => Ok(s.status_label().into()),
            Err(e @ ProtocolError::LedgerWriteRejected { .. }) => Err(e.to_string()),
            Err(e) => return Err(e),
        },
        // MUTANT reconciler-marks-unknown-failed: what cannot be confirmed is declared failed.
        RemoteAnswer::Unknown(why) if mutant::active(Mutant::ReconcilerMarksUnknownFailed) => {
            let failed = Settled::FailedFinal { result: serde_json::json!({ "assumed_failed": why }) };
            outbox::converge(pool, &op.operation_id, op.revision, &failed).await?;
            Ok("failed_final".into())
        }
        RemoteAnswer::Unknown(why) => {
            tracing::warn!(operation_id = %op.operation_id, reason = %why, "operation stays unknown; manual handling needed");
            Err(why)
        }
        RemoteAnswer::Absent => Err("absent".into()),
    })
}
