//! One writer's statements held inside the database (`harness/sql/held_write.sql`): a statement
//! trigger on a library's table makes every INSERT, UPDATE or DELETE of the armed session wait for
//! an advisory lock the harness holds ([`DbBarrier`]), before it reads or locks a row. So the held
//! write has touched nothing yet and another writer's statements on the same rows go on; released,
//! the write re-checks its conditions on the rows as they are then (READ COMMITTED). It is §05's
//! "valid at check, expired at commit" made on purpose: the writer sent its write while its claim
//! stood, and the database sees it only after the claim expired and someone else took over.
//! Healed by releasing the lock and disarming.

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::PgPool;

use super::barrier::DbBarrier;
use super::fault::Fault;
use crate::error::Result;

pub const HELD_WRITE_SQL: &str = include_str!("../../sql/held_write.sql");

/// Install the trigger on `table` (schema-qualified), disarmed. Needs the `fenceproof_audit`
/// schema; install it before any writer runs (creating a trigger waits for every open
/// transaction that wrote the table).
pub async fn install(pool: &PgPool, table: &str) -> Result<()> {
    sqlx::raw_sql(HELD_WRITE_SQL).execute(pool).await?;
    sqlx::query("SELECT fenceproof_audit.hold_writes_on($1::regclass)").bind(table).execute(pool).await?;
    Ok(())
}

/// The statements of the session named `writer` held, on every table the trigger watches, when
/// the client's statement matches `pattern` (a case-insensitive regex: the library's outcome call,
/// not its polls or heartbeats).
pub struct HeldWrite {
    pool: PgPool,
    writer: String,
    pattern: String,
    barrier: DbBarrier,
    armed: bool,
}

impl HeldWrite {
    /// `url` is the database's; `key` an advisory lock key nobody else uses.
    pub fn new(pool: &PgPool, url: &str, writer: &str, pattern: &str, key: i64) -> HeldWrite {
        HeldWrite {
            pool: pool.clone(),
            writer: writer.into(),
            pattern: pattern.into(),
            barrier: DbBarrier::new(url, key),
            armed: false,
        }
    }

    /// Wait until a statement of the writer waits on the hold; its backend pid and its text.
    pub async fn wait_held(&self, timeout: Duration) -> Result<(i32, String)> {
        let pid = self.barrier.wait_blocked(&self.pool, std::slice::from_ref(&self.writer), 1, timeout).await?[0];
        let query: Option<String> = sqlx::query_scalar("SELECT query FROM pg_stat_activity WHERE pid = $1")
            .bind(pid)
            .fetch_optional(&self.pool)
            .await?;
        Ok((pid, query.unwrap_or_default()))
    }

    /// The harness session holding the lock (0 until injected).
    pub fn holder_pid(&self) -> i32 {
        self.barrier.holder_pid
    }
}

impl Fault for HeldWrite {
    fn name(&self) -> &'static str {
        "held-write"
    }

    fn target(&self) -> String {
        self.writer.clone()
    }

    fn actions(&self) -> (&'static str, &'static str) {
        ("write_hold", "write_release")
    }

    fn describe(&self) -> Value {
        json!({"key": self.barrier.key, "pattern": self.pattern})
    }

    /// Take the lock, then arm the writer (in that order: an armed writer never passes unheld).
    async fn inject(&mut self) -> Result<Value> {
        let held = self.barrier.inject().await?;
        sqlx::query("INSERT INTO fenceproof_audit.held_writers (app, key, pattern) VALUES ($1, $2, $3)")
            .bind(&self.writer)
            .bind(self.barrier.key)
            .bind(&self.pattern)
            .execute(&self.pool)
            .await?;
        self.armed = true;
        Ok(held)
    }

    /// Release the lock (the held statements go on), then disarm.
    async fn heal(&mut self) -> Result<()> {
        self.barrier.heal().await?;
        if std::mem::take(&mut self.armed) {
            sqlx::query("DELETE FROM fenceproof_audit.held_writers WHERE app = $1")
                .bind(&self.writer)
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }

    fn heal_now(&mut self) {
        // The lock ends with its session; an armed row left behind only takes a free lock.
        self.barrier.heal_now();
        self.armed = false;
    }
}
