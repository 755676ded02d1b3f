//! The spec's global invariants, judged over the oracle's committed changes only.
//!
//! Writers are told apart by application_name: a worker's owner id, or one of the control-plane
//! names passed in `control` (the harness's setup session, a control-plane cancel).

use std::collections::BTreeMap;

use uuid::Uuid;

use super::evidence::shown;
use super::{Check, Found};
use crate::record::oracle::CommitRow;

/// The pattern of a checker's names, built at run time (`*` is any text).
pub const ONE_EFFECT_PER_OPERATION: &str = "one operation_id, at most one real side effect*";

/// The pattern of a checker's names, built at run time (`*` is any text).
pub const STALE_COMMITS_NOTHING_AFTER: &str = "* commits nothing after #*";

/// A checker's name (the rule catalogue links rules to it).
pub const LEDGER_BACK: &str = "operations never return to prepared, settled ones never change";

/// A checker's name (the rule catalogue links rules to it).
pub const TERMINAL_HOLDER: &str = "terminal states written only by the lease holder or the control plane";

/// A checker's name (the rule catalogue links rules to it).
pub const TERMINAL_FINAL: &str = "terminal states never change";

/// A checker's name (the rule catalogue links rules to it).
pub const TAKEOVERS: &str = "takeovers only of free or expired leases";

/// A checker's name (the rule catalogue links rules to it).
pub const EPOCHS: &str = "lease epochs only rise, by one per takeover";

/// A checker's name (the rule catalogue links rules to it).
pub const REVISIONS: &str = "revisions rise by exactly one per committed write";

/// A checker's name (the rule catalogue links rules to it).
pub const HOLDER: &str = "only the current lease holder commits run state";

const TERMINAL: &[&str] = &["succeeded", "failed", "cancelled"];

fn is_terminal(s: Option<&str>) -> bool {
    s.is_some_and(|s| TERMINAL.contains(&s))
}

fn by_run(rows: &[CommitRow], pick: impl Fn(&CommitRow) -> bool) -> BTreeMap<Uuid, Vec<&CommitRow>> {
    let mut m: BTreeMap<Uuid, Vec<&CommitRow>> = BTreeMap::new();
    for r in rows.iter().filter(|r| pick(r)) {
        if let Some(run) = r.run_id {
            m.entry(run).or_default().push(r);
        }
    }
    m
}

/// Only the current epoch's owner commits workflow state: every committed update of a run by a
/// worker was made while that worker was the lease's owner at commit time.
pub fn only_lease_holder_commits(rows: &[CommitRow], control: &[&str]) -> Check {
    let name = HOLDER;
    let mut checked = 0;
    let bad: Vec<Found> = rows
        .iter()
        .filter(|r| r.is_runs() && r.op == "UPDATE" && !control.contains(&r.writer.as_str()))
        .inspect(|_| checked += 1)
        .filter(|r| r.lease_owner() != Some(r.writer.as_str()))
        .map(|r| {
            let text = format!(
                "commit #{} by {} at revision {} while the lease was {}/epoch {}",
                r.seq,
                r.writer,
                shown(r.new_i64("revision")),
                shown(r.lease_owner()),
                shown(r.lease_epoch())
            );
            Found::at(r.seq, text)
        })
        .collect();
    Check::from_found(name, bad, format!("{checked} worker commits, each by the lease owner at commit"))
}

/// Revisions of a run rise by exactly one per committed write and form one unbroken chain.
pub fn revisions_rise_by_one(rows: &[CommitRow]) -> Check {
    let name = REVISIONS;
    let mut bad = Vec::new();
    let mut writes = 0;
    for (run, commits) in by_run(rows, CommitRow::is_runs) {
        let mut last: Option<i64> = None;
        for r in commits {
            match r.op.as_str() {
                "INSERT" => last = r.new_i64("revision"),
                "UPDATE" => {
                    writes += 1;
                    let (old, new) = (r.old_i64("revision"), r.new_i64("revision"));
                    let chained = last.is_none() || old == last;
                    if !chained || new.zip(old).is_none_or(|(n, o)| n != o + 1) {
                        let text = format!(
                            "run {run} commit #{} by {}: revision {} -> {} (previous commit left {})",
                            r.seq,
                            r.writer,
                            shown(old),
                            shown(new),
                            shown(last)
                        );
                        bad.push(Found::at(r.seq, text));
                    }
                    last = new;
                }
                _ => bad.push(Found::at(r.seq, format!("run {run} commit #{}: {} of a run", r.seq, r.op))),
            }
        }
    }
    Check::from_found(name, bad, format!("{writes} writes, each +1 on the previous"))
}

