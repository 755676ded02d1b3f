//! Checkers of a restore from an old backup (spec §10), one per property, judged from the oracle
//! rows saved before the restore, the oracle rows after it, the restored ledger and the tools'
//! ledger. The restore rolls the oracle back too: the harness reads it out before the server stops,
//! and the rows after the restore are told apart by their sequence number (above the mark taken
//! when the restored server came up).

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::{Check, Found};
use crate::record::oracle::CommitRow;

pub const HELD: &str = "no worker commits while the restored database is held for the recovery (oracle)";
pub const EPOCHS_ABOVE: &str =
    "after the restore every lease term a worker takes or writes under is above every epoch handed out before it (oracle)";
pub const STALE_SILENT: &str = "nothing a worker from before the restore sends commits after it (oracle)";
pub const REMOTE_RECONCILED: &str =
    "before dispatch resumes, every side effect the remote holds is settled in the ledger, registered unknown or reported as a fork (tools' ledger)";

/// Nothing but the control plane (the recovery) committed in the hold window (`held` holds the
/// commits between the restored server's start and the end of the recovery).
pub fn dispatch_held(held: &[CommitRow], control: &[&str]) -> Check {
    let bad: Vec<Found> = held
        .iter()
        .filter(|r| !control.contains(&r.writer.as_str()))
        .map(|r| Found::at(r.seq, format!("#{} {} {} by {}", r.seq, r.op, r.table_name, r.writer)))
        .collect();
    Check::from_found(HELD, bad, format!("{} commits during the hold, all by the recovery", held.len()))
}

/// The highest epoch each run's lease reached in `rows` (a lease row's old or new epoch, or the
/// lease a run write committed under).
fn high_water(rows: &[CommitRow]) -> BTreeMap<Uuid, i64> {
    let mut hi: BTreeMap<Uuid, i64> = BTreeMap::new();
    for r in rows {
        let Some(run) = r.run_id else { continue };
        let seen = [
            r.old_i64("epoch").filter(|_| r.is_leases()),
            r.new_i64("epoch").filter(|_| r.is_leases()),
            r.lease_epoch(),
        ];
        for e in seen.into_iter().flatten() {
            let h = hi.entry(run).or_insert(e);
            *h = (*h).max(e);
        }
    }
    hi
}

/// Every worker lease write after the restore takes an epoch above the highest one handed out
/// before it, and every worker run write commits under such a lease: otherwise an epoch a live
/// worker from before the restore believes in is current again.
pub fn epochs_above_before(before: &[CommitRow], after: &[CommitRow], control: &[&str]) -> Check {
    let hi = high_water(before);
    let mut bad = Vec::new();
    let mut judged = 0;
    for r in after.iter().filter(|r| !control.contains(&r.writer.as_str()) && (r.is_leases() || r.is_runs())) {
        let Some(limit) = r.run_id.and_then(|run| hi.get(&run)) else { continue };
        let epoch = if r.is_leases() { r.new_i64("epoch") } else { r.lease_epoch() };
        let Some(epoch) = epoch else { continue };
        judged += 1;
        if epoch <= *limit {
            let text = format!(
                "#{} {} {} by {} under epoch {epoch}, not above {limit} reached before the restore",
                r.seq, r.op, r.table_name, r.writer
            );
            bad.push(Found::at(r.seq, text));
        }
    }
    let highest = hi.iter().map(|(run, e)| format!("{run}: {e}")).collect::<Vec<_>>().join(", ");
    Check::from_found(
        EPOCHS_ABOVE,
        bad,
        format!("{judged} worker commits after the restore, each above the epoch before it ({highest})"),
    )
}

/// No commit after the restore was written by one of `stale` (the workers running before it).
pub fn stale_writers_silent(after: &[CommitRow], stale: &[String]) -> Check {
    let bad: Vec<Found> = after
        .iter()
        .filter(|r| stale.contains(&r.writer))
        .map(|r| Found::at(r.seq, format!("#{} {} {} by {}", r.seq, r.op, r.table_name, r.writer)))
        .collect();
    Check::from_found(STALE_SILENT, bad, format!("no commit by {} after the restore", stale.join(", ")))
}

