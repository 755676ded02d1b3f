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

/// The tables whose rows A's held transaction has already locked or written (relation locks of
/// its backend: RowShareLock for `SELECT … FOR UPDATE/SHARE`, RowExclusiveLock for a write),
/// except the held statement's own lock of the job table (it takes that before it waits).
pub async fn held_locks(pool: &sqlx::PgPool, held_pid: i32, lib: &Library) -> Vec<String> {
    let own = format!("{} (RowExclusiveLock)", lib.table.trim_start_matches("public."));
    let all: Vec<String> = sqlx::query_scalar(
        "SELECT l.relation::regclass::text || ' (' || l.mode || ')' FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
          WHERE l.pid = $1 AND l.locktype = 'relation' AND l.granted AND c.relkind IN ('r', 'p')
            AND l.mode IN ('RowShareLock', 'RowExclusiveLock')
            AND c.relnamespace::regnamespace::text NOT IN ('pg_catalog', 'fenceproof_audit')
          ORDER BY 1",
    )
    .bind(held_pid)
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    all.into_iter().filter(|l| *l != own).collect()
}

/// Why B did not take over while A's write was held: B waits on A's held transaction, or A's held
/// transaction had locked rows before the held statement (a takeover that skips locked rows
/// passes the job by).
pub async fn blocked_takeover(pool: &sqlx::PgPool, held_pid: i32, lib: &Library) -> Option<String> {
    let waiting: Option<String> = sqlx::query_scalar(
        "SELECT query FROM pg_stat_activity WHERE application_name = 'fp-audit-B' AND $1 = ANY(pg_blocking_pids(pid)) LIMIT 1",
    )
    .bind(held_pid)
    .fetch_optional(pool)
    .await
    .ok()
    .flatten();
    if let Some(q) = waiting {
        return Some(format!(
            "holding A's write blocks the takeover: B's `{}` waits on a lock A's held transaction keeps (the takeover writes {})",
            one_line(&q, 160).replace('`', "'"),
            lib.takeover_touches
        ));
    }
    let locks = held_locks(pool, held_pid, lib).await;
    (!locks.is_empty()).then(|| {
        format!(
            "no takeover while A's write was held: before the held statement, A's transaction had locked rows of {}; the takeover writes {}",
            locks.join(", "),
            lib.takeover_touches
        )
    })
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

/// With A just paused (by `pause`, undone by `resume`): while A holds the library's recovery lock,
/// resume it, wait (observed, bounded) until it let the lock go, and pause it again. Answers how
/// many times it had to; an error when A still held it after every try.
pub async fn outside_recovery_lock<P, R, PF, RF>(
    pool: &sqlx::PgPool,
    lib: &Library,
    app: &str,
    timeline: &Timeline,
    mut pause: P,
    mut resume: R,
) -> Result<usize, HarnessError>
where
    P: FnMut() -> PF,
    R: FnMut() -> RF,
    PF: std::future::Future<Output = Result<(), HarnessError>>,
    RF: std::future::Future<Output = Result<(), HarnessError>>,
{
    let Some(lock) = lib.recovery_lock else { return Ok(0) };
    for tries in 0..PAUSE_TRIES {
        if !holds_recovery_lock(pool, lock.held_by, app).await? {
            return Ok(tries);
        }
        timeline.record("harness", "repause", "A", json!({"why": format!("paused holding {}", lock.what)}));
        resume().await?;
        wait::until(&format!("A to let go of {}", lock.what), Duration::from_secs(10), || async {
            Ok((!holds_recovery_lock(pool, lock.held_by, app).await?).then_some(()))
        })
        .await?;
        pause().await?;
    }
    Err(HarnessError::Other(format!("A still held {} after {PAUSE_TRIES} pauses", lock.what)))
}