/// Epochs never go backwards, and each change of epoch is a +1.
pub fn epochs_never_go_back(rows: &[CommitRow]) -> Check {
    let name = EPOCHS;
    let mut bad = Vec::new();
    let mut terms = 0;
    for (run, commits) in by_run(rows, CommitRow::is_leases) {
        for r in commits.iter().filter(|r| r.op == "UPDATE") {
            let (old, new) = (r.old_i64("epoch"), r.new_i64("epoch"));
            match old.zip(new) {
                Some((o, n)) if n == o => {}
                Some((o, n)) if n == o + 1 => terms += 1,
                _ => {
                    let text =
                        format!("run {run} commit #{} by {}: epoch {} -> {}", r.seq, r.writer, shown(old), shown(new));
                    bad.push(Found::at(r.seq, text));
                }
            }
        }
    }
    Check::from_found(name, bad, format!("{terms} new terms, each epoch + 1"))
}

/// A new term only replaces a lease that was free or had expired: for every epoch increment, the
/// previous holder was none, or its expiry was not later than the takeover's commit.
pub fn takeovers_only_of_free_or_expired(rows: &[CommitRow]) -> Check {
    let name = TAKEOVERS;
    let mut takeovers = 0;
    let mut bad = Vec::new();
    for r in rows.iter().filter(|r| r.is_leases() && r.op == "UPDATE") {
        let (old, new) = (r.old_i64("epoch"), r.new_i64("epoch"));
        if old.zip(new).is_none_or(|(o, n)| n != o + 1) {
            continue;
        }
        takeovers += 1;
        let free = r.old_field("owner").is_none_or(|o| o.is_null());
        let expiry = r.old_str("expires_at").and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
        let expired = expiry.is_some_and(|e| e <= r.committed_at);
        if !free && !expired {
            let text = format!(
                "commit #{} by {} took epoch {} from {}, whose lease ran until {} (commit at {})",
                r.seq,
                r.writer,
                shown(new),
                shown(r.old_str("owner")),
                shown(r.old_str("expires_at")),
                r.committed_at.to_rfc3339()
            );
            bad.push(Found::at(r.seq, text));
        }
    }
    Check::from_found(name, bad, format!("{takeovers} takeovers, each of a free or expired lease"))
}

/// Terminal states never change again (a retry is a new run).
pub fn terminal_states_are_final(rows: &[CommitRow]) -> Check {
    let name = TERMINAL_FINAL;
    let bad: Vec<Found> = rows
        .iter()
        .filter(|r| r.is_runs() && r.op == "UPDATE" && is_terminal(r.old_str("status")))
        .map(|r| {
            let (from, to) = (shown(r.old_str("status")), shown(r.new_str("status")));
            Found::at(r.seq, format!("commit #{} by {} moved run from {from} to {to}", r.seq, r.writer))
        })
        .collect();
    Check::from_found(name, bad, "no update of a terminal run")
}

/// The worker `owner` committed nothing (no run or lease change) after commit `after_seq`.
pub fn silent_after(rows: &[CommitRow], owner: &str, after_seq: i64) -> Check {
    let name = format!("{owner} commits nothing after #{after_seq}");
    let late: Vec<&CommitRow> = rows.iter().filter(|r| r.seq > after_seq && r.writer == owner).collect();
    if late.is_empty() {
        return Check::pass(name, "no commit");
    }
    let said: Vec<String> = late.iter().map(|r| format!("#{} {} {}", r.seq, r.op, r.table_name)).collect();
    Check::fail(name, format!("committed {}", said.join(", "))).citing(late.iter().map(|r| r.seq))
}

/// Every terminal state was written by a worker holding the lease, or by the control plane.
pub fn terminal_only_by_holder(rows: &[CommitRow], control: &[&str]) -> Check {
    let name = TERMINAL_HOLDER;
    let bad: Vec<Found> = rows
        .iter()
        .filter(|r| {
            r.is_runs() && r.op == "UPDATE" && is_terminal(r.new_str("status")) && !is_terminal(r.old_str("status"))
        })
        .filter(|r| !control.contains(&r.writer.as_str()) && r.lease_owner() != Some(r.writer.as_str()))
        .map(|r| {
            let (status, owner) = (shown(r.new_str("status")), shown(r.lease_owner()));
            Found::at(
                r.seq,
                format!("commit #{} by {} wrote {status} while the lease owner was {owner}", r.seq, r.writer),
            )
        })
        .collect();
    Check::from_found(name, bad, "every terminal write by the holder or the control plane")
}

