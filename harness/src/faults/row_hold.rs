//! A row held by the harness: a transaction that rewrites one protocol row to itself (a no-op
//! UPDATE, so the row gets a new version) and stays open. A statement of the code under test that
//! touches the row waits on it inside PostgreSQL (seen through `pg_blocking_pids`), and when the
//! harness commits, PostgreSQL re-evaluates that statement's conditions on the new version
//! (READ COMMITTED's re-check), at that later moment. That makes "judged on the database clock at
//! the moment of the check" testable without any cooperation from the worker: hold the lease row,
//! let the worker's renewal or save start while the lease is live, wait until it has expired, heal.
//! Healed by commit; a hold dropped unhealed is rolled back when its connection closes.

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::{Connection, PgConnection};

use super::fault::Fault;
use crate::error::{HarnessError, Result};
use crate::wait;

/// A hold of the row `table` WHERE `key_column = key` (text compared).
pub struct RowHold {
    url: String,
    app: String,
    table: String,
    key: String,
    sql: String,
    /// Rewritten to itself (`update`), share-locked (`share`) or key-share-locked (`key-share`).
    how: &'static str,
    conn: Option<PgConnection>,
    pid: i32,
}

impl RowHold {
    /// Rewrite the row to itself, on the database at `url`, from a session named `app`: every
    /// writer and locker waits, and re-checks on release.
    pub fn update(url: &str, app: &str, table: &str, key_column: &str, key: &str) -> RowHold {
        let sql = format!("UPDATE {table} SET updated_at = updated_at WHERE {key_column}::text = $1");
        RowHold::with(url, app, table, key, sql, "update")
    }

    /// Hold the row with a share lock only (no new version): a `FOR UPDATE` read and an UPDATE of
    /// it wait, while plain reads and `INSERT … ON CONFLICT DO NOTHING` go on. So a statement
    /// sequence that reads the row without locking it runs up to its write and waits there.
    pub fn share(url: &str, app: &str, table: &str, key_column: &str, key: &str) -> RowHold {
        let sql = format!("SELECT 1 FROM {table} WHERE {key_column}::text = $1 FOR SHARE");
        RowHold::with(url, app, table, key, sql, "share")
    }

    /// Hold the row with a key-share lock only: a `FOR UPDATE` read and a DELETE wait, while an
    /// UPDATE that leaves the key alone (and `FOR SHARE`) goes on. So a write whose first step
    /// locks the row `FOR UPDATE` waits before its check, while another session's UPDATE of the
    /// same row (a takeover) commits; released, the waiting read follows the row to that version.
    pub fn key_share(url: &str, app: &str, table: &str, key_column: &str, key: &str) -> RowHold {
        let sql = format!("SELECT 1 FROM {table} WHERE {key_column}::text = $1 FOR KEY SHARE");
        RowHold::with(url, app, table, key, sql, "key-share")
    }

    fn with(url: &str, app: &str, table: &str, key: &str, sql: String, how: &'static str) -> RowHold {
        RowHold { url: url.into(), app: app.into(), table: table.into(), key: key.into(), sql, how, conn: None, pid: 0 }
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
}

impl Fault for RowHold {
    fn name(&self) -> &'static str {
        "row-hold"
    }

    fn target(&self) -> String {
        "database".into()
    }

    fn actions(&self) -> (&'static str, &'static str) {
        ("row_hold", "row_release")
    }

    fn describe(&self) -> Value {
        json!({"table": self.table, "key": self.key, "how": self.how})
    }

    async fn inject(&mut self) -> Result<Value> {
        let opts: sqlx::postgres::PgConnectOptions = self.url.parse()?;
        let mut conn = PgConnection::connect_with(&opts.application_name(&self.app)).await?;
        sqlx::query("BEGIN").execute(&mut conn).await?;
        // The hold itself never waits long on someone else's lock.
        sqlx::query("SET LOCAL lock_timeout = '15s'").execute(&mut conn).await?;
        let n = sqlx::query(&self.sql).bind(&self.key).execute(&mut conn).await?.rows_affected();
        if n != 1 {
            return Err(HarnessError::Other(format!("row hold: `{}` with {} matched {n} rows", self.sql, self.key)));
        }
        self.pid = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut conn).await?;
        self.conn = Some(conn);
        Ok(json!({"holder_pid": self.pid}))
    }

    /// Commit the no-op, releasing the waiter.
    async fn heal(&mut self) -> Result<()> {
        if let Some(mut c) = self.conn.take() {
            sqlx::query("COMMIT").execute(&mut c).await?;
            let _ = c.close().await;
        }
        Ok(())
    }

    fn heal_now(&mut self) {
        // Rolled back when the connection closes.
        self.conn = None;
    }
}
