//! No transaction of the dispatcher spans a remote call (spec §06: no HTTP wait inside a protected
//! transaction; §09.2: the claim transaction does not span HTTP). A dispatcher that claims, calls
//! the tool and only then commits passes every other check, until it dies during the call: the
//! claim rolls back, the operation is `prepared` again, and a plain tool runs twice.
//!
//! Judged from evidence, for any worker: at every create and query the fake tools read the
//! callers' sessions with an open transaction (`observed` in the call's ledger entry, see the
//! fake tools' `observe` module), and the oracle's `tool_operations` commits name each operation's
//! dispatchers (`dispatch_owner`, a dispatcher's owner id, which is its sessions'
//! application_name). Each call is attributed to the process that made it (the tools record the
//! caller's process group from the kernel's socket tables, the harness's timeline names the
//! worker it started as that group: [`super::callers`]). A call of an operation, made by one of
//! its dispatchers while that same dispatcher held a transaction open, is a violation; another
//! process's call (a reconciler's query while a dispatcher waits in its transaction) blames no
//! one, and a call whose caller cannot be named is counted, not judged.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::callers::{Caller, Callers};
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
        "{op}: {} call (ledger #{}, {}, at {}) made by {} (pid {}) while its own session (backend pid {}) held a \
         transaction open ({}, xid {}, open {} ms since {})",
        e["tool"].as_str().unwrap_or("?"),
        e["seq"],
        e["kind"].as_str().unwrap_or("?"),
        e["at"].as_str().unwrap_or("?"),
        s["application_name"].as_str().unwrap_or("?"),
        e["observed"]["caller"]["pid"],
        s["pid"],
        s["state"].as_str().unwrap_or("?"),
        s["backend_xid"].as_str().unwrap_or("none"),
        s["open_ms"],
        s["xact_start"].as_str().unwrap_or("?"),
    )
}

/// How the calls were counted.
#[derive(Default)]
struct Tally {
    judged: usize,
    blind: usize,
    unclaimed: usize,
    others: usize,
    unnamed: usize,
}