/// Every operation the remote executed (`remote`) is, in the ledger as the workers find it when the
/// database reopens (`ledger`: operation_id -> status), settled `succeeded`; or a fork the
/// recovery registered `unknown` (never dispatched again); or absent from it and reported as a
/// fork. A row still `prepared` invites a second dispatch; an unreported absent one is a history
/// fork nobody will look at.
pub fn remote_reconciled(
    remote: &BTreeSet<String>,
    ledger: &BTreeMap<String, String>,
    (registered, forks): (&[String], &[String]),
) -> Check {
    let mut bad = Vec::new();
    for op in remote {
        match ledger.get(op).map(String::as_str) {
            Some("succeeded") => {}
            Some("unknown") if registered.contains(op) => {}
            Some(other) => bad.push(format!("{op}: executed remotely, the ledger says {other}")),
            None if forks.contains(op) => {}
            None => bad.push(format!("{op}: executed remotely, unknown to the ledger and not reported")),
        }
    }
    if bad.is_empty() {
        Check::pass(
            REMOTE_RECONCILED,
            format!(
                "{} remote side effects: settled, registered unknown ({}) or reported ({})",
                remote.len(),
                registered.len(),
                forks.len()
            ),
        )
    } else {
        Check::fail(REMOTE_RECONCILED, bad.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::commit_rows::{commit_row, CommitRowBuilder};
    use serde_json::{json, Value};

    fn row(seq: i64, table: &str, writer: &str, old: Value, new: Value, lease_epoch: i64) -> CommitRow {
        commit_row(seq, table, "UPDATE").xid("").by(writer).change(old, new).under_lease(writer, lease_epoch)
    }

    fn before() -> Vec<CommitRow> {
        vec![
            row(1, "worker_leases", "a", json!({"epoch": 0}), json!({"epoch": 1}), 1),
            row(2, "worker_leases", "b", json!({"epoch": 1}), json!({"epoch": 2}), 2),
            row(3, "agent_runs", "b", json!({}), json!({}), 2),
        ]
    }

    #[test]
    fn a_reused_epoch_after_the_restore_is_caught() {
        let reused = [row(10, "worker_leases", "c", json!({"epoch": 1}), json!({"epoch": 2}), 2)];
        assert!(!epochs_above_before(&before(), &reused, &["ctl"]).passed());
        let raised = [
            row(9, "worker_leases", "ctl", json!({"epoch": 1}), json!({"epoch": 100}), 100),
            row(10, "worker_leases", "c", json!({"epoch": 100}), json!({"epoch": 101}), 101),
            row(11, "agent_runs", "c", json!({}), json!({}), 101),
        ];
        assert!(epochs_above_before(&before(), &raised, &["ctl"]).passed());
        let old_term_write = [row(11, "agent_runs", "a", json!({}), json!({}), 1)];
        assert!(!epochs_above_before(&before(), &old_term_write, &["ctl"]).passed());
    }

    #[test]
    fn a_stale_commit_after_the_restore_is_caught() {
        let after = [row(10, "agent_runs", "b", json!({}), json!({}), 2)];
        assert!(!stale_writers_silent(&after, &["a".into(), "b".into()]).passed());
        assert!(stale_writers_silent(&after, &["a".into()]).passed());
    }

    #[test]
    fn a_worker_commit_during_the_hold_is_caught() {
        let held = [row(5, "worker_leases", "ctl", json!({"epoch": 1}), json!({"epoch": 9}), 9)];
        assert!(dispatch_held(&held, &["ctl"]).passed());
        let leaked = [row(6, "agent_runs", "c", json!({}), json!({}), 1)];
        assert!(!dispatch_held(&leaked, &["ctl"]).passed());
    }

    #[test]
    fn a_forgotten_or_still_prepared_remote_effect_is_caught() {
        let remote: BTreeSet<String> = ["op1".to_string(), "op2".to_string()].into();
        let mut ledger = BTreeMap::from([("op1".to_string(), "prepared".to_string())]);
        let op2 = ["op2".to_string()];
        assert!(!remote_reconciled(&remote, &ledger, (&[], &op2)).passed(), "op1 would be sent again");
        ledger.insert("op1".into(), "succeeded".into());
        assert!(!remote_reconciled(&remote, &ledger, (&[], &[])).passed(), "op2 is a fork nobody reported");
        assert!(remote_reconciled(&remote, &ledger, (&[], &op2)).passed());
        // A fork registered unknown is resolved; an unknown row the recovery did not register is not.
        ledger.insert("op2".into(), "unknown".into());
        assert!(remote_reconciled(&remote, &ledger, (&op2, &[])).passed());
        assert!(!remote_reconciled(&remote, &ledger, (&[], &[])).passed());
    }
}