/// Through a tool that deduplicates (`tools`), one operation_id never yields two real side effects
/// (judged from the tools' ledger).
pub fn one_effect_per_operation(ledger: &[serde_json::Value], tools: &[&str]) -> Check {
    let name = format!("one operation_id, at most one real side effect ({})", tools.join(", "));
    let mut per_op: BTreeMap<(String, String), usize> = BTreeMap::new();
    for e in ledger.iter().filter(|e| e["kind"] == "created") {
        let tool = e["tool"].as_str().unwrap_or_default().to_string();
        if tools.contains(&tool.as_str()) {
            *per_op.entry((tool, e["operation_id"].as_str().unwrap_or_default().to_string())).or_default() += 1;
        }
    }
    let dup: Vec<String> =
        per_op.iter().filter(|(_, n)| **n > 1).map(|((t, op), n)| format!("{t} {op}: {n} resources")).collect();
    if dup.is_empty() {
        Check::pass(name, format!("{} operations, one resource each at most", per_op.len()))
    } else {
        Check::fail(name, dup.join("; "))
    }
}

/// A claimed operation never goes back to prepared, and a settled one never changes again.
pub fn ledger_never_goes_back(rows: &[CommitRow]) -> Check {
    let name = LEDGER_BACK;
    let settled = ["succeeded", "failed_final", "cancelled"];
    let bad: Vec<Found> = rows
        .iter()
        .filter(|r| r.table_name == "tool_operations" && r.op == "UPDATE")
        .filter(|r| {
            let (old, new) = (r.old_str("status").unwrap_or(""), r.new_str("status").unwrap_or(""));
            (old != "prepared" && new == "prepared") || settled.contains(&old)
        })
        .map(|r| {
            let text = format!(
                "commit #{} by {}: {} {} -> {}",
                r.seq,
                r.writer,
                r.new_str("operation_id").unwrap_or("?"),
                shown(r.old_str("status")),
                shown(r.new_str("status"))
            );
            Found::at(r.seq, text)
        })
        .collect();
    Check::from_found(name, bad, "no operation went back")
}

