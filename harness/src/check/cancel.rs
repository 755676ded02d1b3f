//! Cancellation and the ledger (spec §09.3 "prepared + run cancelled → cancelled, forbid
//! dispatch"), judged on the oracle's commits: the transaction that moves a run to `cancelled`
//! also moves every operation of that run that was `prepared` just before it to `cancelled`, and
//! an operation is cancelled only in such a transaction. A cancel in two transactions leaves, after
//! a crash between them, a cancelled run with intents still waiting to be dispatched.

use std::collections::{BTreeMap, BTreeSet};

use super::{Check, Found};
use crate::record::oracle::CommitRow;

fn op_of(r: &CommitRow) -> Option<&str> {
    r.new_str("operation_id").or(r.old_str("operation_id"))
}

fn run_of(r: &CommitRow) -> Option<String> {
    r.new_str("run_id").or(r.old_str("run_id")).map(str::to_string).or(r.run_id.map(|u| u.to_string()))
}

/// The name of [`prepared_cancelled_with_their_run`]'s check.
pub const PREPARED_CANCELLED_WITH_RUN: &str = "a run's cancel transaction also cancels every operation of it still prepared, and operations are cancelled only there";

/// The check: prepared operations are cancelled in their run's cancel transaction, and only there.
pub fn prepared_cancelled_with_their_run(rows: &[CommitRow]) -> Check {
    let name = PREPARED_CANCELLED_WITH_RUN;
    let mut bad = Vec::new();
    // The transactions that cancelled a run: xid -> run, and the first seq of each.
    let mut cancels: BTreeMap<&str, (String, i64)> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.is_runs() && r.op == "UPDATE" && !r.xid.is_empty()) {
        if r.new_str("status") == Some("cancelled") && r.old_str("status") != Some("cancelled") {
            if let Some(run) = run_of(r) {
                cancels.entry(r.xid.as_str()).or_insert((run, r.seq));
            }
        }
    }
    let first_seq: BTreeMap<&str, i64> = rows.iter().fold(BTreeMap::new(), |mut m, r| {
        let e = m.entry(r.xid.as_str()).or_insert(r.seq);
        *e = (*e).min(r.seq);
        m
    });
    for (xid, (run, _)) in &cancels {
        let start = first_seq.get(xid).copied().unwrap_or(i64::MAX);
        // Each operation's status as committed before this transaction, by other transactions.
        let mut status: BTreeMap<&str, (&str, Option<String>)> = BTreeMap::new();
        for r in rows.iter().filter(|r| r.table_name == "tool_operations" && r.seq < start && r.xid != *xid) {
            if let (Some(op), Some(s)) = (op_of(r), r.new_str("status")) {
                status.insert(op, (s, run_of(r)));
            }
        }
        let cancelled_here: BTreeSet<&str> = rows
            .iter()
            .filter(|r| r.table_name == "tool_operations" && r.xid == *xid && r.new_str("status") == Some("cancelled"))
            .filter_map(op_of)
            .collect();
        for (op, (s, op_run)) in &status {
            if *s == "prepared" && op_run.as_deref() == Some(run.as_str()) && !cancelled_here.contains(op) {
                bad.push(Found::text(format!(
                    "transaction {xid} cancelled run {run} but left its prepared operation {op} prepared"
                )));
            }
        }
    }
    for r in rows.iter().filter(|r| r.table_name == "tool_operations" && r.op == "UPDATE" && !r.xid.is_empty()) {
        if r.new_str("status") == Some("cancelled") && r.old_str("status") != Some("cancelled") {
            let with_run = cancels.get(r.xid.as_str()).is_some_and(|(run, _)| Some(run.clone()) == run_of(r));
            if !with_run {
                let text = format!(
                    "commit #{} by {} cancelled operation {} outside its run's cancel transaction",
                    r.seq,
                    r.writer,
                    op_of(r).unwrap_or("?")
                );
                bad.push(Found::at(r.seq, text));
            }
        }
    }
    Check::from_found(name, bad, format!("{} cancel transaction(s), each with its prepared operations", cancels.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::commit_rows::{commit_row, CommitRowBuilder};
    use serde_json::{json, Value};

    const RUN: &str = "00000000-0000-0000-0000-000000000000";

    fn row(seq: i64, xid: &str, table: &str, op: &str, old: Value, new: Value) -> CommitRow {
        commit_row(seq, table, op).xid(xid).by("control-plane").change(old, new)
    }

    fn planned(seq: i64) -> CommitRow {
        row(
            seq,
            "1",
            "tool_operations",
            "INSERT",
            Value::Null,
            json!({"operation_id": "o", "run_id": RUN, "status": "prepared"}),
        )
    }
    fn run_cancel(seq: i64, xid: &str) -> CommitRow {
        row(seq, xid, "agent_runs", "UPDATE", json!({"status": "running"}), json!({"status": "cancelled"}))
    }
    fn op_cancel(seq: i64, xid: &str) -> CommitRow {
        row(
            seq,
            xid,
            "tool_operations",
            "UPDATE",
            json!({"operation_id": "o", "run_id": RUN, "status": "prepared"}),
            json!({"operation_id": "o", "run_id": RUN, "status": "cancelled"}),
        )
    }

    #[test]
    fn a_cancel_in_two_transactions_is_caught() {
        assert!(prepared_cancelled_with_their_run(&[planned(1), run_cancel(2, "9"), op_cancel(3, "9")]).passed());
        let c = prepared_cancelled_with_their_run(&[planned(1), run_cancel(2, "9"), op_cancel(3, "10")]);
        assert!(!c.passed());
        assert!(c.evidence.contains("left its prepared operation") && c.evidence.contains("outside"), "{}", c.evidence);
        // A cancel that forgets the prepared operation.
        assert!(!prepared_cancelled_with_their_run(&[planned(1), run_cancel(2, "9")]).passed());
    }
}
