//! A team's own schema (the contract's `database.migrations`): its SQL files applied in the
//! harness's template instead of fenceproof's migrations, then checked for the protocol's tables
//! and columns (spec §04) before the oracle is installed beside them. Extra columns, tenant keys,
//! triggers and functions of the team's own are expected; a missing protocol column is one line.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sqlx::PgPool;

use crate::error::{HarnessError, Result};

/// The protocol's tables and the columns of each that the harness, its oracle and a worker on
/// the direct path use (spec §04).
pub const PROTOCOL_COLUMNS: &[(&str, &[&str])] = &[
    ("agent_tasks", &["task_id", "active_run_id", "created_at", "updated_at"]),
    ("agent_runs", &["run_id", "task_id", "status", "revision", "checkpoint", "created_at", "updated_at"]),
    ("worker_leases", &["run_id", "owner", "epoch", "expires_at", "updated_at"]),
    (
        "tool_operations",
        &[
            "operation_id",
            "run_id",
            "step_id",
            "effect_version",
            "tool_name",
            "request_digest",
            "request_body",
            "status",
            "dispatch_owner",
            "dispatch_until",
            "remote_id",
            "result",
            "revision",
            "updated_at",
        ],
    ),
];

/// The team's migrations this process applies instead of fenceproof's: (file name, SQL), in order.
static CHOSEN: Mutex<Option<Vec<(String, String)>>> = Mutex::new(None);

/// Read the team's migration files (each path as the contract resolved it); `None` for fenceproof's.
pub fn choose(files: &[PathBuf]) -> Result<()> {
    let chosen = if files.is_empty() {
        None
    } else {
        let mut read = Vec::new();
        for f in files {
            let sql = std::fs::read_to_string(f)
                .map_err(|e| HarnessError::TeamSchema(format!("database.migrations: {}: {e}", f.display())))?;
            read.push((name(f), sql));
        }
        Some(read)
    };
    *CHOSEN.lock().expect("team schema lock") = chosen;
    Ok(())
}

fn name(f: &Path) -> String {
    f.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| f.display().to_string())
}

/// The team's migrations, when this process was given them.
pub fn chosen() -> Option<Vec<(String, String)>> {
    CHOSEN.lock().expect("team schema lock").clone()
}

/// Apply the team's migrations to the database behind `pool`, then check the protocol's tables
/// and columns: a migration that fails, or a missing column, is a [`HarnessError::TeamSchema`].
pub async fn apply(pool: &PgPool, migrations: &[(String, String)]) -> Result<()> {
    for (name, sql) in migrations {
        sqlx::raw_sql(sql)
            .execute(pool)
            .await
            .map_err(|e| HarnessError::TeamSchema(format!("database.migrations: {name} failed: {e}")))?;
    }
    let missing = missing(pool).await?;
    if !missing.is_empty() {
        return Err(HarnessError::TeamSchema(format!(
            "the team's schema lacks the protocol's {} (spec §04; database.migrations)",
            missing.join(", ")
        )));
    }
    // The worker role of the fp_* path, with no privilege: its login exists, so the rows that
    // name it find it, and it can do nothing in the team's schema.
    sqlx::raw_sql(
        "DO $$ BEGIN
           IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fenceproof_worker') THEN
             CREATE ROLE fenceproof_worker NOLOGIN;
           END IF;
         END $$",
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// The protocol's tables and columns (`table` or `table.column`) the public schema lacks.
pub async fn missing(pool: &PgPool) -> Result<Vec<String>> {
    let have: Vec<(String, String)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text FROM information_schema.columns WHERE table_schema = 'public'",
    )
    .fetch_all(pool)
    .await?;
    let mut missing = Vec::new();
    for (table, columns) in PROTOCOL_COLUMNS {
        if !have.iter().any(|(t, _)| t == table) {
            missing.push(format!("table {table}"));
            continue;
        }
        for c in *columns {
            if !have.iter().any(|(t, col)| t == table && col == c) {
                missing.push(format!("{table}.{c}"));
            }
        }
    }
    Ok(missing)
}
