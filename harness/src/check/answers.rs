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
    // (target, owner, id) -> answer outcome
    let mut answers: BTreeMap<(String, String, u64), String> = BTreeMap::new();
    for (target, e) in events {
        if let (Some(owner), Some(id), Some(ev), Some(out)) =
            (e["owner"].as_str(), e["id"].as_u64(), e["event"].as_str(), e["outcome"].as_str())
        {
            if RUN_WRITES.contains(&ev) {
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
                if !RUN_WRITES.contains(&cmd) {
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
    let name = "every write answered ok committed, and every write that committed was answered ok or unknown";
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
    if bad.is_empty() {
        Check::pass(name, format!("{judged} owner(s): answers and commits agree"))
    } else {
        Check::fail(name, bad.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn commit(seq: i64, writer: &str) -> CommitRow {
        CommitRow {
            seq,
            xid: seq.to_string(),
            table_name: "agent_runs".into(),
            op: "UPDATE".into(),
            writer: writer.into(),
            login: "fenceproof_worker_login".into(),
            backend_pid: 1,
            committed_at: chrono::Utc::now(),
            run_id: Some(uuid::Uuid::nil()),
            old_row: Some(json!({"revision": seq - 1})),
            new_row: Some(json!({"revision": seq})),
            lease_at_commit: None,
            lease_live_at_commit: None,
        }
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
}
