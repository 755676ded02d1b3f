//! A row held by the harness: a transaction that rewrites one protocol row to itself (a no-op
//! UPDATE, so the row gets a new version) and stays open. A statement of the code under test that
//! touches the row waits on it inside PostgreSQL (seen through `pg_blocking_pids`), and when the
//! harness commits, PostgreSQL re-evaluates that statement's conditions on the new version
//! (READ COMMITTED's re-check), at that later moment. That makes "judged on the database clock at
//! the moment of the check" testable without any cooperation from the worker: hold the lease row,
//! let the worker's renewal or save start while the lease is live, wait until it has expired, heal.
//! Healed by commit on every path (an abandoned hold is rolled back when its connection drops).

use std::time::Duration;

use sqlx::{Connection, PgConnection};

use crate::error::{HarnessError, Result};
use crate::wait;

pub struct RowHold {
    conn: Option<PgConnection>,
    pid: i32,
}

impl RowHold {
    /// Hold the row `table` WHERE `key_column = key` (text compared), on the database at `url`,
    /// by rewriting it to itself: every writer and locker waits, and re-checks on release.
    pub async fn hold(url: &str, app: &str, table: &str, key_column: &str, key: &str) -> Result<RowHold> {
        let sql = format!("UPDATE {table} SET updated_at = updated_at WHERE {key_column}::text = $1");
        RowHold::take(url, app, &sql, key).await
    }

    /// Hold the row with a share lock only (no new version): a `FOR UPDATE` read and an UPDATE of
    /// it wait, while plain reads and `INSERT … ON CONFLICT DO NOTHING` go on. So a statement
    /// sequence that reads the row without locking it runs up to its write and waits there.
    pub async fn share(url: &str, app: &str, table: &str, key_column: &str, key: &str) -> Result<RowHold> {
        let sql = format!("SELECT 1 FROM {table} WHERE {key_column}::text = $1 FOR SHARE");
        RowHold::take(url, app, &sql, key).await
    }

    async fn take(url: &str, app: &str, sql: &str, key: &str) -> Result<RowHold> {
        let opts: sqlx::postgres::PgConnectOptions = url.parse()?;
        let mut conn = PgConnection::connect_with(&opts.application_name(app)).await?;
        sqlx::query("BEGIN").execute(&mut conn).await?;
        // The hold itself never waits long on someone else's lock.
        sqlx::query("SET LOCAL lock_timeout = '15s'").execute(&mut conn).await?;
        let n = sqlx::query(sql).bind(key).execute(&mut conn).await?.rows_affected();
        if n != 1 {
            return Err(HarnessError::Other(format!("row hold: `{sql}` with {key} matched {n} rows")));
        }
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut conn).await?;
        Ok(RowHold { conn: Some(conn), pid })
    }

    /// Wait until a session whose application_name is `app` waits on this hold.
    pub async fn wait_blocked(&self, pool: &sqlx::PgPool, app: &str, timeout: Duration) -> Result<i32> {
        let (pool, app, pid) = (pool.clone(), app.to_string(), self.pid);
        wait::until(&format!("{app} to wait on the harness's row hold"), timeout, || {
            let (pool, app) = (pool.clone(), app.clone());
            async move {
                Ok(sqlx::query_scalar::<_, i32>(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND $2 = ANY(pg_blocking_pids(pid)) LIMIT 1",
                )
                .bind(&app)
                .bind(pid)
                .fetch_optional(&pool)
                .await?)
            }
        })
        .await
    }

    /// Whether a session whose application_name is `app` is waiting on this hold right now.
    pub async fn blocks(&self, pool: &sqlx::PgPool, app: &str) -> Result<bool> {
        Ok(sqlx::query_scalar::<_, bool>(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND $2 = ANY(pg_blocking_pids(pid)))",
        )
        .bind(app)
        .bind(self.pid)
        .fetch_one(pool)
        .await?)
    }

    /// Whether a session whose application_name is `app` waits on a lock at all right now: behind
    /// this hold, or behind another session queued on it (a second waiter waits on the first).
    pub async fn queued(&self, pool: &sqlx::PgPool, app: &str) -> Result<bool> {
        Ok(sqlx::query_scalar::<_, bool>(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND cardinality(pg_blocking_pids(pid)) > 0)",
        )
        .bind(app)
        .fetch_one(pool)
        .await?)
    }

    /// Heal: commit the no-op, releasing the waiter.
    pub async fn release(mut self) -> Result<()> {
        if let Some(mut c) = self.conn.take() {
            sqlx::query("COMMIT").execute(&mut c).await?;
            let _ = c.close().await;
        }
        Ok(())
    }
}
