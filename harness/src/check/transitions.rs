//! The spec's state machines of runs and ledger rows, judged commit by commit over the oracle:
//! every committed change must be one of the transitions the protocol allows, made by a writer
//! allowed to make it, in a transaction shaped as the protocol says. One checker per machine; each
//! names the commit that broke it. The lease's machine is the model's own (trace validation asks
//! the model for every lease change), so no checker here restates it.
//!
//! Only conditions the oracle can prove are judged. A liveness check made inside a statement
//! ("the lease has not expired") happens at a moment the oracle does not record, so it is judged
//! by the P-api probes instead; an expiry check ("the claim had expired") happens before the
//! row's own `updated_at = clock_timestamp()`, so `old.expiry <= new.updated_at` is necessary.

use std::collections::{BTreeMap, BTreeSet};

use super::evidence::shown;
use super::{Check, Found};
use crate::record::oracle::CommitRow;

/// A checker's name (the rule catalogue links rules to it).
pub const LEDGER_MACHINE: &str =
    "ledger rows follow the outbox state machine (intent with its checkpoint, claim, result, unknown, converge)";

/// A checker's name (the rule catalogue links rules to it).
pub const RUN_MACHINE: &str =
    "runs follow the state machine (created pending with their lease; worker and control-plane transitions)";

fn ts(v: Option<&str>) -> Option<chrono::DateTime<chrono::FixedOffset>> {
    v.and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
}

fn is_control(r: &CommitRow, control: &[&str]) -> bool {
    control.contains(&r.writer.as_str())
}

fn verdict(name: &str, judged: usize, what: &str, bad: Vec<Found>) -> Check {
    Check::from_found(name, bad, format!("{judged} {what}, each allowed"))
}

/// Runs are created pending at revision 0 with their lease in the same transaction; workers move
/// them pending → running → running … → succeeded | failed, the control plane to cancelled; a
/// worker transaction changes at most one run.
pub fn runs_follow_their_state_machine(rows: &[CommitRow], control: &[&str]) -> Check {
    let name = RUN_MACHINE;
    let worker_ok = [("pending", "running"), ("running", "running"), ("running", "succeeded"), ("running", "failed")];
    let control_ok = [("pending", "cancelled"), ("running", "cancelled")];
    let mut bad = Vec::new();
    let mut judged = 0;
    let lease_inserts: BTreeSet<(String, Option<uuid::Uuid>)> =
        rows.iter().filter(|r| r.is_leases() && r.op == "INSERT").map(|r| (r.xid.clone(), r.run_id)).collect();
    let mut runs_per_xid: BTreeMap<&str, BTreeMap<Option<uuid::Uuid>, i64>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.is_runs()) {
        if is_control(r, control) && r.op == "UPDATE" && r.old_row == r.new_row {
            continue;
        }
        judged += 1;
        let at = format!("commit #{} by {}", r.seq, r.writer);
        match r.op.as_str() {
            "INSERT" => {
                if r.new_str("status") != Some("pending") || r.new_i64("revision").is_some_and(|v| v != 0) {
                    let (status, revision) = (shown(r.new_str("status")), shown(r.new_i64("revision")));
                    let text = format!("{at}: created a run as {status} at revision {revision}");
                    bad.push(Found::at(r.seq, text).breaks("runs.created-with-lease"));
                }
                if !r.xid.is_empty() && !lease_inserts.contains(&(r.xid.clone(), r.run_id)) {
                    let text =
                        format!("{at}: created run {} without its lease in the same transaction", shown(r.run_id));
                    bad.push(Found::at(r.seq, text).breaks("runs.created-with-lease"));
                }
            }
            "UPDATE" => {
                let step = (r.old_str("status").unwrap_or(""), r.new_str("status").unwrap_or(""));
                let allowed = if is_control(r, control) {
                    control_ok.contains(&step) || worker_ok.contains(&step)
                } else {
                    worker_ok.contains(&step)
                };
                if !allowed {
                    let rule = if step.0 == "pending" { "runs.start" } else { "runs.transition-from-state" };
                    bad.push(Found::at(r.seq, format!("{at}: {} -> {}", step.0, step.1)).breaks(rule));
                }
                if !is_control(r, control) && !r.xid.is_empty() {
                    runs_per_xid.entry(r.xid.as_str()).or_default().entry(r.run_id).or_insert(r.seq);
                }
            }
            _ => {}
        }
    }
    for (xid, runs) in runs_per_xid.iter().filter(|(_, runs)| runs.len() > 1) {
        let text = format!(
            "transaction {xid} of a worker changed {} runs at once: {}",
            runs.len(),
            shown(runs.keys().collect::<Vec<_>>())
        );
        bad.push(Found::of(runs.values().copied(), text).breaks("commit.one-run-per-transaction"));
    }
    verdict(name, judged, "run changes", bad)
}

