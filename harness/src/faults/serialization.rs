//! Serialization failures on demand: the server answers a worker's writes of a table with SQLSTATE
//! 40001, the first `failures` of them, through the oracle's trigger (`harness/sql/oracle.sql`,
//! `serialization_faults`). The error is the server's own and aborts the writing transaction as a
//! real serialization failure does, on any write path (a fenced function or a plain UPDATE), so the
//! worker cannot tell it from one. Every attempt the armed writer makes takes a number from a
//! sequence a rollback does not return, so [`SerializationFailures::attempts`] counts the
//! worker's attempts across its aborted transactions. Healed by disarming.

use serde_json::{json, Value};
use sqlx::PgPool;

use super::fault::Fault;
use crate::error::Result;

/// More failures than any sane retry budget: a worker that is still trying after this many has none.
pub const ENDLESS: i64 = 100;

/// The next `failures` writes of `table` by the session named `writer` answered 40001.
pub struct SerializationFailures {
    pool: PgPool,
    schema: String,
    writer: String,
    table: String,
    failures: i64,
    armed: bool,
}

impl SerializationFailures {
    /// `schema` is the oracle's schema (it holds the trigger's table and sequence).
    pub fn new(pool: &PgPool, schema: &str, writer: &str, table: &str, failures: i64) -> SerializationFailures {
        SerializationFailures {
            pool: pool.clone(),
            schema: schema.to_string(),
            writer: writer.to_string(),
            table: table.to_string(),
            failures,
            armed: false,
        }
    }

    /// How many writes the armed writer attempted since the injection (failed ones included).
    pub async fn attempts(&self) -> Result<i64> {
        attempts(&self.pool, &self.schema).await
    }

    /// How many failures it answers at most.
    pub fn failures(&self) -> i64 {
        self.failures
    }
}

/// The attempts counted since the last injection.
pub async fn attempts(pool: &PgPool, schema: &str) -> Result<i64> {
    let (last, called): (i64, bool) =
        sqlx::query_as(&format!("SELECT last_value, is_called FROM {schema}.serialization_attempts"))
            .fetch_one(pool)
            .await?;
    Ok(if called { last } else { 0 })
}

impl Fault for SerializationFailures {
    fn name(&self) -> &'static str {
        "serialization-failure"
    }

    fn target(&self) -> String {
        self.writer.clone()
    }

    fn actions(&self) -> (&'static str, &'static str) {
        ("40001 armed", "40001 disarmed")
    }

    fn describe(&self) -> Value {
        json!({"table": self.table, "failures": self.failures})
    }

    async fn inject(&mut self) -> Result<Value> {
        let s = &self.schema;
        sqlx::query(&format!("SELECT setval('{s}.serialization_attempts', 1, false)")).execute(&self.pool).await?;
        sqlx::query(&format!(
            "INSERT INTO {s}.serialization_faults (writer, table_name, failures) VALUES ($1, $2, $3)
             ON CONFLICT (writer, table_name) DO UPDATE SET failures = EXCLUDED.failures"
        ))
        .bind(&self.writer)
        .bind(&self.table)
        .bind(self.failures)
        .execute(&self.pool)
        .await?;
        self.armed = true;
        Ok(json!({}))
    }

    async fn heal(&mut self) -> Result<()> {
        if std::mem::take(&mut self.armed) {
            sqlx::query(&format!(
                "DELETE FROM {}.serialization_faults WHERE writer = $1 AND table_name = $2",
                self.schema
            ))
            .bind(&self.writer)
            .bind(&self.table)
            .execute(&self.pool)
            .await?;
        }
        Ok(())
    }

    fn heal_now(&mut self) {
        if std::mem::take(&mut self.armed) {
            let (pool, sql) = (
                self.pool.clone(),
                format!("DELETE FROM {}.serialization_faults WHERE writer = $1 AND table_name = $2", self.schema),
            );
            let (writer, table) = (self.writer.clone(), self.table.clone());
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    let _ = sqlx::query(&sql).bind(writer).bind(table).execute(&pool).await;
                });
            }
        }
    }
}
