//! The protected state transition (spec sections 06 and 07).
//!
//! One short READ COMMITTED transaction: lock the run's lease row, validate owner + epoch + expiry on
//! the database clock, compare-and-set the run's revision and status, commit. A takeover that arrives
//! while the lease row is locked waits for this transaction to end, so takeover and commit have a
//! deterministic serial order. Nothing slow (HTTP, LLM, queues) may ever run inside.

use serde_json::Value;
use sqlx::{PgConnection, PgPool};

use crate::error::ProtocolError;
use crate::faults::{FaultPoint, FaultPoints};
use crate::ids::{Lease, RunStatus};
use crate::intents::{self, Registration};
use crate::lease::lost;
use crate::mutant::{self, Mutant};
use crate::operation::Intent;
use crate::retry::{classify_write_error, with_retry, RetryBudget};
use crate::sql;
use crate::write_path;

/// One row of the state transition table that a lease holder may perform.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub name: &'static str,
    pub from: RunStatus,
    pub to: RunStatus,
    /// The new checkpoint; `None` keeps the current one.
    pub checkpoint: Option<Value>,
}

impl Transition {
    /// pending -> running.
    pub fn start(checkpoint: Option<Value>) -> Transition {
        Transition { name: "start", from: RunStatus::Pending, to: RunStatus::Running, checkpoint }
    }
    /// running -> running with a new checkpoint.
    pub fn save(checkpoint: Value) -> Transition {
        Transition { name: "save", from: RunStatus::Running, to: RunStatus::Running, checkpoint: Some(checkpoint) }
    }
    /// running -> succeeded (normal completion).
    pub fn succeed(checkpoint: Option<Value>) -> Transition {
        Transition { name: "succeed", from: RunStatus::Running, to: RunStatus::Succeeded, checkpoint }
    }
    /// running -> failed (a deterministic business failure; never for a lost lease).
    pub fn fail(checkpoint: Option<Value>) -> Transition {
        Transition { name: "fail", from: RunStatus::Running, to: RunStatus::Failed, checkpoint }
    }
}

/// Perform `t` under `lease` if the run is still at `expected_revision`; returns the new revision.
///
/// Errors: `LeaseLost` (no commit right: cancel, write nothing terminal), `Conflict` (the revision
/// moved on: read back), `InvalidState` (the run is not in `t.from`), `OutcomeUnknown` (COMMIT got
/// no answer: read back with [`confirm_transition`]). 40001 retries the whole transaction.
pub async fn protected_transition(
    pool: &PgPool,
    lease: &Lease,
    expected_revision: i64,
    t: &Transition,
    faults: &FaultPoints,
    budget: RetryBudget,
) -> Result<i64, ProtocolError> {
    // MUTANT 40001-as-lease-lost: the first serialization failure is taken for a lost lease.
    let as_lost = mutant::active(Mutant::SerializationAsLeaseLost);
    let budget = if as_lost { RetryBudget { attempts: 1 } } else { budget };
    let r = crate::notices::durable(t.name, lease.run_id, async {
        let r = with_retry(budget, || attempt(pool, lease, expected_revision, t, faults, Within::Nothing))
            .await
            .map(|(r, _)| r);
        match r {
            Err(ProtocolError::RetryBudgetExhausted { .. }) if as_lost => Err(lost(lease)),
            // MUTANT conflict-retry-without-reread: the loser blindly retries at the revision it was
            // told, without re-reading and recomputing.
            Err(ProtocolError::Conflict { found: Some(found), .. })
                if mutant::active(Mutant::ConflictRetryWithoutReread) =>
            {
                with_retry(budget, || attempt(pool, lease, found, t, faults, Within::Nothing)).await.map(|(r, _)| r)
            }
            other => other,
        }
    })
    .await;
    crate::metrics::METRICS.protected(&r);
    r
}

