//! No transaction of the dispatcher spans a remote call (spec §06: no HTTP wait inside a protected
//! transaction; §09.2: the claim transaction does not span HTTP). A dispatcher that claims, calls
//! the tool and only then commits passes every other check, until it dies during the call: the
//! claim rolls back, the operation is `prepared` again, and a plain tool runs twice.
//!
//! Judged from evidence, for any worker: at every create and query the fake tools read the
//! callers' sessions with an open transaction (`observed` in the call's ledger entry, see the
//! fake tools' `observe` module), and the oracle's `tool_operations` commits name each operation's
//! dispatchers (`dispatch_owner`, a dispatcher's owner id, which is its sessions'
//! application_name). A call of an operation during which one of its dispatchers held a
//! transaction open is a violation.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::Check;
use crate::record::oracle::CommitRow;

/// A checker's name (the rule catalogue links rules to it).
pub const NO_TRANSACTION_ACROSS_CALL: &str =
    "no transaction of an operation's dispatcher is open while its tool is called";

/// Every owner that committed a claim of each operation (`dispatch_owner` set on its ledger row).
fn dispatchers(rows: &[CommitRow]) -> BTreeMap<&str, BTreeSet<&str>> {
    let mut m: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.table_name == "tool_operations") {
        if let (Some(op), Some(owner)) = (r.new_str("operation_id"), r.new_str("dispatch_owner")) {
            m.entry(op).or_default().insert(owner);
        }
    }
    m
}

/// Whether an observed session held its transaction across the call: seen open twice, the call
/// unanswered in between (`held`); an observation without that second look counts a session idle
/// in transaction (its client busy elsewhere, here: calling the tool).
fn held(s: &Value) -> bool {
    s["held"].as_bool().unwrap_or_else(|| s["state"].as_str().is_some_and(|st| st.starts_with("idle in transaction")))
}

/// What a violating session and call were, for the evidence.
fn describe(op: &str, e: &Value, s: &Value) -> String {
    format!(
        "{op}: {} call (ledger #{}, {}, at {}) arrived while its dispatcher {} (backend pid {}) held a transaction open \
         ({}, xid {}, open {} ms since {})",
        e["tool"].as_str().unwrap_or("?"),
        e["seq"],
        e["kind"].as_str().unwrap_or("?"),
        e["at"].as_str().unwrap_or("?"),
        s["application_name"].as_str().unwrap_or("?"),
        s["pid"],
        s["state"].as_str().unwrap_or("?"),
        s["backend_xid"].as_str().unwrap_or("none"),
        s["open_ms"],
        s["xact_start"].as_str().unwrap_or("?"),
    )
}

