//! Named fault points inside the protected transaction, in the spirit of fail-rs.
//!
//! A fault point does nothing unless a barrier is configured for it. A barrier makes the transaction
//! take a shared transaction-level advisory lock on a key the harness holds exclusively, so the
//! transaction really waits inside the database — visible in `pg_stat_activity` and
//! `pg_blocking_pids` — until the harness releases the key. No sleeps, no timing guesses.

use serde::{Deserialize, Serialize};
use sqlx::PgConnection;

/// Where in the protected transaction a barrier may hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultPoint {
    /// Right after BEGIN, before the lease row is locked.
    AfterBegin,
    /// After the lease row is locked and validated, before the run is updated.
    AfterLeaseValidated,
    /// After the run update, just before COMMIT.
    BeforeCommit,
    /// In a dispatcher: the remote call has answered, the result is not yet written.
    BeforeResultWrite,
    /// In a takeover: whatever the worker reads to decide it has been read, its write is next.
    BeforeTakeoverWrite,
}

/// One barrier: wait at `point` until advisory key `key` is free.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Barrier {
    pub point: FaultPoint,
    pub key: i64,
}

/// The barriers armed for one protected transaction (usually none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultPoints {
    pub barriers: Vec<Barrier>,
}

impl FaultPoints {
    pub fn none() -> FaultPoints {
        FaultPoints::default()
    }

    pub fn with(point: FaultPoint, key: i64) -> FaultPoints {
        FaultPoints { barriers: vec![Barrier { point, key }] }
    }

    /// Pass `point` outside any transaction: wait until each barrier armed there is free (taking
    /// and dropping a shared session-level lock on one connection).
    pub async fn pass_outside_tx(&self, point: FaultPoint, pool: &sqlx::PgPool) -> Result<(), sqlx::Error> {
        for b in self.barriers.iter().filter(|b| b.point == point) {
            let mut conn = pool.acquire().await?;
            sqlx::query("SELECT pg_advisory_lock_shared($1)").bind(b.key).execute(&mut *conn).await?;
            sqlx::query("SELECT pg_advisory_unlock_shared($1)").bind(b.key).execute(&mut *conn).await?;
        }
        Ok(())
    }

    /// Pass `point`: waits on every barrier armed there.
    pub async fn pass(&self, point: FaultPoint, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        for b in self.barriers.iter().filter(|b| b.point == point) {
            sqlx::query("SELECT pg_advisory_xact_lock_shared($1)").bind(b.key).execute(&mut *conn).await?;
        }
        Ok(())
    }
}
