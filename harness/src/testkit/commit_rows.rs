//! Commit rows for checker tests: one change of the oracle's commit log with every field a checker
//! does not judge filled in, and a setter for each one it does. A test module writes its own short
//! constructor on top (its usual table, writer and argument order) instead of a struct literal.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::record::oracle::CommitRow;

/// Change `seq` of `table` (`op`: INSERT, UPDATE, DELETE) in transaction `seq`, by writer `w`,
/// of run nil, with no rows and no lease recorded at commit.
pub fn commit_row(seq: i64, table: &str, op: &str) -> CommitRow {
    CommitRow {
        seq,
        xid: seq.to_string(),
        table_name: table.into(),
        op: op.into(),
        writer: "w".into(),
        login: "fenceproof_worker_login".into(),
        backend_pid: 1,
        committed_at: Utc::now(),
        began_at: None,
        run_id: Some(Uuid::nil()),
        old_row: None,
        new_row: None,
        lease_at_commit: None,
        lease_live_at_commit: None,
    }
}

/// Setters on a [`CommitRow`], each returning the row (`commit_row(..).xid("7").by("w-a")`).
pub trait CommitRowBuilder {
    /// Committed in transaction `xid` (rows with the same xid committed together).
    fn xid(self, xid: &str) -> CommitRow;
    /// Written by the session named `writer` (its application_name).
    fn by(self, writer: &str) -> CommitRow;
    /// The row before and after; a JSON null is no row (an INSERT's before, a DELETE's after).
    fn change(self, old: Value, new: Value) -> CommitRow;
    /// The run's lease at commit, held by `owner` at `epoch` and live.
    fn under_lease(self, owner: &str, epoch: i64) -> CommitRow;
    /// Committed at `at` (the database clock).
    fn at(self, at: DateTime<Utc>) -> CommitRow;
    /// A change of run `run`.
    fn of_run(self, run: Uuid) -> CommitRow;
}

impl CommitRowBuilder for CommitRow {
    fn xid(self, xid: &str) -> CommitRow {
        CommitRow { xid: xid.into(), ..self }
    }

    fn by(self, writer: &str) -> CommitRow {
        CommitRow { writer: writer.into(), ..self }
    }

    fn change(self, old: Value, new: Value) -> CommitRow {
        CommitRow { old_row: (!old.is_null()).then_some(old), new_row: (!new.is_null()).then_some(new), ..self }
    }

    fn under_lease(self, owner: &str, epoch: i64) -> CommitRow {
        CommitRow {
            lease_at_commit: Some(json!({ "owner": owner, "epoch": epoch })),
            lease_live_at_commit: Some(true),
            ..self
        }
    }

    fn at(self, at: DateTime<Utc>) -> CommitRow {
        CommitRow { committed_at: at, ..self }
    }

    fn of_run(self, run: Uuid) -> CommitRow {
        CommitRow { run_id: Some(run), ..self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setters_set_what_they_name_and_a_null_is_no_row() {
        let r = commit_row(3, "agent_runs", "INSERT")
            .xid("9")
            .by("w-a")
            .change(Value::Null, json!({"revision": 0}))
            .under_lease("w-a", 2)
            .of_run(Uuid::from_u128(5));
        assert_eq!((r.seq, r.xid.as_str(), r.table_name.as_str(), r.op.as_str()), (3, "9", "agent_runs", "INSERT"));
        assert_eq!(r.writer, "w-a");
        assert_eq!((r.old_row, r.new_row), (None, Some(json!({"revision": 0}))));
        assert_eq!(r.lease_at_commit, Some(json!({"owner": "w-a", "epoch": 2})));
        assert_eq!(r.lease_live_at_commit, Some(true));
        assert_eq!(r.run_id, Some(Uuid::from_u128(5)));
        assert_eq!(commit_row(4, "t", "UPDATE").xid, "4");
    }
}
