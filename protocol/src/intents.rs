//! The ledger's half of the protected transaction (spec sections 07 and 08): registering a step's
//! intent as a prepared operation, and requiring a verified result before a run advances on it. Both
//! run inside the caller's transaction, after the lease is validated; [`crate::commit`] calls them
//! and [`crate::outbox`] builds its protected writes on top.

use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::ProtocolError;
use crate::operation::Intent;
use crate::sql;

/// What registering an intent found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Registration {
    /// Inserted as a new prepared operation.
    New,
    /// The same intent (same run, tool and digest) was already registered: nothing new.
    AlreadyRegistered,
}

/// Insert `intent` as a prepared operation in the caller's transaction, or confirm that the same
/// intent is already there. Another run, tool or digest under the same operation_id, or another
/// operation_id for the same (run, step, effect_version), is an [`ProtocolError::IntentMismatch`].
pub(crate) async fn register_intent(tx: &mut PgConnection, intent: &Intent) -> Result<Registration, ProtocolError> {
    let digest = intent.digest();
    let inserted = sqlx::query(&sql::stmt("intent_insert", sql::INTENT_INSERT))
        .bind(&intent.operation_id)
        .bind(intent.run_id)
        .bind(&intent.step_id)
        .bind(intent.effect_version)
        .bind(&intent.tool_name)
        .bind(&digest)
        .bind(&intent.request_body)
        .execute(&mut *tx)
        .await;
    match inserted {
        Ok(done) if done.rows_affected() == 1 => return Ok(Registration::New),
        Ok(_) => {}
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("23505") => {
            return Err(ProtocolError::IntentMismatch {
                operation_id: intent.operation_id.clone(),
                detail: format!(
                    "({}, {}, v{}) is already planned under another operation_id",
                    intent.run_id, intent.step_id, intent.effect_version
                ),
            });
        }
        Err(e) => return Err(e.into()),
    }
    let (run_id, tool, existing): (Uuid, String, String) = sqlx::query_as(&sql::stmt("intent_read", sql::INTENT_READ))
        .bind(&intent.operation_id)
        .fetch_one(&mut *tx)
        .await?;
    if run_id == intent.run_id && tool == intent.tool_name && existing == digest {
        Ok(Registration::AlreadyRegistered)
    } else {
        Err(ProtocolError::IntentMismatch {
            operation_id: intent.operation_id.clone(),
            detail: format!(
                "registered as run {run_id}, tool {tool}, digest {existing}; now run {}, tool {}, digest {digest}",
                intent.run_id, intent.tool_name
            ),
        })
    }
}

/// Inside a protected transaction: the operation must belong to `run_id` and be succeeded.
pub(crate) async fn require_verified_result(
    tx: &mut PgConnection,
    run_id: Uuid,
    operation_id: &str,
) -> Result<(), ProtocolError> {
    let row: Option<(Uuid, String)> = sqlx::query_as(&sql::stmt("require_result", sql::REQUIRE_RESULT))
        .bind(operation_id)
        .fetch_optional(&mut *tx)
        .await?;
    match row {
        None => Err(ProtocolError::OperationNotFound(operation_id.into())),
        Some((op_run, _)) if op_run != run_id => {
            Err(ProtocolError::ForeignOperation { operation_id: operation_id.into(), operation_run: op_run, run_id })
        }
        Some((_, status)) if status != "succeeded" => {
            Err(ProtocolError::OperationNotSettled { operation_id: operation_id.into(), status })
        }
        Some(_) => Ok(()),
    }
}