const LEDGER_IMMUTABLE: &[&str] =
    &["operation_id", "run_id", "step_id", "effect_version", "tool_name", "request_digest", "request_body"];

/// The outbox state machine of §09: intents are inserted `prepared` in the same transaction as a
/// checkpoint of their run by the same writer; then prepared → dispatching (a claim of a live
/// run's operation, for the writer) | cancelled (the control plane); dispatching → succeeded |
/// failed_final | unknown by the session that claimed it, or → unknown once the claim expired;
/// unknown → succeeded | failed_final | unknown. Every update raises the ledger revision by one and
/// leaves the intent's identity, digest and request alone.
pub fn ledger_follows_its_state_machine(rows: &[CommitRow], control: &[&str]) -> Check {
    let name = LEDGER_MACHINE;
    let mut replay = LedgerReplay::new(rows);
    let mut judged = 0;
    for r in rows {
        if r.is_runs() {
            replay.run_changed(r);
            continue;
        }
        if r.table_name != "tool_operations" {
            continue;
        }
        if is_control(r, control) && r.op == "UPDATE" && r.old_row == r.new_row {
            continue; // the harness holding the row (a no-op rewrite), not a transition
        }
        judged += 1;
        let op = r.new_str("operation_id").or(r.old_str("operation_id")).unwrap_or("?").to_string();
        let at = format!("commit #{} by {} on {op}", r.seq, r.writer);
        let control_writer = is_control(r, control);
        match r.op.as_str() {
            "INSERT" if !control_writer => replay.intent(r, &at),
            "UPDATE" => replay.update(r, &op, &at, control_writer),
            "DELETE" => replay.bad.push(Found::at(r.seq, format!("{at}: deleted a ledger row"))),
            _ => {}
        }
    }
    verdict(name, judged, "ledger changes", replay.bad)
}

/// What the ledger checker carries along the commit log, and what it found.
struct LedgerReplay {
    /// (xid, run, writer) of every run update: an intent must commit with one of its writer's.
    run_updates: BTreeSet<(String, Option<uuid::Uuid>, String)>,
    /// Who claimed what: (operation_id, dispatch_owner) -> writer of the claim.
    claimers: BTreeMap<(String, String), String>,
    /// The latest committed run status, replayed in commit order.
    run_status: BTreeMap<uuid::Uuid, String>,
    bad: Vec<Found>,
}

impl LedgerReplay {
    fn new(rows: &[CommitRow]) -> LedgerReplay {
        let run_updates = rows
            .iter()
            .filter(|r| r.is_runs() && r.op == "UPDATE")
            .map(|r| (r.xid.clone(), r.run_id, r.writer.clone()))
            .collect();
        LedgerReplay { run_updates, claimers: BTreeMap::new(), run_status: BTreeMap::new(), bad: Vec::new() }
    }

    fn run_changed(&mut self, r: &CommitRow) {
        if let (Some(run), Some(s)) = (r.run_id, r.new_str("status")) {
            self.run_status.insert(run, s.to_string());
        }
    }

    /// A worker's insert: a prepared intent, committed with a checkpoint of its run.
    fn intent(&mut self, r: &CommitRow, at: &str) {
        if r.new_str("status") != Some("prepared") {
            let text = format!("{at}: inserted as {}, not prepared", shown(r.new_str("status")));
            self.bad.push(Found::at(r.seq, text).breaks("intent.same-transaction"));
        }
        if !r.xid.is_empty() && !self.run_updates.contains(&(r.xid.clone(), r.run_id, r.writer.clone())) {
            let text = format!("{at}: intent committed without a checkpoint of its run in the same transaction");
            self.bad.push(Found::at(r.seq, text).breaks("intent.same-transaction"));
        }
    }

