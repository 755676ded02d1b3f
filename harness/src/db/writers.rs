//! Who can still write the protocol's tables directly (spec §13): every role holding INSERT,
//! UPDATE, DELETE or TRUNCATE on `agent_tasks`, `agent_runs`, `worker_leases` or `tool_operations`
//! of one schema, by grant or through role membership, read from the catalogue with
//! `has_table_privilege` (read-only: nothing is changed). Superusers and the tables' owners are
//! marked: they can always write (the migrations, the control plane). Any other role that can is a
//! write path around the fencing, which the rollout's revoke step must close.

use serde::Serialize;
use sqlx::PgPool;

use crate::error::{HarnessError, Result};

/// The protocol's tables.
pub const TABLES: [&str; 4] = ["agent_tasks", "agent_runs", "worker_leases", "tool_operations"];

/// One role that can write at least one of the protocol's tables without the fp_* functions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DirectWriter {
    pub role: String,
    pub can_login: bool,
    pub superuser: bool,
    /// Owns the tables, or is a member of the role that does.
    pub owner: bool,
    /// `"UPDATE agent_runs"`, ...
    pub grants: Vec<String>,
}

impl DirectWriter {
    /// A writer that the rollout must close: not a superuser and not the tables' owner.
    pub fn is_bypass(&self) -> bool {
        !self.superuser && !self.owner
    }
}

/// The direct writers of the protocol's tables in `schema` (default: the session's current schema).
pub async fn direct_writers(pool: &PgPool, schema: Option<&str>) -> Result<Vec<DirectWriter>> {
    let tables: Vec<String> = TABLES.iter().map(|t| t.to_string()).collect();
    let found: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = coalesce($1, current_schema()) AND c.relname = ANY($2) AND c.relkind IN ('r', 'p')",
    )
    .bind(schema)
    .bind(&tables)
    .fetch_one(pool)
    .await?;
    if found < TABLES.len() as i64 {
        return Err(HarnessError::Other(format!(
            "the protocol's tables ({}) are not all in schema {}",
            TABLES.join(", "),
            schema.unwrap_or("(the current one)")
        )));
    }
    let rows: Vec<(String, bool, bool, bool, Vec<String>)> = sqlx::query_as(
        "WITH t AS (
           SELECT c.oid, c.relname, c.relowner FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = coalesce($1, current_schema()) AND c.relname = ANY($2) AND c.relkind IN ('r', 'p'))
         SELECT r.rolname::text, r.rolcanlogin, r.rolsuper,
                bool_or(pg_has_role(r.oid, t.relowner, 'USAGE')),
                array_agg(p.priv || ' ' || t.relname ORDER BY t.relname, p.priv)
                  FILTER (WHERE has_table_privilege(r.oid, t.oid, p.priv))
           FROM pg_roles r
          CROSS JOIN t
          CROSS JOIN (VALUES ('INSERT'), ('UPDATE'), ('DELETE'), ('TRUNCATE')) AS p(priv)
          WHERE r.rolname NOT LIKE 'pg\\_%'
          GROUP BY r.rolname, r.rolcanlogin, r.rolsuper
         HAVING bool_or(has_table_privilege(r.oid, t.oid, p.priv))
          ORDER BY r.rolname",
    )
    .bind(schema)
    .bind(&tables)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(role, can_login, superuser, owner, grants)| DirectWriter { role, can_login, superuser, owner, grants })
        .collect())
}
