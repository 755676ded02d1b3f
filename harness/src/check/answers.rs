//! The workers' answers against what committed, in every row (spec §06, §07, §09.3: a refused
//! write must be reported as refused, an unknown outcome as unknown, and "zero rows must not be
//! silently ignored by the caller"). The harness knows what it sent (its timeline), the worker
//! says what happened (its events), the oracle knows what committed. Per owner:
//!
//!   writes answered `ok`  <=  run commits by that owner  <=  ok + unknown + unanswered
//!
//! A worker that answers `ok` for a write the database refused (or never made) breaks the left
//! side; one that reports a refusal, a plain error or nothing wrong for a write that did commit
//! breaks the right side. A scripted worker's commands are its own (the harness sent none), so
//! only the left side is judged for it.

use std::collections::BTreeMap;

use serde_json::Value;

use super::Check;
use crate::record::oracle::CommitRow;

/// A checker's name (the rule catalogue links rules to it).
pub const DISPATCH_ANSWERS_AGREE: &str =
    "every dispatch entry reported succeeded, failed_final or unknown is committed so in the ledger by its dispatcher";

/// A checker's name (the rule catalogue links rules to it).
pub const LEASE_ANSWERS_AGREE: &str = "every acquire answered ok took the lease and every takeover was answered ok or unknown; every release answered ok released it";

/// A checker's name (the rule catalogue links rules to it).
pub const WRITES_AGREE: &str =
    "every write answered ok committed, and every write that committed was answered ok or unknown";

/// The commands that commit a run update when they succeed.
pub const RUN_WRITES: &[&str] = &["start", "save", "succeed", "fail", "plan", "advance"];

/// What one owner's processes were asked and answered.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    pub ok: usize,
    pub unknown: usize,
    pub unanswered: usize,
    /// Whether some of its writes were its own (scripted mode): the upper bound is then open.
    pub scripted: bool,
}

/// Tally each owner's run writes from the harness's timeline (`timeline.jsonl` entries) and the
/// workers' events (every line of every `worker-<name>.events.jsonl`, with the file's `<name>`).
pub fn tally(timeline: &[Value], events: &[(String, Value)]) -> BTreeMap<String, Tally> {
    tally_of(timeline, events, RUN_WRITES)
}

/// The same tally for the commands `cmds` (e.g. `["acquire"]`).
pub fn tally_of(timeline: &[Value], events: &[(String, Value)], cmds: &[&str]) -> BTreeMap<String, Tally> {
    // (target, owner, id) -> answer outcome
    let mut answers: BTreeMap<(String, String, u64), String> = BTreeMap::new();
    for (target, e) in events {
        if let (Some(owner), Some(id), Some(ev), Some(out)) =
            (e["owner"].as_str(), e["id"].as_u64(), e["event"].as_str(), e["outcome"].as_str())
        {
            if cmds.contains(&ev) {
                answers.insert((target.clone(), owner.to_string(), id), out.to_string());
            }
        }
    }
    let mut owner_of: BTreeMap<String, (String, bool)> = BTreeMap::new();
    let mut out: BTreeMap<String, Tally> = BTreeMap::new();
    for t in timeline.iter().filter(|t| t["actor"] == "harness") {
        let target = t["target"].as_str().unwrap_or_default().to_string();
        match t["action"].as_str() {
            Some("spawn") => {
                if let Some(owner) = t["detail"]["owner"].as_str() {
                    let scripted = t["detail"]["args"].as_array().is_some_and(|a| a.iter().any(|x| x == "--script"));
                    owner_of.insert(target, (owner.to_string(), scripted));
                }
            }
            Some("command") => {
                let (Some((owner, _)), Some(cmd), Some(id)) =
                    (owner_of.get(&target), t["detail"]["cmd"].as_str(), t["detail"]["id"].as_u64())
                else {
                    continue;
                };
                if !cmds.contains(&cmd) {
                    continue;
                }
                let e = out.entry(owner.clone()).or_default();
                match answers.remove(&(target.clone(), owner.clone(), id)).as_deref() {
                    Some("ok") => e.ok += 1,
                    Some("outcome_unknown") => e.unknown += 1,
                    Some(_) => {}
                    None => e.unanswered += 1,
                }
            }
            _ => {}
        }
    }
    // What is left answered commands nobody in the timeline sent: a scripted worker's own.
    for ((target, owner, _), outcome) in answers {
        if owner_of.get(&target).is_some_and(|(_, scripted)| *scripted) {
            let e = out.entry(owner).or_default();
            e.scripted = true;
            if outcome == "ok" {
                e.ok += 1;
            }
        }
    }
    out
}

