//! A barrier inside the database: the harness holds an exclusive advisory lock on a session of
//! its own; a transaction armed with the matching fault point waits on it inside the database.
//! The harness observes the wait through `pg_stat_activity` / `pg_blocking_pids` and heals by
//! releasing the lock (on drop, by closing the session, which releases it too).

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::{Connection, PgConnection};

use super::fault::Fault;
use crate::error::Result;
use crate::wait;

/// The advisory lock `key` on the database at `url`, held by the harness.
pub struct DbBarrier {
    pub key: i64,
    url: String,
    conn: Option<PgConnection>,
    /// The backend pid of the harness session holding the lock (0 until injected).
    pub holder_pid: i32,
    /// The fault point the held transactions are armed with, for the timeline.
    point: Option<String>,
}

impl DbBarrier {
    pub fn new(url: &str, key: i64) -> DbBarrier {
        DbBarrier { key, url: url.to_string(), conn: None, holder_pid: 0, point: None }
    }

    /// Name the fault point the transactions wait at (recorded with the barrier's steps).
    pub fn at(mut self, point: &str) -> DbBarrier {
        self.point = Some(point.to_string());
        self
    }

    /// Wait until `count` sessions named in `apps` are blocked by this barrier.
    /// Returns their backend pids.
    pub async fn wait_blocked(
        &self,
        observer: &sqlx::PgPool,
        apps: &[String],
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<i32>> {
        let holder = self.holder_pid;
        wait::until(
            &format!("{count} session(s) of {apps:?} to wait on barrier {}", self.key),
            timeout,
            || async move {
                let pids: Vec<i32> = sqlx::query_scalar(
                    "SELECT pid FROM pg_stat_activity
                  WHERE application_name = ANY($1) AND $2 = ANY(pg_blocking_pids(pid))
                  ORDER BY pid",
                )
                .bind(apps)
                .bind(holder)
                .fetch_all(observer)
                .await?;
                Ok((pids.len() >= count).then_some(pids))
            },
        )
        .await
    }
}

impl Fault for DbBarrier {
    fn name(&self) -> &'static str {
        "db-barrier"
    }

    fn target(&self) -> String {
        "database".into()
    }

    fn actions(&self) -> (&'static str, &'static str) {
        ("barrier_hold", "barrier_release")
    }

    fn describe(&self) -> Value {
        match &self.point {
            Some(p) => json!({"key": self.key, "point": p}),
            None => json!({"key": self.key}),
        }
    }

    /// Take the exclusive advisory lock on a dedicated session.
    async fn inject(&mut self) -> Result<Value> {
        let mut conn = PgConnection::connect(&self.url).await?;
        sqlx::query("SET application_name = 'fenceproof-barrier'").execute(&mut conn).await?;
        self.holder_pid = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut conn).await?;
        sqlx::query("SELECT pg_advisory_lock($1)").bind(self.key).execute(&mut conn).await?;
        self.conn = Some(conn);
        Ok(json!({"holder_pid": self.holder_pid}))
    }

    /// Release the lock and close the session.
    async fn heal(&mut self) -> Result<()> {
        let Some(mut conn) = self.conn.take() else { return Ok(()) };
        sqlx::query("SELECT pg_advisory_unlock($1)").bind(self.key).execute(&mut conn).await?;
        conn.close().await?;
        Ok(())
    }

    fn heal_now(&mut self) {
        // The session ends with its socket, and the lock with it.
        self.conn = None;
    }
}
