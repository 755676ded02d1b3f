//! How a cell holds worker A beyond a plain pause: its outcome write held inside the database
//! across the takeover (the held-write experiment), and a pause placed outside a lock of the
//! library's own recovery (a worker paused inside it would stop everyone's recovery, which is a
//! different story from the one the cells tell).

use std::time::Duration;

use serde_json::json;

use fenceproof_harness::faults::held_write::{self, HeldWrite};
use fenceproof_harness::faults::row_hold::RowHold;
use fenceproof_harness::faults::{inject, Injected};
use fenceproof_harness::record::timeline::Timeline;
use fenceproof_harness::{wait, HarnessError};

use super::libraries::{HeldAt, Library};

/// The advisory lock key of the held write (advisory keys are per database: each cell has its own).
const HELD_WRITE_KEY: i64 = 0x4650_4857_0001;
/// How many times A is resumed and paused again to pause it outside the recovery lock.
const PAUSE_TRIES: usize = 20;
/// How many times A is resumed and paused again to pause it outside a transaction of its library
/// (a library that keeps one open across the whole job is then paused inside it, and the cell says so).
const TX_TRIES: usize = 3;

/// A's write, held.
pub enum Held {
    Trigger(Injected<HeldWrite>),
    Row(Injected<RowHold>),
}

/// Install what the hold needs before any worker runs (the statement trigger on the job table).
pub async fn prepare(pool: &sqlx::PgPool, lib: &Library) -> Result<(), HarnessError> {
    if let HeldAt::Trigger(_) = lib.held_at {
        held_write::install(pool, lib.table).await?;
    }
    Ok(())
}

impl Held {
    /// Put the hold in place for the session named `app` (job `job` for a row hold).
    pub async fn arm(
        lib: &Library,
        url: &str,
        pool: &sqlx::PgPool,
        app: &str,
        job: &str,
        timeline: &Timeline,
    ) -> Result<Held, HarnessError> {
        Ok(match lib.held_at {
            HeldAt::Trigger(pattern) => {
                Held::Trigger(inject(HeldWrite::new(pool, url, app, pattern, HELD_WRITE_KEY), timeline).await?)
            }
            HeldAt::KeyShare(table, column) => {
                Held::Row(inject(RowHold::key_share(url, "fenceproof-row-hold", table, column, job), timeline).await?)
            }
        })
    }

    /// Wait until a statement of the session named `app` waits on the hold: its pid and its text.
    pub async fn wait_held(
        &self,
        pool: &sqlx::PgPool,
        app: &str,
        bound: Duration,
    ) -> Result<(i32, String), HarnessError> {
        match self {
            Held::Trigger(h) => h.wait_held(bound).await,
            Held::Row(h) => {
                let pid = h.wait_blocked(pool, app, bound).await?;
                let q: Option<String> = sqlx::query_scalar("SELECT query FROM pg_stat_activity WHERE pid = $1")
                    .bind(pid)
                    .fetch_optional(pool)
                    .await?;
                Ok((pid, q.unwrap_or_default()))
            }
        }
    }

    /// Let the held write go on.
    pub async fn release(self) -> Result<(), HarnessError> {
        match self {
            Held::Trigger(h) => h.heal().await,
            Held::Row(h) => h.heal().await,
        }
    }
}

/// The rows A's held transaction had written or locked before the held statement, judged at row
/// level: its transaction id (`backend_xid`, assigned by its first row write or row lock) and, in
/// each table of the cell's database, the rows whose `xmax` is that id (a table-level mode such as
/// RowExclusiveLock, which every writing statement takes, blocks no other writer and is not read).
pub async fn held_rows(pool: &sqlx::PgPool, held_pid: i32) -> Vec<String> {
    let xid: Option<String> =
        sqlx::query_scalar("SELECT backend_xid::text FROM pg_stat_activity WHERE pid = $1 AND backend_xid IS NOT NULL")
            .bind(held_pid)
            .fetch_optional(pool)
            .await
            .ok()
            .flatten();
    let Some(xid) = xid else { return Vec::new() };
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'fenceproof_audit')
            AND n.nspname NOT LIKE 'pg_toast%' ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    let mut out = Vec::new();
    for t in tables {
        let n: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {t} WHERE xmax::text = $1"))
            .bind(&xid)
            .fetch_one(pool)
            .await
            .unwrap_or(0);
        if n > 0 {
            out.push(format!("{n} row(s) of {t} updated, deleted or locked by it (xmax = its xid {xid})"));
        }
    }
    out
}

/// The sessions waiting on A's held transaction (`pg_blocking_pids`), each with the lock it waits
/// for (not granted: a tuple, a transaction id, …) and its statement.
pub async fn waiting_on(pool: &sqlx::PgPool, held_pid: i32) -> Vec<String> {
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT a.application_name,
                coalesce(l.locktype, '?') || coalesce(' of ' || l.relation::regclass::text, '')
                  || coalesce(' ' || l.mode, ''),
                a.query
           FROM pg_stat_activity a LEFT JOIN pg_locks l ON l.pid = a.pid AND NOT l.granted
          WHERE $1 = ANY(pg_blocking_pids(a.pid)) ORDER BY a.pid",
    )
    .bind(held_pid)
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    rows.into_iter()
        .map(|(app, lock, q)| format!("{app}'s `{}` waits for a {lock} lock", one_line(&q, 160).replace('`', "'")))
        .collect()
}