/// Judge every owner's tally against its run commits (control-plane writers are not judged).
pub fn answers_agree_with_commits(rows: &[CommitRow], tallies: &BTreeMap<String, Tally>, control: &[&str]) -> Check {
    let name = WRITES_AGREE;
    let mut commits: BTreeMap<&str, usize> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.is_runs() && r.op == "UPDATE" && !control.contains(&r.writer.as_str())) {
        *commits.entry(r.writer.as_str()).or_default() += 1;
    }
    let mut bad = Vec::new();
    let mut judged = 0;
    for (owner, t) in tallies {
        if control.contains(&owner.as_str()) {
            continue;
        }
        judged += 1;
        let n = commits.get(owner.as_str()).copied().unwrap_or(0);
        if n < t.ok {
            bad.push(format!("{owner} answered ok to {} run write(s) but committed {n}", t.ok));
        }
        let most = t.ok + t.unknown + t.unanswered;
        if !t.scripted && n > most {
            bad.push(format!(
                "{owner} committed {n} run write(s) but answered ok to {}, outcome_unknown to {} and left {} unanswered: a committed write was reported as refused or failed",
                t.ok, t.unknown, t.unanswered
            ));
        }
    }
    Check::from_violations(name, bad, format!("{judged} owner(s): answers and commits agree"))
}

/// The takeovers (a lease update raising the epoch by one, to the writer) and releases (the
/// writer's own term cleared) each owner committed.
fn lease_commits<'a>(rows: &'a [CommitRow], control: &[&str]) -> (BTreeMap<&'a str, usize>, BTreeMap<&'a str, usize>) {
    let (mut takeovers, mut releases) = (BTreeMap::new(), BTreeMap::new());
    for r in rows.iter().filter(|r| r.is_leases() && r.op == "UPDATE" && !control.contains(&r.writer.as_str())) {
        let (old_epoch, new_epoch) = (r.old_i64("epoch"), r.new_i64("epoch"));
        if new_epoch.is_some() && new_epoch == old_epoch.map(|e| e + 1) && r.new_str("owner") == Some(r.writer.as_str())
        {
            *takeovers.entry(r.writer.as_str()).or_default() += 1;
        } else if r.new_str("owner").is_none()
            && r.old_str("owner") == Some(r.writer.as_str())
            && new_epoch == old_epoch
        {
            *releases.entry(r.writer.as_str()).or_default() += 1;
        }
    }
    (takeovers, releases)
}

/// Acquires: every `ok` took the lease; every takeover was answered `ok` or `outcome_unknown` (or
/// not at all). Releases: every `ok` released it (a worker may let a lease go on its own, so only
/// that side is judged).
pub fn lease_answers_agree(
    rows: &[CommitRow],
    acquires: &BTreeMap<String, Tally>,
    releases: &BTreeMap<String, Tally>,
    control: &[&str],
) -> Check {
    let name = LEASE_ANSWERS_AGREE;
    let (took, released) = lease_commits(rows, control);
    let mut bad = Vec::new();
    let mut judged = 0;
    for (owner, t) in acquires.iter().filter(|(o, _)| !control.contains(&o.as_str())) {
        judged += 1;
        let n = took.get(owner.as_str()).copied().unwrap_or(0);
        if n < t.ok {
            bad.push(format!("{owner} answered ok to {} acquire(s) but took {n} lease(s)", t.ok));
        }
        if !t.scripted && n > t.ok + t.unknown + t.unanswered {
            bad.push(format!(
                "{owner} took {n} lease(s) but answered ok to {} acquire(s), outcome_unknown to {}, left {} unanswered: a takeover was reported as refused",
                t.ok, t.unknown, t.unanswered
            ));
        }
    }
    for (owner, t) in releases.iter().filter(|(o, _)| !control.contains(&o.as_str())) {
        judged += 1;
        let n = released.get(owner.as_str()).copied().unwrap_or(0);
        if n < t.ok {
            bad.push(format!("{owner} answered ok to {} release(s) but released {n} lease(s)", t.ok));
        }
    }
    Check::from_violations(name, bad, format!("{judged} owner tallies: lease answers and lease commits agree"))
}