/// For each observed tool call of an operation made by one of the operation's dispatchers (as
/// the oracle shows them claiming it), that dispatcher had no transaction open across its call.
/// Another session's open transaction at the same moment, and a call another process made, are
/// no concern of this rule.
pub fn no_transaction_across_call(entries: &[Value], rows: &[CommitRow], callers: &Callers) -> Check {
    let by_op = dispatchers(rows);
    let mut t = Tally::default();
    let mut bad = Vec::new();
    for e in entries.iter().filter(|e| e["observed"].is_object()) {
        let Some(op) = e["operation_id"].as_str() else { continue };
        let Some(owners) = by_op.get(op) else {
            t.unclaimed += 1;
            continue;
        };
        let Some(sessions) = e["observed"]["sessions"].as_array() else {
            t.blind += 1;
            continue;
        };
        let owner = match callers.of(e) {
            Caller::Owner(o) if owners.contains(o.as_str()) => o,
            Caller::Owner(_) => {
                t.others += 1;
                continue;
            }
            Caller::Unknown(_) => {
                t.unnamed += 1;
                continue;
            }
        };
        let ours: Vec<&Value> = sessions.iter().filter(|s| s["application_name"] == owner.as_str()).collect();
        // A dispatcher's session the observer may not read (no state shown) leaves the call unjudged.
        if ours.iter().any(|s| s["state"].is_null()) {
            t.blind += 1;
            continue;
        }
        t.judged += 1;
        bad.extend(ours.into_iter().filter(|s| held(s)).map(|s| describe(op, e, s)));
    }
    Check::from_violations(
        NO_TRANSACTION_ACROSS_CALL,
        bad,
        format!(
            "{} observed tool calls of claimed operations by their dispatchers, none while the calling dispatcher \
             held a transaction open; {} calls could not be observed, {} of operations no dispatcher claimed, {} made \
             by another process, {} whose caller the kernel did not name",
            t.judged, t.blind, t.unclaimed, t.others, t.unnamed
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const D1: i64 = 101;
    const D2: i64 = 202;
    const A: i64 = 303;

    fn callers() -> Callers {
        Callers::from_pairs([(D1, "worker-d1-aa"), (D2, "worker-d2-cc"), (A, "worker-a-bb")])
    }

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

    /// A call of `op` made by the process group `by`.
    fn call(seq: u64, op: &str, by: i64, sessions: Vec<Value>) -> Value {
        json!({"seq": seq, "at": "1893456001.000000", "kind": "created", "tool": "plain", "operation_id": op,
               "resource_id": "plain-1",
               "observed": {"sessions": sessions, "caller": {"pid": by + 1, "pgid": by}, "took_ms": 3}})
    }

    fn judge(entries: &[Value], rows: &[CommitRow]) -> Check {
        no_transaction_across_call(entries, rows, &callers())
    }

    #[test]
    fn a_call_while_the_dispatcher_holds_its_claim_transaction_fails() {
        let rows = [claim(1, "t/r/pay/v1", "worker-d1-aa")];
        let entries = [call(1, "t/r/pay/v1", D1, vec![session("worker-d1-aa", "idle in transaction", true)])];
        let c = judge(&entries, &rows);
        assert!(!c.passed(), "{}", c.evidence);
        for part in ["t/r/pay/v1", "worker-d1-aa", "ledger #1", "plain", "idle in transaction", "4711", "pid 102"] {
            assert!(c.evidence.contains(part), "{part} missing from: {}", c.evidence);
        }
    }

    #[test]
    fn another_workers_open_transaction_or_a_short_one_passes() {
        let rows = [claim(1, "t/r/pay/v1", "worker-d1-aa")];
        let entries = [
            call(1, "t/r/pay/v1", D1, vec![session("worker-a-bb", "idle in transaction", true)]),
            call(2, "t/r/pay/v1", D1, vec![session("worker-d1-aa", "active", false)]),
            call(3, "t/r/pay/v1", D1, vec![]),
        ];
        let c = judge(&entries, &rows);
        assert!(c.passed(), "{}", c.evidence);
        assert!(c.evidence.starts_with("3 observed tool calls"), "{}", c.evidence);
    }

    /// E-idem-pause with a dispatcher that waits at its `before_result_write` barrier inside its
    /// result-write transaction: the reconciler (another process) queries the tool meanwhile. The
    /// dispatcher's transaction spans the reconciler's call, never its own: no violation. The
    /// same session at the dispatcher's own call is one.
    #[test]
    fn another_process_call_while_a_dispatcher_waits_in_its_transaction_blames_no_one() {
        let rows = [claim(1, "t/r/pay/v1", "worker-d1-aa"), claim(2, "t/r/pay/v1", "worker-d2-cc")];
        let waiting = || session("worker-d1-aa", "idle in transaction", true);
        let c = judge(&[call(1, "t/r/pay/v1", D2, vec![waiting()])], &rows);
        assert!(c.passed(), "{}", c.evidence);
        assert!(
            c.evidence.starts_with("1 observed") && c.evidence.contains("0 made by another process"),
            "{}",
            c.evidence
        );
        let reconciler_only = [claim(1, "t/r/pay/v1", "worker-d1-aa")];
        let c = judge(&[call(1, "t/r/pay/v1", A, vec![waiting()])], &reconciler_only);
        assert!(c.passed() && c.evidence.contains("1 made by another process"), "{}", c.evidence);
        assert!(!judge(&[call(1, "t/r/pay/v1", D1, vec![waiting()])], &rows).passed());
    }

    #[test]
    fn a_later_dispatcher_holding_its_claim_across_a_retry_fails() {
        // The first claim rolled back with its dispatcher (never committed); the second dispatcher's
        // claim committed after its call.
        let rows = [claim(1, "t/r/pay/v1", "worker-d2-cc")];
        let entries = [
            call(1, "t/r/pay/v1", D1, vec![session("worker-d1-aa", "idle in transaction", true)]),
            call(2, "t/r/pay/v1", D2, vec![session("worker-d2-cc", "idle in transaction", true)]),
        ];
        let c = judge(&entries, &rows);
        assert!(!c.passed() && c.evidence.contains("worker-d2-cc") && !c.evidence.contains("worker-d1-aa"));
    }

    #[test]
    fn unobserved_unclaimed_or_unnamed_calls_are_counted_not_judged() {
        let rows = [claim(1, "t/r/pay/v1", "worker-d1-aa")];
        let blind = json!({"seq": 1, "kind": "created", "tool": "idem", "operation_id": "t/r/pay/v1",
                           "observed": {"error": "could not observe: refused"}});
        let other = call(2, "t/r/other/v1", D1, vec![session("worker-d1-aa", "idle in transaction", true)]);
        let unobserved = json!({"seq": 3, "kind": "created", "tool": "idem", "operation_id": "t/r/pay/v1"});
        let c = judge(&[blind, other, unobserved], &rows);
        assert!(c.passed(), "{}", c.evidence);
        assert!(c.evidence.contains("0 observed") && c.evidence.contains("1 calls could not be observed"));
        assert!(c.evidence.contains("1 of operations no dispatcher claimed"), "{}", c.evidence);
        let unreadable = json!({"pid": 9, "application_name": "worker-d1-aa", "state": null, "held": false});
        let c = judge(&[call(4, "t/r/pay/v1", D1, vec![unreadable])], &rows);
        assert!(c.passed() && c.evidence.contains("1 calls could not be observed"), "{}", c.evidence);
        let mut unnamed = call(5, "t/r/pay/v1", D1, vec![session("worker-d1-aa", "idle in transaction", true)]);
        unnamed["observed"]["caller"] = json!({"error": "no socket"});
        let c = judge(&[unnamed], &rows);
        assert!(c.passed() && c.evidence.contains("1 whose caller the kernel did not name"), "{}", c.evidence);
    }

    #[test]
    fn an_observation_without_the_second_look_counts_idle_in_transaction() {
        let rows = [claim(1, "op", "worker-d1-aa")];
        let mut s = session("worker-d1-aa", "idle in transaction", true);
        s.as_object_mut().unwrap().remove("held");
        assert!(!judge(&[call(1, "op", D1, vec![s])], &rows).passed());
    }
}
