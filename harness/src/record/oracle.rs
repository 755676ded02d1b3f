//! Reading the oracle: the committed changes recorded by the harness's own deferred triggers, and
//! the final rows of the protocol tables.

use serde::Serialize;
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use crate::error::Result;

/// One committed change of agent_runs or worker_leases.
#[derive(Debug, Clone, Serialize, serde::Deserialize, sqlx::FromRow)]
pub struct CommitRow {
    pub seq: i64,
    /// The writing transaction's id (text), to tell which changes committed together.
    #[sqlx(default)]
    #[serde(default)]
    pub xid: String,
    pub table_name: String,
    pub op: String,
    /// The writer's application_name (a worker's owner id).
    pub writer: String,
    /// The role the writing session logged in as (session_user).
    pub login: String,
    pub backend_pid: i32,
    pub committed_at: chrono::DateTime<chrono::Utc>,
    /// The writing transaction's start (`None` in rows built without it).
    #[sqlx(default)]
    #[serde(default)]
    pub began_at: Option<chrono::DateTime<chrono::Utc>>,
    pub run_id: Option<Uuid>,
    pub old_row: Option<Value>,
    pub new_row: Option<Value>,
    pub lease_at_commit: Option<Value>,
    pub lease_live_at_commit: Option<bool>,
}

impl CommitRow {
    pub fn new_field(&self, f: &str) -> Option<&Value> {
        self.new_row.as_ref().and_then(|r| r.get(f))
    }
    pub fn old_field(&self, f: &str) -> Option<&Value> {
        self.old_row.as_ref().and_then(|r| r.get(f))
    }
    pub fn new_i64(&self, f: &str) -> Option<i64> {
        self.new_field(f).and_then(Value::as_i64)
    }
    pub fn old_i64(&self, f: &str) -> Option<i64> {
        self.old_field(f).and_then(Value::as_i64)
    }
    pub fn new_str(&self, f: &str) -> Option<&str> {
        self.new_field(f).and_then(Value::as_str)
    }
    pub fn old_str(&self, f: &str) -> Option<&str> {
        self.old_field(f).and_then(Value::as_str)
    }
    pub fn lease_owner(&self) -> Option<&str> {
        self.lease_at_commit.as_ref().and_then(|l| l.get("owner")).and_then(Value::as_str)
    }
    pub fn lease_epoch(&self) -> Option<i64> {
        self.lease_at_commit.as_ref().and_then(|l| l.get("epoch")).and_then(Value::as_i64)
    }
    pub fn is_runs(&self) -> bool {
        self.table_name == "agent_runs"
    }
    pub fn is_leases(&self) -> bool {
        self.table_name == "worker_leases"
    }
}

/// The oracle's schema in a native cluster.
pub const DEFAULT_SCHEMA: &str = "fenceproof_oracle";

/// Every recorded commit, in commit order (oracle in the default schema).
pub async fn commits(pool: &PgPool) -> Result<Vec<CommitRow>> {
    commits_in(pool, DEFAULT_SCHEMA).await
}

/// Every recorded commit of the oracle in `schema`, in commit order.
pub async fn commits_in(pool: &PgPool, schema: &str) -> Result<Vec<CommitRow>> {
    Ok(sqlx::query_as::<_, CommitRow>(&format!(
        "SELECT seq, xid::text AS xid, table_name, op, writer, login, backend_pid, committed_at, began_at, run_id, old_row, new_row,
                lease_at_commit, lease_live_at_commit
           FROM {schema}.commits ORDER BY seq"
    ))
    .fetch_all(pool)
    .await?)
}

/// The current rows of a run and its lease, as JSON, for evidence and final-state checks.
#[derive(Debug, Clone, Serialize)]
pub struct RunState {
    pub run: Value,
    pub lease: Value,
}

pub async fn run_state(pool: &PgPool, run_id: Uuid) -> Result<RunState> {
    let run: Value = sqlx::query_scalar("SELECT to_jsonb(r) FROM agent_runs r WHERE run_id = $1")
        .bind(run_id)
        .fetch_optional(pool)
        .await?
        .unwrap_or(Value::Null);
    let lease: Value = sqlx::query_scalar("SELECT to_jsonb(l) FROM worker_leases l WHERE run_id = $1")
        .bind(run_id)
        .fetch_optional(pool)
        .await?
        .unwrap_or(Value::Null);
    Ok(RunState { run, lease })
}