/// What else the protected transaction does, inside the same transaction as the run update.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Within<'a> {
    Nothing,
    /// Insert the intent as a prepared operation (or confirm it is already the same intent).
    RegisterIntent(&'a Intent),
    /// Require this operation to belong to the run and to have a verified (succeeded) result.
    RequireResult(&'a str),
}

pub(crate) async fn attempt(
    pool: &PgPool,
    lease: &Lease,
    expected_revision: i64,
    t: &Transition,
    faults: &FaultPoints,
    within: Within<'_>,
) -> Result<(i64, Option<Registration>), ProtocolError> {
    // MUTANT check-then-commit: validate in a statement of its own, then write in a transaction
    // that holds no lock on the lease (the race of spec section 03).
    let check_first = mutant::active(Mutant::CheckThenCommit);
    if write_path::api() && !check_first {
        return attempt_api(pool, lease, expected_revision, t, faults, within).await;
    }
    if check_first {
        validate_unlocked(pool, lease).await?;
    }
    let mut tx = pool.begin().await?;
    let r = attempt_in(&mut tx, lease, expected_revision, t, faults, within, check_first).await;
    crate::tx::finish(tx, r, t.name, lease.run_id).await
}

/// The direct path's statements inside the transaction `attempt` ends.
async fn attempt_in(
    tx: &mut PgConnection,
    lease: &Lease,
    expected_revision: i64,
    t: &Transition,
    faults: &FaultPoints,
    within: Within<'_>,
    check_first: bool,
) -> Result<(i64, Option<Registration>), ProtocolError> {
    faults.pass(FaultPoint::AfterBegin, tx).await?;
    if !check_first {
        lock_and_validate(tx, lease).await?;
    }
    faults.pass(FaultPoint::AfterLeaseValidated, tx).await?;
    if let Within::RequireResult(op) = within {
        intents::require_verified_result(tx, lease.run_id, op).await?;
    }
    let revision = update_run(tx, lease, expected_revision, t).await?;
    let registration = match within {
        Within::RegisterIntent(intent) => Some(intents::register_intent(tx, intent).await?),
        _ => None,
    };
    faults.pass(FaultPoint::BeforeCommit, tx).await?;
    Ok((revision, registration))
}

/// The check-then-commit mutant's validation: a statement of its own, holding no lock afterwards.
async fn validate_unlocked(pool: &PgPool, lease: &Lease) -> Result<(), ProtocolError> {
    let held: Option<(Option<String>, i64, bool)> =
        sqlx::query_as("SELECT owner, epoch, expires_at > clock_timestamp() FROM worker_leases WHERE run_id = $1")
            .bind(lease.run_id)
            .fetch_optional(pool)
            .await?;
    if !matches!(&held, Some((Some(owner), epoch, true)) if *owner == lease.owner && *epoch == lease.epoch) {
        return Err(lost(lease));
    }
    Ok(())
}

/// Row-lock the run's lease inside the transaction and validate owner, epoch and expiry on the
/// database clock.
async fn lock_and_validate(tx: &mut PgConnection, lease: &Lease) -> Result<(), ProtocolError> {
    let waited = std::time::Instant::now();
    let held: Option<(Option<String>, i64, bool)> =
        sqlx::query_as(&sql::stmt("commit_lock_lease", sql::COMMIT_LOCK_LEASE))
            .bind(lease.run_id)
            .fetch_optional(&mut *tx)
            .await?;
    crate::metrics::METRICS.lease_row_lock_wait.observe(waited.elapsed().as_secs_f64());
    let valid = matches!(&held, Some((Some(owner), epoch, true)) if *owner == lease.owner && *epoch == lease.epoch);
    // MUTANT save-without-lease-check / rescue-by-time / trust-prefilter-lock: the lease is not
    // validated (for the last, because a lock outside the database was taken as the boundary).
    let unfenced = mutant::active(Mutant::SaveWithoutLeaseCheck)
        || mutant::active(Mutant::RescueByTime)
        || mutant::active(Mutant::TrustPrefilterLock);
    let accepted = valid || (unfenced && held.is_some());
    if !accepted {
        return Err(lost(lease));
    }
    Ok(())
}

/// Compare-and-set the run's revision and status; when no row matched, say why (no run, another
/// status, another revision).
async fn update_run(
    tx: &mut PgConnection,
    lease: &Lease,
    expected_revision: i64,
    t: &Transition,
) -> Result<i64, ProtocolError> {
    // MUTANT blind-overwrite / rescue-by-time: no compare-and-set on the revision.
    let sql = if mutant::active(Mutant::BlindOverwrite) || mutant::active(Mutant::RescueByTime) {
        sql::COMMIT_UPDATE_RUN.replace("revision = $2", "$2::bigint IS NOT NULL")
    } else {
        sql::stmt("commit_update_run", sql::COMMIT_UPDATE_RUN).into_owned()
    };
    let updated: Option<(i64,)> = sqlx::query_as(&sql)
        .bind(lease.run_id)
        .bind(expected_revision)
        .bind(&t.checkpoint)
        .bind(t.from.as_str())
        .bind(t.to.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    if let Some((revision,)) = updated {
        return Ok(revision);
    }
    let current: Option<(String, i64)> = sqlx::query_as("SELECT status, revision FROM agent_runs WHERE run_id = $1")
        .bind(lease.run_id)
        .fetch_optional(&mut *tx)
        .await?;
    Err(match current {
        None => ProtocolError::RunNotFound(lease.run_id),
        Some((status, _)) if status != t.from.as_str() => {
            ProtocolError::InvalidState { run_id: lease.run_id, found: status, needed: t.from.as_str().to_string() }
        }
        Some((_, found)) => {
            ProtocolError::Conflict { run_id: lease.run_id, expected: expected_revision, found: Some(found) }
        }
    })
}

/// The same transaction through `fp_run_transition`, the one entry point the worker role has for
/// run state: the function locks and validates the lease, checks a required result, compares and
/// sets the revision and registers the intent in one call. Without barriers the call is its own
/// transaction (one round trip, committed when the statement returns). With barriers it runs inside
/// BEGIN … COMMIT so they can hold it; `AfterLeaseValidated` is then passed right after the call,
/// with the lease row still locked by this transaction.
async fn attempt_api(
    pool: &PgPool,
    lease: &Lease,
    expected_revision: i64,
    t: &Transition,
    faults: &FaultPoints,
    within: Within<'_>,
) -> Result<(i64, Option<Registration>), ProtocolError> {
    let (require, intent) = match within {
        Within::Nothing => (None, None),
        Within::RegisterIntent(intent) => (None, Some(intent)),
        Within::RequireResult(op) => (Some(op), None),
    };
    let digest = intent.map(|i| i.digest());
    let held = !faults.barriers.is_empty();
    let mut tx = if held { Some(pool.begin().await?) } else { None };
    if let Some(tx) = tx.as_mut() {
        faults.pass(FaultPoint::AfterBegin, tx).await?;
    }
    let waited = std::time::Instant::now();
    let call = sqlx::query_as(
        "SELECT outcome, revision, detail FROM fp_run_transition($1::uuid, $2::text, $3::bigint, $4::bigint, \
         $5::text, $6::text, $7::jsonb, $8::text, $9::text, $10::text, $11::integer, $12::text, $13::text, $14::jsonb)",
    )
    .bind(lease.run_id)
    .bind(&lease.owner)
    .bind(lease.epoch)
    .bind(expected_revision)
    .bind(t.from.as_str())
    .bind(t.to.as_str())
    .bind(&t.checkpoint)
    .bind(require)
    .bind(intent.map(|i| &i.operation_id))
    .bind(intent.map(|i| &i.step_id))
    .bind(intent.map(|i| i.effect_version))
    .bind(intent.map(|i| &i.tool_name))
    .bind(digest.as_deref())
    .bind(intent.map(|i| &i.request_body));
    let answer: Result<(String, Option<i64>, Option<String>), sqlx::Error> = match tx.as_mut() {
        Some(tx) => call.fetch_one(&mut **tx).await,
        None => call.fetch_one(pool).await,
    };
    let settled = answer
        .map_err(|e| match (e, intent) {
            (sqlx::Error::Database(db), Some(i)) if db.code().as_deref() == Some("FP001") => {
                ProtocolError::IntentMismatch { operation_id: i.operation_id.clone(), detail: db.message().to_string() }
            }
            // Without an explicit transaction the call's answer is its commit's answer.
            (e, _) if tx.is_none() => classify_write_error(e, t.name, lease.run_id),
            (e, _) => e.into(),
        })
        .and_then(|(outcome, revision, detail)| {
            api_outcome(&outcome, revision, detail.as_deref(), lease, expected_revision, t, require)
                .map(|r| (r, detail))
        });
    // The call's whole duration: the lease row lock wait is most of it when it is contended.
    crate::metrics::METRICS.lease_row_lock_wait.observe(waited.elapsed().as_secs_f64());
    let (revision, detail) = end_held(tx, settled, faults, t, lease).await?;
    let registration = intent.map(|_| {
        if detail.as_deref() == Some("already_registered") {
            Registration::AlreadyRegistered
        } else {
            Registration::New
        }
    });
    Ok((revision, registration))
}

/// End the barrier-held transaction of the API path: after a success, pass the later barriers and
/// commit; after a refusal or an error, roll back at once. Without one, the call was its own.
async fn end_held<T>(
    tx: Option<sqlx::Transaction<'static, sqlx::Postgres>>,
    settled: Result<T, ProtocolError>,
    faults: &FaultPoints,
    t: &Transition,
    lease: &Lease,
) -> Result<T, ProtocolError> {
    let Some(mut tx) = tx else { return settled };
    let r = match settled {
        Ok(v) => async {
            faults.pass(FaultPoint::AfterLeaseValidated, &mut tx).await?;
            faults.pass(FaultPoint::BeforeCommit, &mut tx).await?;
            Ok(v)
        }
        .await
        .map_err(|e: sqlx::Error| ProtocolError::from(e)),
        Err(e) => Err(e),
    };
    crate::tx::finish(tx, r, t.name, lease.run_id).await
}

/// What `fp_run_transition` answered, as this crate's result: the new revision, or the error the
/// table path would have raised for the same refusal.
fn api_outcome(
    outcome: &str,
    revision: Option<i64>,
    detail: Option<&str>,
    lease: &Lease,
    expected_revision: i64,
    t: &Transition,
    require: Option<&str>,
) -> Result<i64, ProtocolError> {
    let run_id = lease.run_id;
    match (outcome, revision) {
        ("ok", Some(revision)) => Ok(revision),
        ("lease_lost", _) => Err(lost(lease)),
        ("run_not_found", _) => Err(ProtocolError::RunNotFound(run_id)),
        ("invalid_state", _) => Err(ProtocolError::InvalidState {
            run_id,
            found: detail.unwrap_or_default().to_string(),
            needed: t.from.as_str().to_string(),
        }),
        // A (from, to) pair the state table does not give a worker; this crate never asks for one.
        ("forbidden_transition", _) => Err(ProtocolError::InvalidState {
            run_id,
            found: format!("a forbidden transition ({})", detail.unwrap_or_default()),
            needed: "a transition of the state table".to_string(),
        }),
        ("conflict", found) => Err(ProtocolError::Conflict { run_id, expected: expected_revision, found }),
        ("operation_not_found", _) => Err(ProtocolError::OperationNotFound(require.unwrap_or_default().to_string())),
        ("foreign_operation", _) => Err(ProtocolError::ForeignOperation {
            operation_id: require.unwrap_or_default().to_string(),
            operation_run: detail.and_then(|d| d.parse().ok()).unwrap_or_default(),
            run_id,
        }),
        ("operation_not_settled", _) => Err(ProtocolError::OperationNotSettled {
            operation_id: require.unwrap_or_default().to_string(),
            status: detail.unwrap_or_default().to_string(),
        }),
        (other, _) => Err(ProtocolError::Database(sqlx::Error::Protocol(format!(
            "fp_run_transition answered an unknown outcome {other:?}"
        )))),
    }
}

/// What a read-back after `OutcomeUnknown` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadBack {
    /// The run shows exactly this transition's result at `expected_revision + 1`.
    Committed { revision: i64 },
    /// The run is still at `expected_revision`: the transition did not commit.
    NotCommitted,
    /// Someone else moved the run on; the caller no longer knows and must not continue.
    Superseded { revision: i64, status: String },
}

/// Read back from the primary whether a transition whose COMMIT got no answer took effect.
pub async fn confirm_transition(
    pool: &PgPool,
    run_id: uuid::Uuid,
    expected_revision: i64,
    t: &Transition,
) -> Result<ReadBack, ProtocolError> {
    let row: Option<(String, i64, Value)> =
        sqlx::query_as("SELECT status, revision, checkpoint FROM agent_runs WHERE run_id = $1")
            .bind(run_id)
            .fetch_optional(pool)
            .await?;
    let Some((status, revision, checkpoint)) = row else {
        return Err(ProtocolError::RunNotFound(run_id));
    };
    let ours = status == t.to.as_str() && t.checkpoint.as_ref().is_none_or(|c| *c == checkpoint);
    Ok(if revision == expected_revision + 1 && ours {
        ReadBack::Committed { revision }
    } else if revision == expected_revision && status == t.from.as_str() {
        ReadBack::NotCommitted
    } else {
        ReadBack::Superseded { revision, status }
    })
}