/// What the row-level locks say when B did not take over while A's write was held: who waits on
/// A's held transaction (a takeover that waits is blocked by it), else the rows it holds (a
/// takeover that skips locked rows passes them by) or that it holds none.
pub async fn blocked_takeover(pool: &sqlx::PgPool, held_pid: i32, lib: &Library) -> String {
    let waiting = waiting_on(pool, held_pid).await;
    if !waiting.is_empty() {
        return format!(
            "holding A's write blocks the takeover (pg_blocking_pids): {} held by A's transaction (the takeover writes {})",
            waiting.join("; "),
            lib.takeover_touches
        );
    }
    let rows = held_rows(pool, held_pid).await;
    let held = if rows.is_empty() { "no row".to_string() } else { rows.join(", ") };
    format!(
        "no session waited on A's held transaction (pg_blocking_pids); it had written or locked {held} before the held statement; the takeover writes {}",
        lib.takeover_touches
    )
}

/// `text` on one line, at most `max` characters.
pub fn one_line(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}

/// Whether the session named `app` holds the library's recovery lock.
async fn holds_recovery_lock(pool: &sqlx::PgPool, sql: &str, app: &str) -> Result<bool, HarnessError> {
    Ok(sqlx::query_scalar(sql).bind(app).fetch_one(pool).await?)
}

/// The sessions of `app` (but `except`, the held write's) left inside a transaction that wrote or
/// locked rows: state "idle in transaction" with a transaction id (one is assigned by the first
/// row write or row lock; a transaction holding only advisory locks or a snapshot has none and
/// blocks no row), with the last statement each sent. A statement still running (state "active") is
/// let finish first, for at most a second: a paused client's last statement completes on the server.
pub async fn in_transaction(pool: &sqlx::PgPool, app: &str, except: i32) -> Result<Vec<String>, HarnessError> {
    let active = "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND pid <> $2 AND state = 'active'";
    let _ = wait::until("A's last statement to end on the server", Duration::from_secs(1), || async {
        let n: i64 = sqlx::query_scalar(active).bind(app).bind(except).fetch_one(pool).await?;
        Ok((n == 0).then_some(()))
    })
    .await;
    Ok(sqlx::query_scalar(
        "SELECT state || ': ' || query FROM pg_stat_activity
          WHERE application_name = $1 AND pid <> $2 AND state LIKE 'idle in transaction%'
            AND backend_xid IS NOT NULL ORDER BY pid",
    )
    .bind(app)
    .bind(except)
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|q: String| one_line(&q, 200))
    .collect())
}

/// Where A was paused when it could not be paused outside a transaction of its own.
#[derive(Debug, Default)]
pub struct PausedAt {
    /// How many times A was resumed and paused again.
    pub tries: usize,
    /// Why it was paused again each time (the recovery lock, or a transaction of its own).
    pub why: Vec<String>,
    /// A's sessions still inside a transaction when the pause was kept (after every try).
    pub inside: Vec<String>,
}

/// With A just paused (by `pause`, undone by `resume`): while A holds the library's recovery lock,
/// or a session of A (but `except`) is idle inside a transaction of its library (a pause there
/// keeps its locks, and a takeover that skips locked rows passes the job by), resume it, wait
/// (observed, bounded) until it is out, and pause it again. A recovery lock still held after every
/// try is an error; a transaction still open is kept, and said (`PausedAt::inside`).
pub async fn outside_library_locks<P, R, PF, RF>(
    pool: &sqlx::PgPool,
    lib: &Library,
    app: &str,
    except: i32,
    timeline: &Timeline,
    mut pause: P,
    mut resume: R,
) -> Result<PausedAt, HarnessError>
where
    P: FnMut() -> PF,
    R: FnMut() -> RF,
    PF: std::future::Future<Output = Result<(), HarnessError>>,
    RF: std::future::Future<Output = Result<(), HarnessError>>,
{
    let mut at = PausedAt::default();
    for tries in 0..PAUSE_TRIES {
        at.tries = tries;
        let lock = match lib.recovery_lock {
            Some(l) if holds_recovery_lock(pool, l.held_by, app).await? => Some(l),
            _ => None,
        };
        let inside = if lock.is_some() { Vec::new() } else { in_transaction(pool, app, except).await? };
        if lock.is_none() && inside.is_empty() {
            return Ok(at);
        }
        if lock.is_none() && tries >= TX_TRIES {
            at.inside = inside;
            timeline.record("harness", "observed", "paused_in_transaction", json!({"sessions": at.inside}));
            return Ok(at);
        }
        let why = match lock {
            Some(l) => format!("it held {}", l.what),
            None => format!("it was inside a transaction ({})", inside.join("; ")),
        };
        timeline.record("harness", "repause", "A", json!({"why": why}));
        at.why.push(why);
        resume().await?;
        let bound = Duration::from_secs(if lock.is_some() { 10 } else { 2 });
        let out = wait::until("A to leave its library's lock or transaction", bound, || async {
            let held = match lib.recovery_lock {
                Some(l) => holds_recovery_lock(pool, l.held_by, app).await?,
                None => false,
            };
            Ok((!held && in_transaction(pool, app, except).await?.is_empty()).then_some(()))
        })
        .await;
        if let (Err(e), Some(_)) = (&out, lock) {
            return Err(HarnessError::Other(e.to_string()));
        }
        pause().await?;
    }
    match lib.recovery_lock {
        Some(l) => Err(HarnessError::Other(format!("A still held {} after {PAUSE_TRIES} pauses", l.what))),
        None => Ok(at),
    }
}