    /// An update: revision + 1, identity untouched, and a status move the machine allows.
    fn update(&mut self, r: &CommitRow, op: &str, at: &str, control_writer: bool) {
        let (from, to) = (r.old_str("status").unwrap_or(""), r.new_str("status").unwrap_or(""));
        let (old_rev, new_rev) = (r.old_i64("revision"), r.new_i64("revision"));
        if old_rev.zip(new_rev).is_none_or(|(o, n)| n != o + 1) {
            let text = format!("{at}: ledger revision {} -> {}, not + 1", shown(old_rev), shown(new_rev));
            self.bad.push(Found::at(r.seq, text).breaks("ledger.revision-plus-one"));
        }
        for f in LEDGER_IMMUTABLE {
            if r.old_field(f) != r.new_field(f) {
                self.bad.push(Found::at(r.seq, format!("{at}: changed the intent's {f}")));
            }
        }
        let old_owner = r.old_str("dispatch_owner").unwrap_or("").to_string();
        let claimed_by = self.claimers.get(&(op.to_string(), old_owner)).cloned();
        let by_claimer = claimed_by.as_deref().is_none_or(|w| w == r.writer);
        match (from, to) {
            ("prepared", "dispatching") => self.claim(r, op, at),
            ("prepared", "cancelled") if control_writer => {}
            ("dispatching", "succeeded" | "failed_final") => {
                if !by_claimer {
                    let text = format!("{at}: wrote the result of a claim made by {}", shown(&claimed_by));
                    self.bad.push(Found::at(r.seq, text).breaks("result.claim-owner-revision-digest"));
                }
            }
            ("dispatching", "unknown") => {
                let expired =
                    ts(r.old_str("dispatch_until")).zip(ts(r.new_str("updated_at"))).is_some_and(|(d, u)| d <= u);
                if !by_claimer && !expired {
                    let until = shown(r.old_str("dispatch_until"));
                    let text = format!("{at}: moved a live claim of {} (until {until}) to unknown", shown(&claimed_by));
                    self.bad.push(Found::at(r.seq, text).breaks("unknown.expired-claim-as-seen"));
                }
            }
            ("unknown", "succeeded" | "failed_final" | "unknown") => {}
            _ => self.bad.push(Found::at(r.seq, format!("{at}: {from} -> {to}"))),
        }
    }

