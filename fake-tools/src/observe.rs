//! What the tools see of their callers' database sessions at each call (spec §06 and §09.2: no
//! protected or claim transaction may stay open across a remote call).
//!
//! With `--observe-database-url`, every create and query reads `pg_stat_activity` of the
//! experiment's database before it is answered: the sessions (other than the observer's) with an
//! open transaction, by application_name (a worker's owner id). When one is idle in transaction
//! (its client busy elsewhere), the sessions are read again after [`HOLD_PAUSE`]: `held` says the
//! same transaction (same backend, same start) was still open while the call waited for its answer.
//! Beside them, the process that made the call (`caller`: pid and process group, from the kernel's
//! socket tables, see [`crate::caller`]), so a check blames a session only for its own process's
//! calls. The observation is bounded
//! ([`BUDGET`]) and never fails a call: an observer that cannot read records why.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};

/// The whole observation of one call (connect, read, pause, read again) stays under this.
pub const BUDGET: Duration = Duration::from_millis(1000);

/// How long an open transaction is watched before it counts as held across the call.
pub const HOLD_PAUSE: Duration = Duration::from_millis(50);

/// The application_name of the observer's own session.
pub const OBSERVER: &str = "fenceproof-tools-observer";

const OPEN_TRANSACTIONS: &str = "SELECT pid, coalesce(application_name, '') AS application_name, state,
        xact_start::text AS xact_start, backend_xid::text AS backend_xid,
        (extract(epoch FROM clock_timestamp() - xact_start) * 1000)::bigint AS open_ms
   FROM pg_stat_activity
  WHERE datname = current_database() AND pid <> pg_backend_pid()
    AND coalesce(application_name, '') <> 'fenceproof-tools-observer'
    AND ((xact_start IS NOT NULL AND state IN ('idle in transaction', 'active', 'idle in transaction (aborted)'))
         OR (state IS NULL AND backend_type = 'client backend'))
  ORDER BY pid";

/// One caller session with an open transaction at the call, or one the observer may not read
/// (another role's, without `pg_read_all_stats`: its `state` is null, it is listed by name only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct OpenSession {
    pub pid: i32,
    pub application_name: String,
    pub state: Option<String>,
    pub xact_start: Option<String>,
    /// The transaction's id when it has written (or locked) something.
    pub backend_xid: Option<String>,
    /// How long the transaction had been open at the first read (database clock).
    pub open_ms: Option<i64>,
    /// Still the same open transaction [`HOLD_PAUSE`] later, while the call was unanswered.
    #[sqlx(default)]
    #[serde(default)]
    pub held: bool,
}

/// Reads the callers' sessions; `None` when the tools were started without a database to observe.
/// One session is kept open between calls (a connection per call cost the server a backend's
/// start each time); a call that finds it in use by another opens one of its own for itself.
#[derive(Debug, Clone)]
pub struct Observer {
    options: Option<PgConnectOptions>,
    kept: std::sync::Arc<tokio::sync::Mutex<Option<PgConnection>>>,
}

impl Observer {
    /// An observer of the database at `url` (a password comes from `PGPASSWORD`), or none.
    pub fn new(url: Option<&str>) -> Result<Observer, sqlx::Error> {
        let options = match url {
            Some(u) => Some(
                u.parse::<PgConnectOptions>()?
                    .application_name(OBSERVER)
                    .options([("statement_timeout", "1000"), ("lock_timeout", "500")])
                    .disable_statement_logging(),
            ),
            None => None,
        };
        Ok(Observer { options, kept: Default::default() })
    }

    /// The observation of one call, as recorded in its ledger entry; `None` without a database.
    /// `conn` is the call's connection (its peer, its local end): the process that made the call
    /// is recorded beside the sessions (`caller`, see [`crate::caller`]).
    pub async fn observe(&self, conn: Option<(SocketAddr, SocketAddr)>) -> Option<Value> {
        let options = self.options.as_ref()?;
        let started = std::time::Instant::now();
        // A walk of /proc: off the tools' runtime threads.
        let caller = match conn {
            Some((peer, local)) => tokio::task::spawn_blocking(move || crate::caller::caller(peer, local))
                .await
                .unwrap_or_else(|e| json!({"error": format!("the caller's lookup failed: {e}")})),
            None => json!({"error": "the call's addresses are unknown"}),
        };
        let read = tokio::time::timeout(BUDGET, self.read(options)).await;
        let took_ms = started.elapsed().as_millis() as u64;
        Some(match read {
            Ok(Ok(sessions)) => json!({ "sessions": sessions, "caller": caller, "took_ms": took_ms }),
            Ok(Err(e)) => json!({ "error": format!("could not observe: {e}"), "caller": caller, "took_ms": took_ms }),
            Err(_) => {
                json!({ "error": format!("could not observe within {BUDGET:?}"), "caller": caller, "took_ms": took_ms })
            }
        })
    }
}

impl Observer {
    /// The sessions, read on the kept session when it is free (opened on first use, dropped after
    /// an error so the next call opens a fresh one), else on a session of this call's own.
    async fn read(&self, options: &PgConnectOptions) -> Result<Vec<OpenSession>, sqlx::Error> {
        let Ok(mut kept) = self.kept.try_lock() else {
            let mut conn = PgConnection::connect_with(options).await?;
            let read = read_sessions(&mut conn).await;
            let _ = conn.close().await;
            return read;
        };
        if kept.is_none() {
            *kept = Some(PgConnection::connect_with(options).await?);
        }
        let conn = kept.as_mut().expect("opened above");
        // Bounded here, so a read cut short never leaves the kept session mid-reply.
        match tokio::time::timeout(BUDGET, read_sessions(conn)).await {
            Ok(Ok(sessions)) => Ok(sessions),
            Ok(Err(e)) => {
                *kept = None;
                Err(e)
            }
            Err(_) => {
                *kept = None;
                Err(sqlx::Error::Protocol(format!("the sessions were not read within {BUDGET:?}")))
            }
        }
    }
}

async fn read_sessions(conn: &mut PgConnection) -> Result<Vec<OpenSession>, sqlx::Error> {
    let mut first: Vec<OpenSession> = sqlx::query_as(OPEN_TRANSACTIONS).fetch_all(&mut *conn).await?;
    if first.iter().any(|s| s.state.as_deref().is_some_and(|st| st.starts_with("idle in transaction"))) {
        tokio::time::sleep(HOLD_PAUSE).await;
        let again: Vec<OpenSession> = sqlx::query_as(OPEN_TRANSACTIONS).fetch_all(&mut *conn).await?;
        for s in &mut first {
            s.held = s.xact_start.is_some()
                && again.iter().any(|a| a.pid == s.pid && a.xact_start == s.xact_start && a.state.is_some());
        }
    }
    Ok(first)
}
