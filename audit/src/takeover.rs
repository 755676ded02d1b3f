//! How a cell knows the library handed the job to B: B's START in the tools' ledger (the body ran
//! again), or the system's own record of who runs the job (its owner, executor or attempt columns)
//! changed by a commit of B's, read from the commits the oracle records. A durable-execution engine
//! may finish a recovered workflow from its recorded step outputs without running the body again
//! (DBOS replays a completed step's output), so B's START alone would miss its takeover.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use fenceproof_harness::record::timeline::Timeline;
use fenceproof_harness::{wait, HarnessError};

use super::libraries::Library;

/// The columns of a library's job row that record which executor (or attempt) runs the job, as its
/// own source names them; empty when the audit reads none (B's START is then the takeover).
pub fn columns(library: &str) -> &'static [&'static str] {
    match library {
        // dbos/_sys_db.py: recovery (`_recover_pending_workflows` → `start_workflow`) sets a new
        // `owner_xid` and the recovering `executor_id`, and counts `recovery_attempts`.
        "dbos" => &["executor_id", "owner_xid", "recovery_attempts"],
        _ => &[],
    }
}

/// How the takeover was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// B's START in the tools' ledger.
    Start,
    /// B's commit of the system's own ownership record, with no START after it within the window.
    Record(String),
}

/// B's first committed change of an ownership column of the job row (`lib.table`), described:
/// `commit #7 by B: executor_id A -> B, recovery_attempts 1 -> 2`.
pub async fn taken_by(pool: &sqlx::PgPool, lib: &Library, worker: &str) -> Result<Option<String>, HarnessError> {
    let cols = columns(lib.name);
    if cols.is_empty() {
        return Ok(None);
    }
    let table = lib.table.trim_start_matches("public.");
    let rows: Vec<(i64, Option<Value>, Option<Value>)> = sqlx::query_as(
        "SELECT seq, old_row, new_row FROM fenceproof_audit.commits
          WHERE writer = $1 AND op = 'UPDATE' AND (table_name = $2 OR table_name = 'public.' || $2) ORDER BY seq",
    )
    .bind(format!("fp-audit-{worker}"))
    .bind(table)
    .fetch_all(pool)
    .await?;
    Ok(rows.iter().find_map(|(seq, old, new)| describe(*seq, worker, cols, old.as_ref()?, new.as_ref()?)))
}

/// The ownership columns a commit changed, or `None` when it changed none.
fn describe(seq: i64, worker: &str, cols: &[&str], old: &Value, new: &Value) -> Option<String> {
    let text = |v: &Value| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string());
    let changed: Vec<String> = cols
        .iter()
        .filter(|c| old[**c] != new[**c])
        .map(|c| format!("{c} {} -> {}", text(&old[*c]), text(&new[*c])))
        .collect();
    (!changed.is_empty()).then(|| format!("commit #{seq} by {worker}: {}", changed.join(", ")))
}

/// Wait (at most `bound`) for the takeover: B's START, or B's commit of the ownership record with
/// no START within `grace` after it (a START that follows its claim keeps the experiment's story:
/// A comes back while B's body runs).
pub async fn wait(
    pool: &sqlx::PgPool,
    lib: &Library,
    b_started: impl Fn() -> Result<bool, HarnessError>,
    bound: Duration,
    grace: Duration,
    timeline: &Timeline,
) -> Result<Seen, HarnessError> {
    let recorded: Mutex<Option<(Instant, String)>> = Mutex::new(None);
    let what = "the library's recovery to hand the job to B (B's START, or B's change of the job's ownership record)";
    let seen = wait::until(what, bound, || async {
        if b_started()? {
            return Ok(Some(Seen::Start));
        }
        let known = recorded.lock().map(|r| r.clone()).unwrap_or_default();
        match known {
            None => {
                if let Some(d) = taken_by(pool, lib, "B").await? {
                    timeline.record("harness", "observed", "ownership_record", json!({"commit": d}));
                    if let Ok(mut r) = recorded.lock() {
                        *r = Some((Instant::now(), d));
                    }
                }
                Ok(None)
            }
            Some((at, d)) => Ok((at.elapsed() >= grace).then_some(Seen::Record(d))),
        }
    })
    .await?;
    Ok(seen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ownership_change_is_described_and_a_heartbeat_is_not_one() {
        let cols = columns("dbos");
        let old = json!({"executor_id": "A", "owner_xid": "x1", "recovery_attempts": 1, "status": "PENDING"});
        let new = json!({"executor_id": "B", "owner_xid": "x2", "recovery_attempts": 2, "status": "PENDING"});
        let d = describe(7, "B", cols, &old, &new).expect("a change of owner");
        assert_eq!(d, "commit #7 by B: executor_id A -> B, owner_xid x1 -> x2, recovery_attempts 1 -> 2");
        let mut same = old.clone();
        same["status"] = json!("SUCCESS");
        assert!(describe(8, "B", cols, &old, &same).is_none(), "a status change alone is not an owner change");
        assert!(columns("procrastinate").is_empty());
    }
}