    /// prepared -> dispatching: an operation of a live run, with an owner and a future deadline;
    /// remembered so that only the claimer writes its result.
    fn claim(&mut self, r: &CommitRow, op: &str, at: &str) {
        let status = r.run_id.and_then(|run| self.run_status.get(&run));
        if !status.is_none_or(|s| s == "pending" || s == "running") {
            let text = format!("{at}: claimed an operation of a run that was already {}", shown(status));
            self.bad.push(Found::at(r.seq, text).breaks("claim.prepared-of-live-runs"));
        }
        let until = ts(r.new_str("dispatch_until")).zip(ts(r.new_str("updated_at")));
        if r.new_str("dispatch_owner").is_none() || until.is_none_or(|(d, u)| d <= u) {
            let text = format!("{at}: a claim without a dispatch owner and a deadline in the future");
            self.bad.push(Found::at(r.seq, text).breaks("claim.prepared-of-live-runs"));
        }
        if let Some(o) = r.new_str("dispatch_owner") {
            self.claimers.insert((op.to_string(), o.to_string()), r.writer.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::commit_rows::{commit_row, CommitRowBuilder};
    use serde_json::{json, Value};

    fn row(seq: i64, table: &str, op: &str, writer: &str, xid: &str, old: Value, new: Value) -> CommitRow {
        commit_row(seq, table, op).xid(xid).by(writer).change(old, new)
    }

    const T0: &str = "2026-01-01T00:00:00+00:00";
    const T1: &str = "2026-01-01T00:00:01+00:00";
    const T2: &str = "2026-01-01T00:00:02+00:00";

    #[test]
    fn runs_start_pending_with_their_lease_and_move_only_forward() {
        let check = |rows: Vec<CommitRow>| runs_follow_their_state_machine(&rows, &["ctl"]).passed();
        let create = |xid_lease: &str| {
            vec![
                row(1, "agent_runs", "INSERT", "ctl", "7", Value::Null, json!({"status": "pending", "revision": 0})),
                row(2, "worker_leases", "INSERT", "ctl", xid_lease, Value::Null, json!({"epoch": 0})),
            ]
        };
        assert!(check(create("7")));
        assert!(!check(create("8")), "lease in another transaction");
        let up = |w: &str, xid: &str, from: &str, to: &str| {
            row(3, "agent_runs", "UPDATE", w, xid, json!({"status": from}), json!({"status": to}))
        };
        assert!(check(vec![up("a", "9", "pending", "running"), up("a", "10", "running", "succeeded")]));
        assert!(!check(vec![up("a", "9", "pending", "succeeded")]));
        assert!(!check(vec![up("a", "9", "running", "cancelled")]), "a worker cancels");
        assert!(check(vec![up("ctl", "9", "running", "cancelled")]));
        let mut two = vec![up("a", "9", "running", "running"), up("a", "9", "running", "running")];
        two[1].run_id = Some(uuid::Uuid::from_u128(5));
        assert!(!check(two), "one worker transaction, two runs");
    }

    fn ledger_check(rows: Vec<CommitRow>) -> bool {
        ledger_follows_its_state_machine(&rows, &["ctl"]).passed()
    }

    fn ledger_op(w: &str, xid: &str, old: Value, new: Value) -> CommitRow {
        row(5, "tool_operations", if old.is_null() { "INSERT" } else { "UPDATE" }, w, xid, old, new)
    }

    fn prepared_op() -> Value {
        json!({"operation_id": "o", "status": "prepared", "revision": 0})
    }

    fn claimed_op() -> Value {
        json!({"operation_id": "o", "status": "dispatching", "revision": 1, "dispatch_owner": "d", "dispatch_until": T2, "updated_at": T1})
    }

    #[test]
    fn the_ledger_inserts_intents_with_their_checkpoint() {
        let (check, op) = (ledger_check, ledger_op);
        let ckpt = row(4, "agent_runs", "UPDATE", "a", "1", json!({"status": "running"}), json!({"status": "running"}));
        let intent = json!({"operation_id": "o", "status": "prepared", "revision": 0});
        assert!(check(vec![ckpt.clone(), op("a", "1", Value::Null, intent.clone())]));
        assert!(!check(vec![ckpt.clone(), op("a", "2", Value::Null, intent.clone())]), "intent without its checkpoint");
    }

    #[test]
    fn the_ledger_claims_live_runs_and_only_the_claimer_or_the_expiry_settles() {
        let (check, op) = (ledger_check, ledger_op);
        let (prepared, claimed) = (prepared_op(), claimed_op());
        let claim = op("d", "3", prepared.clone(), claimed.clone());
        assert!(check(vec![claim.clone()]));
        let mut cancelled_run = vec![
            row(1, "agent_runs", "UPDATE", "ctl", "0", json!({"status": "running"}), json!({"status": "cancelled"})),
            claim.clone(),
        ];
        assert!(!check(cancelled_run.clone()), "claim of a cancelled run");
        // The finding names the one rule it breaks, not every rule the machine judges.
        let found = ledger_follows_its_state_machine(&cancelled_run, &["ctl"]);
        let ids: Vec<&str> = found.rules.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["claim.prepared-of-live-runs"], "{found:?}");
        cancelled_run[0].new_row = Some(json!({"status": "running"}));
        assert!(check(cancelled_run));
        let done = |w: &str, until_field: &str| {
            op(
                w,
                "4",
                claimed.clone(),
                json!({"operation_id": "o", "status": "succeeded", "revision": 2, "dispatch_owner": "d", "updated_at": until_field}),
            )
        };
        assert!(check(vec![claim.clone(), done("d", T1)]));
        assert!(!check(vec![claim.clone(), done("x", T1)]), "result by another session");
        let unknown = |w: &str, at: &str| {
            op(
                w,
                "4",
                claimed.clone(),
                json!({"operation_id": "o", "status": "unknown", "revision": 2, "updated_at": at}),
            )
        };
        assert!(check(vec![claim.clone(), unknown("r", T2)]), "expired claim");
        assert!(!check(vec![claim.clone(), unknown("r", T0)]), "live claim of another");
    }

    #[test]
    fn the_ledger_moves_only_along_the_outbox_state_machine() {
        let (check, op) = (ledger_check, ledger_op);
        let (prepared, claimed) = (prepared_op(), claimed_op());
        assert!(
            !check(vec![op(
                "d",
                "4",
                claimed.clone(),
                json!({"operation_id": "o", "status": "succeeded", "revision": 1, "dispatch_owner": "d"})
            )]),
            "revision not + 1"
        );
        assert!(!check(vec![op(
            "d",
            "4",
            claimed.clone(),
            json!({"operation_id": "o", "status": "prepared", "revision": 2})
        )]));
        assert!(
            !check(vec![op(
                "a",
                "4",
                prepared.clone(),
                json!({"operation_id": "o", "status": "cancelled", "revision": 1})
            )]),
            "a worker cancels an intent"
        );
        assert!(check(vec![op(
            "ctl",
            "4",
            prepared,
            json!({"operation_id": "o", "status": "cancelled", "revision": 1})
        )]));
        assert!(
            !check(vec![op(
                "d",
                "4",
                claimed,
                json!({"operation_id": "o", "status": "succeeded", "revision": 2, "request_digest": "x"})
            )]),
            "digest changed"
        );
    }
}
