//! Every transaction of this crate ends before its call returns, committed or rolled back.
//!
//! sqlx only queues the ROLLBACK of a transaction dropped without a commit; a pooled connection
//! sends it from a background task when it is released. Under load that task runs late, so the
//! row locks of a refused write (the lease row, `FOR SHARE` on an operation) outlived the call that
//! returned the refusal, and a dispatcher's `SKIP LOCKED` claim passed the locked operation by (seen
//! as a flaky "operation still prepared" at a load average of 12 on two cores).

use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use crate::error::ProtocolError;
use crate::retry::classify_write_error;

/// Commit `tx` when `r` is a success (a failed commit classified as `name`'s write on `run_id`),
/// roll it back now when `r` is an error; returns `r`.
pub(crate) async fn finish<T>(
    tx: Transaction<'_, Postgres>,
    r: Result<T, ProtocolError>,
    name: &'static str,
    run_id: Uuid,
) -> Result<T, ProtocolError> {
    match r {
        Ok(v) => {
            tx.commit().await.map_err(|e| classify_write_error(e, name, run_id))?;
            Ok(v)
        }
        Err(e) => {
            // A rollback that fails leaves a broken connection, which sqlx closes instead of
            // pooling: its locks end with it. The refusal is the answer either way.
            let _ = tx.rollback().await;
            Err(e)
        }
    }
}