/// All the global invariants at once.
pub fn all(rows: &[CommitRow], control: &[&str]) -> Vec<Check> {
    vec![
        only_lease_holder_commits(rows, control),
        revisions_rise_by_one(rows),
        epochs_never_go_back(rows),
        takeovers_only_of_free_or_expired(rows),
        terminal_states_are_final(rows),
        terminal_only_by_holder(rows, control),
        ledger_never_goes_back(rows),
        super::transitions::runs_follow_their_state_machine(rows, control),
        super::transitions::ledger_follows_its_state_machine(rows, control),
        super::intents::digests_are_canonical(rows, control),
        super::intents::planned_with_new_checkpoint(rows, control),
        super::operation_ids::operation_ids_name_no_executor(rows, control),
        super::cancel::prepared_cancelled_with_their_run(rows),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::commit_rows::{commit_row, CommitRowBuilder};
    use serde_json::json;

    fn row(
        seq: i64,
        table: &str,
        op: &str,
        writer: &str,
        old: serde_json::Value,
        new: serde_json::Value,
        lease_owner: &str,
    ) -> CommitRow {
        commit_row(seq, table, op).xid("").by(writer).change(old, new).under_lease(lease_owner, 1)
    }

    #[test]
    fn a_stale_writer_is_caught() {
        let rows = vec![row(
            1,
            "agent_runs",
            "UPDATE",
            "w-a",
            json!({"revision": 1, "status": "running"}),
            json!({"revision": 2, "status": "running"}),
            "w-b",
        )];
        assert!(!only_lease_holder_commits(&rows, &[]).passed());
        let ok = vec![row(
            1,
            "agent_runs",
            "UPDATE",
            "w-b",
            json!({"revision": 1, "status": "running"}),
            json!({"revision": 2, "status": "running"}),
            "w-b",
        )];
        assert!(only_lease_holder_commits(&ok, &[]).passed());
    }

    #[test]
    fn a_skipped_or_repeated_revision_is_caught() {
        let chain = |revs: &[(i64, i64)]| -> Vec<CommitRow> {
            revs.iter()
                .enumerate()
                .map(|(i, (o, n))| {
                    row(i as i64, "agent_runs", "UPDATE", "w", json!({"revision": o}), json!({"revision": n}), "w")
                })
                .collect()
        };
        assert!(revisions_rise_by_one(&chain(&[(0, 1), (1, 2), (2, 3)])).passed());
        assert!(!revisions_rise_by_one(&chain(&[(0, 1), (1, 3)])).passed());
        // Two writers both starting from revision 1: a blind overwrite.
        assert!(!revisions_rise_by_one(&chain(&[(0, 1), (1, 2), (1, 2)])).passed());
    }

    #[test]
    fn a_zeroed_or_skipped_epoch_is_caught() {
        let e = |o: i64, n: i64| {
            vec![row(1, "worker_leases", "UPDATE", "w", json!({"epoch": o}), json!({"epoch": n}), "w")]
        };
        assert!(epochs_never_go_back(&e(3, 3)).passed());
        assert!(epochs_never_go_back(&e(3, 4)).passed());
        assert!(!epochs_never_go_back(&e(3, 0)).passed());
        assert!(!epochs_never_go_back(&e(3, 5)).passed());
    }

    #[test]
    fn a_takeover_of_a_live_lease_is_caught() {
        let at = |owner: serde_json::Value, expires: &str| {
            let mut r = row(
                1,
                "worker_leases",
                "UPDATE",
                "w-b",
                json!({"epoch": 1, "owner": owner, "expires_at": expires}),
                json!({"epoch": 2, "owner": "w-b"}),
                "w-b",
            );
            r.committed_at = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:10+00:00").unwrap().into();
            vec![r]
        };
        assert!(takeovers_only_of_free_or_expired(&at(json!("w-a"), "2026-01-01T00:00:09.5+00:00")).passed());
        assert!(takeovers_only_of_free_or_expired(&at(json!(null), "2026-01-01T00:01:00+00:00")).passed());
        assert!(!takeovers_only_of_free_or_expired(&at(json!("w-a"), "2026-01-01T00:00:11+00:00")).passed());
    }

    #[test]
    fn leaving_a_terminal_state_is_caught() {
        let rows = vec![row(
            1,
            "agent_runs",
            "UPDATE",
            "w",
            json!({"revision": 4, "status": "failed"}),
            json!({"revision": 5, "status": "running"}),
            "w",
        )];
        assert!(!terminal_states_are_final(&rows).passed());
    }

    #[test]
    fn a_terminal_write_without_the_lease_is_caught() {
        let rows = vec![row(
            1,
            "agent_runs",
            "UPDATE",
            "w-a",
            json!({"revision": 4, "status": "running"}),
            json!({"revision": 5, "status": "failed"}),
            "w-b",
        )];
        assert!(!terminal_only_by_holder(&rows, &[]).passed());
        assert!(terminal_only_by_holder(&rows, &["w-a"]).passed());
    }

    #[test]
    fn a_reset_to_prepared_or_a_changed_settled_operation_is_caught() {
        let op = |o: &str, n: &str| {
            vec![row(
                1,
                "tool_operations",
                "UPDATE",
                "d",
                json!({"status": o}),
                json!({"status": n, "operation_id": "op"}),
                "x",
            )]
        };
        assert!(ledger_never_goes_back(&op("prepared", "dispatching")).passed());
        assert!(ledger_never_goes_back(&op("dispatching", "unknown")).passed());
        assert!(!ledger_never_goes_back(&op("dispatching", "prepared")).passed());
        assert!(!ledger_never_goes_back(&op("unknown", "prepared")).passed());
        assert!(!ledger_never_goes_back(&op("succeeded", "unknown")).passed());
    }

    #[test]
    fn a_second_side_effect_for_one_operation_is_caught() {
        let e = |op: &str| json!({"kind": "created", "tool": "idem", "operation_id": op});
        assert!(one_effect_per_operation(&[e("a"), e("b")], &["idem"]).passed());
        assert!(!one_effect_per_operation(&[e("a"), e("a")], &["idem"]).passed());
        assert!(one_effect_per_operation(&[e("a"), e("a")], &["detid"]).passed(), "only the named tools count");
    }

    #[test]
    fn silence_is_checked_after_the_mark() {
        let rows = vec![row(5, "worker_leases", "UPDATE", "w-a", json!({"epoch": 1}), json!({"epoch": 1}), "w-a")];
        assert!(silent_after(&rows, "w-a", 5).passed());
        assert!(!silent_after(&rows, "w-a", 4).passed());
    }
}