/// Each entry of a dispatch answer that reports the operation settled (`succeeded`,
/// `failed_final`) or `unknown` has its ledger commit by that dispatcher to exactly that status:
/// a dispatcher that reports a result it never wrote (or whose write the database refused) hides a
/// `write_rejected` that "must not be silently ignored" (§09.3).
pub fn dispatch_answers_agree(rows: &[CommitRow], events: &[(String, Value)]) -> Check {
    let name = DISPATCH_ANSWERS_AGREE;
    let mut bad = Vec::new();
    let mut judged = 0;
    for (_, e) in events.iter().filter(|(_, e)| e["event"] == "dispatch" && e["outcome"] == "ok") {
        let owner = e["owner"].as_str().unwrap_or_default();
        for entry in e["data"].as_array().into_iter().flatten() {
            let (Some(op), Some(out)) = (entry["operation_id"].as_str(), entry["outcome"].as_str()) else { continue };
            if !["succeeded", "failed_final", "unknown"].contains(&out) {
                continue;
            }
            judged += 1;
            let written = rows.iter().any(|r| {
                r.table_name == "tool_operations"
                    && r.op == "UPDATE"
                    && r.writer == owner
                    && r.new_str("operation_id") == Some(op)
                    && r.old_str("status") == Some("dispatching")
                    && r.new_str("status") == Some(out)
            });
            if !written {
                bad.push(format!("{owner} reported {op} {out}, but committed no dispatching -> {out} of it"));
            }
        }
    }
    Check::from_violations(name, bad, format!("{judged} reported dispatch outcome(s), each committed as reported"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::commit_rows::{commit_row, CommitRowBuilder};
    use serde_json::json;

    fn commit(seq: i64, writer: &str) -> CommitRow {
        commit_row(seq, "agent_runs", "UPDATE")
            .by(writer)
            .change(json!({"revision": seq - 1}), json!({"revision": seq}))
    }

    fn spawn(target: &str, owner: &str, scripted: bool) -> Value {
        let args = if scripted { json!(["--script"]) } else { json!([]) };
        json!({"actor": "harness", "action": "spawn", "target": target, "detail": {"owner": owner, "args": args}})
    }

    fn sent(target: &str, id: u64, cmd: &str) -> Value {
        json!({"actor": "harness", "action": "command", "target": target, "detail": {"cmd": cmd, "id": id}})
    }

    fn answer(target: &str, owner: &str, id: u64, cmd: &str, outcome: &str) -> (String, Value) {
        (target.into(), json!({"owner": owner, "id": id, "event": cmd, "outcome": outcome}))
    }

    #[test]
    fn an_ok_without_a_commit_is_caught() {
        let tl = vec![spawn("a", "w-a", false), sent("a", 1, "save"), sent("a", 2, "save")];
        let ev = vec![answer("a", "w-a", 1, "save", "ok"), answer("a", "w-a", 2, "save", "ok")];
        let t = tally(&tl, &ev);
        assert!(answers_agree_with_commits(&[commit(1, "w-a"), commit(2, "w-a")], &t, &[]).passed());
        let c = answers_agree_with_commits(&[commit(1, "w-a")], &t, &[]);
        assert!(!c.passed());
        assert!(c.evidence.contains("answered ok to 2 run write(s) but committed 1"), "{}", c.evidence);
    }

    #[test]
    fn a_commit_reported_as_refused_is_caught_and_unknown_is_allowed() {
        let tl = vec![spawn("a", "w-a", false), sent("a", 1, "save"), sent("a", 2, "save"), sent("a", 3, "renew")];
        let refused = vec![answer("a", "w-a", 1, "save", "ok"), answer("a", "w-a", 2, "save", "conflict")];
        let rows = [commit(1, "w-a"), commit(2, "w-a")];
        assert!(!answers_agree_with_commits(&rows, &tally(&tl, &refused), &[]).passed());
        let unknown = vec![answer("a", "w-a", 1, "save", "ok"), answer("a", "w-a", 2, "save", "outcome_unknown")];
        assert!(answers_agree_with_commits(&rows, &tally(&tl, &unknown), &[]).passed());
        // No answer at all (killed with the write in flight): it may have committed.
        let unanswered = vec![answer("a", "w-a", 1, "save", "ok")];
        assert!(answers_agree_with_commits(&rows, &tally(&tl, &unanswered), &[]).passed());
    }

    #[test]
    fn scripted_workers_are_judged_on_their_ok_answers_only() {
        let tl = vec![spawn("s", "w-s", true)];
        let ev = vec![answer("s", "w-s", 2, "start", "ok"), answer("s", "w-s", 3, "save", "ok")];
        let t = tally(&tl, &ev);
        assert!(t["w-s"].scripted);
        assert!(answers_agree_with_commits(&[commit(1, "w-s"), commit(2, "w-s"), commit(3, "w-s")], &t, &[]).passed());
        assert!(!answers_agree_with_commits(&[commit(1, "w-s")], &t, &[]).passed());
    }

    #[test]
    fn processes_sharing_an_owner_are_added_up_and_control_is_not_judged() {
        let tl =
            vec![spawn("a", "host-1", false), spawn("b", "host-1", false), sent("a", 1, "save"), sent("b", 1, "save")];
        let ev = vec![answer("a", "host-1", 1, "save", "lease_lost"), answer("b", "host-1", 1, "save", "ok")];
        let t = tally(&tl, &ev);
        assert_eq!(t["host-1"].ok, 1);
        assert!(answers_agree_with_commits(&[commit(1, "host-1")], &t, &[]).passed());
        assert!(!answers_agree_with_commits(&[commit(1, "host-1"), commit(2, "host-1")], &t, &[]).passed());
        assert!(answers_agree_with_commits(&[commit(1, "cp")], &BTreeMap::new(), &["cp"]).passed());
    }

    fn lease(seq: i64, writer: &str, old: Value, new: Value) -> CommitRow {
        CommitRow { table_name: "worker_leases".into(), old_row: Some(old), new_row: Some(new), ..commit(seq, writer) }
    }

    #[test]
    fn lease_answers_are_judged_against_takeovers_and_releases() {
        let tl = vec![spawn("a", "w-a", false), sent("a", 1, "acquire"), sent("a", 2, "release")];
        let ok = vec![answer("a", "w-a", 1, "acquire", "ok"), answer("a", "w-a", 2, "release", "ok")];
        let took = lease(1, "w-a", json!({"owner": null, "epoch": 0}), json!({"owner": "w-a", "epoch": 1}));
        let gone = lease(2, "w-a", json!({"owner": "w-a", "epoch": 1}), json!({"owner": null, "epoch": 1}));
        let (acq, rel) = (tally_of(&tl, &ok, &["acquire"]), tally_of(&tl, &ok, &["release"]));
        assert!(lease_answers_agree(&[took.clone(), gone.clone()], &acq, &rel, &[]).passed());
        // ok without the takeover; ok without the release.
        assert!(!lease_answers_agree(&[gone], &acq, &rel, &[]).passed());
        assert!(!lease_answers_agree(std::slice::from_ref(&took), &acq, &rel, &[]).passed());
        // A takeover answered busy.
        let busy = vec![answer("a", "w-a", 1, "acquire", "busy")];
        let c = lease_answers_agree(&[took], &tally_of(&tl, &busy, &["acquire"]), &BTreeMap::new(), &[]);
        assert!(!c.passed());
        assert!(c.evidence.contains("reported as refused"), "{}", c.evidence);
    }

    #[test]
    fn a_dispatch_outcome_without_its_ledger_write_is_caught() {
        let ev = vec![(
            "d".to_string(),
            json!({"owner": "w-d", "event": "dispatch", "outcome": "ok",
                   "data": [{"operation_id": "t/r/s/v1", "outcome": "succeeded"}, {"operation_id": "t/r/s/v2", "outcome": "write_rejected"}]}),
        )];
        let wrote = CommitRow {
            table_name: "tool_operations".into(),
            old_row: Some(json!({"operation_id": "t/r/s/v1", "status": "dispatching"})),
            new_row: Some(json!({"operation_id": "t/r/s/v1", "status": "succeeded"})),
            ..commit(1, "w-d")
        };
        assert!(dispatch_answers_agree(std::slice::from_ref(&wrote), &ev).passed());
        assert!(!dispatch_answers_agree(&[], &ev).passed());
        let other = CommitRow { writer: "w-x".into(), ..wrote };
        assert!(!dispatch_answers_agree(&[other], &ev).passed());
    }
}
