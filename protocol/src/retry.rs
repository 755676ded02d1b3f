//! Error classification and the retry budget for SQLSTATE 40001 (spec section 07).
//!
//! - A serialization failure (40001) or deadlock (40P01) means the transaction did not commit:
//!   retry the whole short transaction from the start, up to a budget.
//! - An error returned by the server for a statement means that statement (and, inside a
//!   transaction, the transaction) did not take effect.
//! - An error without a server answer (I/O, closed connection, timeout) on COMMIT or on an
//!   autocommit write means the outcome is unknown: read back, never assume failure.
//! - No connection to be had (the pool's wait for one ran out, or the server refused a new
//!   session: SQLSTATE 53300) means nothing was sent: the write did not happen
//!   ([`crate::error::no_connection`]).

use std::future::Future;

use uuid::Uuid;

use crate::error::{no_connection, ProtocolError};

/// How many times a short transaction may be run in total when it keeps hitting 40001.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryBudget {
    pub attempts: u32,
}

impl Default for RetryBudget {
    fn default() -> Self {
        RetryBudget { attempts: 5 }
    }
}

/// True for SQLSTATE 40001 (serialization_failure) and 40P01 (deadlock_detected): both roll the
/// transaction back and both are safe to retry as a whole.
pub fn is_retryable(e: &ProtocolError) -> bool {
    match e {
        ProtocolError::Database(sqlx::Error::Database(db)) => {
            matches!(db.code().as_deref(), Some("40001") | Some("40P01"))
        }
        _ => false,
    }
}

/// True when the server itself answered with an error (so the write did not happen).
pub fn server_answered(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(_) | sqlx::Error::RowNotFound | sqlx::Error::ColumnDecode { .. })
}

/// Classify an error from COMMIT or from an autocommit write: a server answer is definite, and so
/// is no connection at all (nothing was sent); anything else leaves the outcome unknown.
pub fn classify_write_error(e: sqlx::Error, operation: &'static str, run_id: Uuid) -> ProtocolError {
    if server_answered(&e) || no_connection(&e) {
        ProtocolError::Database(e)
    } else {
        ProtocolError::OutcomeUnknown { operation, run_id, detail: e.to_string() }
    }
}

/// Run `attempt` until it succeeds, fails with a non-retryable error, or the budget is spent.
pub async fn with_retry<T, F, Fut>(budget: RetryBudget, mut attempt: F) -> Result<T, ProtocolError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ProtocolError>>,
{
    // MUTANT retry-40001-forever: no budget; the transaction is retried until it commits.
    let attempts = if crate::mutant::active(crate::mutant::Mutant::RetrySerializationForever) {
        u32::MAX
    } else {
        budget.attempts.max(1)
    };
    for n in 1..=attempts {
        match attempt().await {
            Err(e) if is_retryable(&e) && n < attempts => {
                tracing::debug!(attempt = n, "serialization failure; retrying the whole transaction");
                continue;
            }
            Err(e) if is_retryable(&e) => {
                return Err(ProtocolError::RetryBudgetExhausted { attempts });
            }
            other => return other,
        }
    }
    unreachable!("the loop returns on its last attempt")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn non_retryable_errors_return_at_once() {
        let calls = AtomicU32::new(0);
        let r: Result<(), _> = with_retry(RetryBudget { attempts: 4 }, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(ProtocolError::Conflict { run_id: Uuid::nil(), expected: 1, found: Some(2) })
        })
        .await;
        assert!(matches!(r, Err(ProtocolError::Conflict { .. })));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn success_is_returned() {
        let r = with_retry(RetryBudget::default(), || async { Ok::<_, ProtocolError>(7) }).await;
        assert_eq!(r.unwrap(), 7);
    }

    #[test]
    fn io_errors_on_commit_are_unknown_outcomes() {
        let e = sqlx::Error::Io(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset"));
        assert!(matches!(classify_write_error(e, "commit", Uuid::nil()), ProtocolError::OutcomeUnknown { .. }));
        let e = sqlx::Error::PoolClosed;
        assert!(matches!(classify_write_error(e, "commit", Uuid::nil()), ProtocolError::OutcomeUnknown { .. }));
    }

    /// A write that got no connection was never sent: a definite failure the caller can tell as
    /// the database out of connections, never an unknown outcome to read back.
    #[test]
    fn no_connection_is_definite_and_told_apart() {
        let e = classify_write_error(sqlx::Error::PoolTimedOut, "mark_unknown", Uuid::nil());
        assert!(matches!(e, ProtocolError::Database(sqlx::Error::PoolTimedOut)), "{e:?}");
        assert!(e.out_of_connections());
        let io = sqlx::Error::Io(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset"));
        assert!(!ProtocolError::Database(io).out_of_connections());
        assert!(!ProtocolError::Conflict { run_id: Uuid::nil(), expected: 1, found: None }.out_of_connections());
    }
}