/// For each observed tool call of an operation, none of the operation's dispatchers (as the
/// oracle shows them claiming it) had a transaction open across the call. Another session's open
/// transaction at the same moment is no concern of this rule.
pub fn no_transaction_across_call(entries: &[Value], rows: &[CommitRow]) -> Check {
    let by_op = dispatchers(rows);
    let (mut judged, mut blind, mut unclaimed) = (0, 0, 0);
    let mut bad = Vec::new();
    for e in entries.iter().filter(|e| e["observed"].is_object()) {
        let Some(op) = e["operation_id"].as_str() else { continue };
        let Some(owners) = by_op.get(op) else {
            unclaimed += 1;
            continue;
        };
        let Some(sessions) = e["observed"]["sessions"].as_array() else {
            blind += 1;
            continue;
        };
        let ours: Vec<&Value> =
            sessions.iter().filter(|s| owners.contains(s["application_name"].as_str().unwrap_or_default())).collect();
        // A dispatcher's session the observer may not read (no state shown) leaves the call unjudged.
        if ours.iter().any(|s| s["state"].is_null()) {
            blind += 1;
            continue;
        }
        judged += 1;
        bad.extend(ours.into_iter().filter(|s| held(s)).map(|s| describe(op, e, s)));
    }
    Check::from_violations(
        NO_TRANSACTION_ACROSS_CALL,
        bad,
        format!(
            "{judged} observed tool calls of claimed operations, none while a dispatcher of the operation held a \
             transaction open; {blind} calls could not be observed, {unclaimed} of operations no dispatcher claimed"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(seq: i64, op: &str, owner: &str) -> CommitRow {
        CommitRow {
            seq,
            xid: format!("{}", 700 + seq),
            table_name: "tool_operations".into(),
            op: "UPDATE".into(),
            writer: owner.into(),
            login: "fenceproof_worker".into(),
            backend_pid: 42,
            committed_at: chrono::Utc::now(),
            began_at: None,
            run_id: None,
            old_row: Some(json!({"operation_id": op, "status": "prepared", "dispatch_owner": null})),
            new_row: Some(json!({"operation_id": op, "status": "dispatching", "dispatch_owner": owner})),
            lease_at_commit: None,
            lease_live_at_commit: None,
        }
    }

    fn session(name: &str, state: &str, held: bool) -> Value {
        json!({"pid": 4711, "application_name": name, "state": state, "xact_start": "2030-01-01 00:00:01+00",
               "backend_xid": "812", "open_ms": 130, "held": held})
    }

    fn call(seq: u64, op: &str, sessions: Vec<Value>) -> Value {
        json!({"seq": seq, "at": "1893456001.000000", "kind": "created", "tool": "plain", "operation_id": op,
               "resource_id": "plain-1", "observed": {"sessions": sessions, "took_ms": 3}})
    }

    #[test]
    fn a_call_while_the_dispatcher_holds_its_claim_transaction_fails() {
        let rows = [claim(1, "t/r/pay/v1", "worker-d1-aa")];
        let entries = [call(1, "t/r/pay/v1", vec![session("worker-d1-aa", "idle in transaction", true)])];
        let c = no_transaction_across_call(&entries, &rows);
        assert!(!c.passed(), "{}", c.evidence);
        for part in ["t/r/pay/v1", "worker-d1-aa", "ledger #1", "plain", "idle in transaction", "4711"] {
            assert!(c.evidence.contains(part), "{part} missing from: {}", c.evidence);
        }
    }

    #[test]
    fn another_workers_open_transaction_or_a_short_one_passes() {
        let rows = [claim(1, "t/r/pay/v1", "worker-d1-aa")];
        let entries = [
            call(1, "t/r/pay/v1", vec![session("worker-a-bb", "idle in transaction", true)]),
            call(2, "t/r/pay/v1", vec![session("worker-d1-aa", "active", false)]),
            call(3, "t/r/pay/v1", vec![]),
        ];
        let c = no_transaction_across_call(&entries, &rows);
        assert!(c.passed(), "{}", c.evidence);
        assert!(c.evidence.starts_with("3 observed tool calls"), "{}", c.evidence);
    }

    #[test]
    fn a_later_dispatcher_holding_its_claim_across_a_retry_fails() {
        // The first claim rolled back with its dispatcher (never committed); the second dispatcher's
        // claim committed after its call.
        let rows = [claim(1, "t/r/pay/v1", "worker-d2-cc")];
        let entries = [
            call(1, "t/r/pay/v1", vec![session("worker-d1-aa", "idle in transaction", true)]),
            call(2, "t/r/pay/v1", vec![session("worker-d2-cc", "idle in transaction", true)]),
        ];
        let c = no_transaction_across_call(&entries, &rows);
        assert!(!c.passed() && c.evidence.contains("worker-d2-cc") && !c.evidence.contains("worker-d1-aa"));
    }

    #[test]
    fn unobserved_or_unclaimed_calls_are_counted_not_judged() {
        let rows = [claim(1, "t/r/pay/v1", "worker-d1-aa")];
        let blind = json!({"seq": 1, "kind": "created", "tool": "idem", "operation_id": "t/r/pay/v1",
                           "observed": {"error": "could not observe: refused"}});
        let other = call(2, "t/r/other/v1", vec![session("worker-d1-aa", "idle in transaction", true)]);
        let unobserved = json!({"seq": 3, "kind": "created", "tool": "idem", "operation_id": "t/r/pay/v1"});
        let c = no_transaction_across_call(&[blind, other, unobserved], &rows);
        assert!(c.passed(), "{}", c.evidence);
        assert!(c.evidence.contains("0 observed") && c.evidence.contains("1 calls could not be observed"));
        assert!(c.evidence.contains("1 of operations no dispatcher claimed"), "{}", c.evidence);
        let unreadable = json!({"pid": 9, "application_name": "worker-d1-aa", "state": null, "held": false});
        let c = no_transaction_across_call(&[call(4, "t/r/pay/v1", vec![unreadable])], &rows);
        assert!(c.passed() && c.evidence.contains("1 calls could not be observed"), "{}", c.evidence);
    }

    #[test]
    fn an_observation_without_the_second_look_counts_idle_in_transaction() {
        let rows = [claim(1, "op", "worker-d1-aa")];
        let mut s = session("worker-d1-aa", "idle in transaction", true);
        s.as_object_mut().unwrap().remove("held");
        assert!(!no_transaction_across_call(&[call(1, "op", vec![s])], &rows).passed());
    }
}
