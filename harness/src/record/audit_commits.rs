//! The audit's commit triggers on a job queue library's own table (`harness/sql/audit.sql`):
//! installed after the library created its schema, read back after the experiment.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgPool;

use crate::error::Result;

pub const AUDIT_SQL: &str = include_str!("../../sql/audit.sql");

/// One committed change of the watched table.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct AuditCommit {
    pub seq: i64,
    pub table_name: String,
    pub op: String,
    pub writer: String,
    pub backend_pid: i32,
    pub committed_at: DateTime<Utc>,
    pub old_row: Option<Value>,
    pub new_row: Option<Value>,
}

/// Install the triggers' schema and watch `table` (schema-qualified).
pub async fn install(pool: &PgPool, table: &str) -> Result<()> {
    sqlx::raw_sql(AUDIT_SQL).execute(pool).await?;
    sqlx::query("SELECT fenceproof_audit.watch($1::regclass)").bind(table).execute(pool).await?;
    Ok(())
}

/// Watch one more table (schema-qualified) with the triggers `install` put in place.
pub async fn watch(pool: &PgPool, table: &str) -> Result<()> {
    sqlx::query("SELECT fenceproof_audit.watch($1::regclass)").bind(table).execute(pool).await?;
    Ok(())
}

/// Every committed change, in commit order.
pub async fn read(pool: &PgPool) -> Result<Vec<AuditCommit>> {
    Ok(sqlx::query_as::<_, AuditCommit>(
        "SELECT seq, table_name, op, writer, backend_pid, committed_at, old_row, new_row
           FROM fenceproof_audit.commits ORDER BY seq",
    )
    .fetch_all(pool)
    .await?)
}
