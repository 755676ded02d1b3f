//! Checks of the harness's own client history against the oracle: what the harness *sent* (each
//! write carries a unique mark in its checkpoint and, where the harness chose one, the revision it
//! names) beside what *committed*. The worker's answers are judged here, never trusted: an answer
//! of `ok` must have a commit behind it, a refusal must have none.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::{Check, Found};
use crate::record::oracle::CommitRow;

/// A checker's name (the rule catalogue links rules to it).
pub const TERMINAL_TOLD: &str = "a worker ends a run only when it was told to";

/// A checker's name (the rule catalogue links rules to it).
pub const QUIET: &str = "nothing commits while only a stale process of an owner acts";

/// A checker's name (the rule catalogue links rules to it).
pub const ANSWERS_AGREE: &str = "a write answered ok committed, a write answered with a refusal did not";

/// A checker's name (the rule catalogue links rules to it).
pub const STORED_AS_SENT: &str = "a committed checkpoint is exactly what was sent";

/// A checker's name (the rule catalogue links rules to it).
pub const NAMED_REVISION: &str = "a write commits only at the revision it named, and at most once";

/// Answers that say "this write did not commit".
pub const REFUSALS: &[&str] = &["lease_lost", "conflict", "invalid_state", "not_found", "busy"];

/// One write the harness sent to a worker, and the answer it got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SentWrite {
    /// The worker's owner id.
    pub owner: String,
    /// The command (`save`, ...).
    pub cmd: String,
    /// The revision the command named, when the harness named one.
    pub expected_revision: Option<i64>,
    /// The checkpoint as sent; its `mark` field is unique in the history.
    pub checkpoint: Value,
    /// The answer's outcome; `None` when no answer came (the process was killed, or shut down
    /// with the command queued).
    pub outcome: Option<String>,
}

impl SentWrite {
    pub fn mark(&self) -> Option<&str> {
        self.checkpoint.get("mark").and_then(Value::as_str)
    }
}

/// The committed run updates that carry each mark.
fn committed_marks(rows: &[CommitRow]) -> BTreeMap<String, Vec<&CommitRow>> {
    let mut m: BTreeMap<String, Vec<&CommitRow>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.is_runs() && r.op == "UPDATE") {
        let new_mark = r.new_field("checkpoint").and_then(|c| c.get("mark")).and_then(Value::as_str);
        let old_mark = r.old_field("checkpoint").and_then(|c| c.get("mark")).and_then(Value::as_str);
        // A later write that keeps the checkpoint and moves the status (a start, a completion) is
        // not this write; one that keeps both is this write again (a save redone after its
        // acknowledgement was lost, say), and counts as a second commit of it.
        let same_status = r.old_str("status") == r.new_str("status");
        if let Some(mark) = new_mark.filter(|m| Some(*m) != old_mark || same_status) {
            m.entry(mark.to_string()).or_default().push(r);
        }
    }
    m
}

/// Compare-and-set: a write committed from exactly the revision it named, and at most once.
pub fn writes_commit_at_the_revision_named(rows: &[CommitRow], sent: &[SentWrite]) -> Check {
    let name = NAMED_REVISION;
    let committed = committed_marks(rows);
    let mut bad = Vec::new();
    let mut judged = 0;
    for s in sent {
        let Some(mark) = s.mark() else { continue };
        let commits = committed.get(mark).map(Vec::as_slice).unwrap_or_default();
        if commits.len() > 1 {
            let text = format!("{} {mark} of {} committed {} times", s.cmd, s.owner, commits.len());
            bad.push(Found::of(commits.iter().map(|c| c.seq), text));
        }
        if let (Some(want), Some(c)) = (s.expected_revision, commits.first()) {
            judged += 1;
            let from = c.old_field("revision").and_then(Value::as_i64);
            if from != Some(want) {
                let text = format!(
                    "{} {mark} of {} named revision {want} but committed over revision {} (commit #{})",
                    s.cmd,
                    s.owner,
                    from.map_or("?".into(), |f| f.to_string()),
                    c.seq
                );
                bad.push(Found::at(c.seq, text));
            }
        }
    }
    Check::from_found(name, bad, format!("{judged} committed writes, each over the revision it named"))
}

/// The worker's answers agree with the oracle: `ok` has its commit, a refusal has none.
/// (`outcome_unknown` and transport errors may go either way; that is what they say.)
pub fn answers_agree_with_commits(rows: &[CommitRow], sent: &[SentWrite]) -> Check {
    let name = ANSWERS_AGREE;
    let committed = committed_marks(rows);
    let mut bad = Vec::new();
    let mut judged = 0;
    for s in sent {
        let (Some(mark), Some(outcome)) = (s.mark(), s.outcome.as_deref()) else { continue };
        let did = committed.get(mark).map(Vec::as_slice).unwrap_or_default();
        if outcome == "ok" {
            judged += 1;
            if did.is_empty() {
                bad.push(Found::text(format!("{} {mark} of {} answered ok, nothing committed", s.cmd, s.owner)));
            }
        } else if REFUSALS.contains(&outcome) {
            judged += 1;
            if !did.is_empty() {
                let at = did.iter().map(|c| format!("#{}", c.seq)).collect::<Vec<_>>().join(", ");
                let text =
                    format!("{} {mark} of {} answered {outcome}, yet it committed (commit {at})", s.cmd, s.owner);
                bad.push(Found::of(did.iter().map(|c| c.seq), text));
            }
        }
    }
    Check::from_found(name, bad, format!("{judged} answers, each as the oracle saw it"))
}

/// A committed checkpoint is exactly the JSON that was sent (numbers, escapes, unicode, nesting).
pub fn checkpoints_stored_as_sent(rows: &[CommitRow], sent: &[SentWrite]) -> Check {
    let name = STORED_AS_SENT;
    let committed = committed_marks(rows);
    let mut bad = Vec::new();
    let mut judged = 0;
    for s in sent {
        let Some(mark) = s.mark() else { continue };
        for c in committed.get(mark).map(Vec::as_slice).unwrap_or_default() {
            judged += 1;
            let stored = c.new_field("checkpoint");
            if stored != Some(&s.checkpoint) {
                let text = format!(
                    "{mark}: sent {}, stored {} (commit #{})",
                    s.checkpoint,
                    stored.map_or("nothing".into(), |v| v.to_string()),
                    c.seq
                );
                bad.push(Found::at(c.seq, text));
            }
        }
    }
    Check::from_found(name, bad, format!("{judged} checkpoints stored byte for byte as JSON values"))
}

/// A stretch of the oracle (commits `after` < seq <= `until`) in which the only process of
/// `owner` that could act on run `run_id` was a stale one (its term over, or its renewal unanswered,
/// the current holder of the same owner id paused by the harness): nothing of that run may commit
/// under that owner in it. Commits of the same owner on other runs are not judged: a worker may
/// hold (and keep renewing) other leases meanwhile; `run_id` None judges every run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuietWindow {
    pub owner: String,
    #[serde(default)]
    pub run_id: Option<Uuid>,
    pub after: i64,
    pub until: i64,
    /// What the stale process did in the window.
    pub what: String,
    /// How many commits are tolerated in it (a statement already in flight when it went stale).
    #[serde(default)]
    pub allowed: usize,
}

/// Nothing commits under an owner while only a stale process of that owner acts (a renewal or a
/// write that matched on the owner id alone, without the epoch, would).
pub fn quiet_windows_stay_quiet(rows: &[CommitRow], windows: &[QuietWindow]) -> Check {
    let name = QUIET;
    let mut bad = Vec::new();
    for w in windows {
        let inside: Vec<&CommitRow> = rows
            .iter()
            .filter(|r| r.seq > w.after && r.seq <= w.until && r.writer == w.owner)
            .filter(|r| w.run_id.is_none() || r.run_id == w.run_id)
            .collect();
        if inside.len() > w.allowed {
            for r in inside {
                let text = format!(
                    "commit #{} on {} by {} ({}) while only its stale process acted ({}; {} tolerated)",
                    r.seq, r.table_name, r.writer, r.op, w.what, w.allowed
                );
                bad.push(Found::at(r.seq, text));
            }
        }
    }
    Check::from_found(name, bad, format!("{} window(s), nothing committed in them", windows.len()))
}

/// Every history check.
/// A worker ends a run only when told to: per owner, its commits that move the run to `succeeded`
/// (or `failed`) are no more than the `succeed` (`fail`) commands the harness sent it, and no fewer
/// than those it answered `ok`. A worker that writes a failure of its own (after an unknown
/// outcome, a lost lease, an error), or claims a completion that never committed, fails this.
pub fn terminal_writes_only_when_sent(rows: &[CommitRow], sent: &[SentWrite]) -> Check {
    let name = TERMINAL_TOLD;
    let mut told: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    let mut said_ok: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for s in sent {
        let status = match s.cmd.as_str() {
            "succeed" => "succeeded",
            "fail" => "failed",
            _ => continue,
        };
        *told.entry((s.owner.as_str(), status)).or_default() += 1;
        if s.outcome.as_deref() == Some("ok") {
            *said_ok.entry((s.owner.as_str(), status)).or_default() += 1;
        }
    }
    let owners: std::collections::BTreeSet<&str> = sent.iter().map(|s| s.owner.as_str()).collect();
    let mut wrote: BTreeMap<(&str, &str), Vec<i64>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.is_runs() && r.op == "UPDATE" && owners.contains(r.writer.as_str())) {
        let (Some(new), old) = (r.new_str("status"), r.old_str("status")) else { continue };
        if matches!(new, "succeeded" | "failed") && old != Some(new) {
            wrote.entry((r.writer.as_str(), new)).or_default().push(r.seq);
        }
    }
    let mut bad = Vec::new();
    for ((owner, status), seqs) in &wrote {
        let n = told.get(&(*owner, *status)).copied().unwrap_or(0);
        if seqs.len() > n {
            let commits = seqs.iter().map(|s| format!("#{s}")).collect::<Vec<_>>().join(", ");
            let text =
                format!("{owner} wrote {status} {} times (commits {commits}) but was told to {n} times", seqs.len());
            bad.push(Found::of(seqs.iter().copied(), text));
        }
    }
    for ((owner, status), n) in &said_ok {
        let did = wrote.get(&(*owner, *status)).map_or(0, Vec::len);
        if did < *n {
            bad.push(Found::text(format!(
                "{owner} answered ok to {n} command(s) to end the run {status}, but {did} such write(s) committed"
            )));
        }
    }
    let clean =
        format!("{} terminal writes by workers, each one asked for", wrote.values().map(Vec::len).sum::<usize>());
    Check::from_found(name, bad, clean)
}

pub fn all(rows: &[CommitRow], sent: &[SentWrite]) -> Vec<Check> {
    vec![
        writes_commit_at_the_revision_named(rows, sent),
        answers_agree_with_commits(rows, sent),
        checkpoints_stored_as_sent(rows, sent),
        terminal_writes_only_when_sent(rows, sent),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::commit_rows::{commit_row, CommitRowBuilder};
    use serde_json::json;

    fn update(seq: i64, from: i64, mark: &str, checkpoint: Value) -> CommitRow {
        let mut cp = checkpoint;
        cp["mark"] = json!(mark);
        commit_row(seq, "agent_runs", "UPDATE").by("worker-a").change(
            json!({"revision": from, "checkpoint": {"mark": "before"}}),
            json!({"revision": from + 1, "checkpoint": cp}),
        )
    }

    fn sent(mark: &str, rev: i64, outcome: &str) -> SentWrite {
        SentWrite {
            owner: "worker-a".into(),
            cmd: "save".into(),
            expected_revision: Some(rev),
            checkpoint: json!({"mark": mark, "x": 1.5}),
            outcome: Some(outcome.into()),
        }
    }

    fn terminal(seq: i64, status: &str) -> CommitRow {
        let mut r = update(seq, 4, "t", json!({}));
        r.old_row = Some(json!({"revision": 4, "status": "running"}));
        r.new_row = Some(json!({"revision": 5, "status": status}));
        r
    }

    fn lease_renewal(seq: i64, writer: &str, run: Uuid) -> CommitRow {
        let mut r = update(seq, 0, "-", json!({}));
        r.table_name = "worker_leases".into();
        r.writer = writer.into();
        r.run_id = Some(run);
        r
    }

    fn window(run_id: Option<Uuid>, allowed: usize) -> QuietWindow {
        QuietWindow { owner: "worker-a".into(), run_id, after: 10, until: 20, what: "stale".into(), allowed }
    }

    #[test]
    fn quiet_window_fails_a_commit_of_its_run_beyond_the_tolerated() {
        let run = Uuid::from_u128(7);
        let rows = [lease_renewal(11, "worker-a", run), lease_renewal(12, "worker-a", run)];
        let c = quiet_windows_stay_quiet(&rows, &[window(Some(run), 1)]);
        assert!(!c.passed(), "{c:?}");
        assert!(c.evidence.contains("#12"), "{c:?}");
        assert_eq!(c.commits, vec![11, 12], "the commits are cited as data");
        assert!(quiet_windows_stay_quiet(&rows[..1], &[window(Some(run), 1)]).passed());
    }

    #[test]
    fn quiet_window_judges_only_its_owner_its_run_and_its_stretch() {
        let run = Uuid::from_u128(7);
        let rows = [
            // Another run's lease, still held and renewed by the same owner.
            lease_renewal(12, "worker-a", Uuid::from_u128(8)),
            // Another owner on the same run (the current holder).
            lease_renewal(13, "worker-b", run),
            // The same owner and run, outside the window.
            lease_renewal(10, "worker-a", run),
            lease_renewal(21, "worker-a", run),
        ];
        assert!(quiet_windows_stay_quiet(&rows, &[window(Some(run), 0)]).passed());
        // Without a run named, every run of the owner is judged.
        assert!(!quiet_windows_stay_quiet(&rows, &[window(None, 0)]).passed());
    }

    fn told(cmd: &str) -> SentWrite {
        SentWrite { cmd: cmd.into(), expected_revision: None, checkpoint: Value::Null, ..sent("m", 0, "ok") }
    }

    #[test]
    fn a_failure_nobody_asked_for_fails() {
        let rows = vec![terminal(7, "failed")];
        let c = terminal_writes_only_when_sent(&rows, &[sent("m1", 3, "ok")]);
        assert!(!c.passed(), "{c:?}");
        assert!(c.evidence.contains("wrote failed 1 times"), "{}", c.evidence);
        assert!(terminal_writes_only_when_sent(&rows, &[told("fail")]).passed());
        // A success asked for does not excuse a failure.
        assert!(!terminal_writes_only_when_sent(&rows, &[told("succeed")]).passed());
        // An ok with no completion behind it fails.
        let mut claimed = told("succeed");
        claimed.outcome = Some("ok".into());
        assert!(!terminal_writes_only_when_sent(&[], &[claimed.clone()]).passed());
        assert!(terminal_writes_only_when_sent(&[terminal(3, "succeeded")], &[claimed]).passed());
        // Two completions for one command fail too.
        let twice = vec![terminal(7, "succeeded"), terminal(9, "succeeded")];
        assert!(!terminal_writes_only_when_sent(&twice, &[told("succeed")]).passed());
    }

    #[test]
    fn a_write_over_another_revision_fails() {
        let rows = vec![update(1, 3, "m1", json!({"x": 1.5}))];
        assert!(writes_commit_at_the_revision_named(&rows, &[sent("m1", 3, "ok")]).passed());
        let c = writes_commit_at_the_revision_named(&rows, &[sent("m1", 2, "ok")]);
        assert!(!c.passed());
        assert!(c.evidence.contains("named revision 2 but committed over revision 3"), "{}", c.evidence);
    }

    #[test]
    fn a_write_committed_twice_fails() {
        let rows = vec![update(1, 3, "m1", json!({"x": 1.5})), update(2, 4, "m1", json!({"x": 1.5}))];
        assert!(!writes_commit_at_the_revision_named(&rows, &[sent("m1", 3, "ok")]).passed());
    }

    #[test]
    fn a_save_redone_over_its_own_commit_fails() {
        // The first commit of m1 moved the checkpoint; the redo finds m1 already there and keeps it,
        // bumping only the revision: the same write, committed twice.
        let mut first = update(1, 3, "m1", json!({"x": 1.5}));
        first.old_row = Some(json!({"revision": 3, "status": "running", "checkpoint": {"mark": "before"}}));
        first.new_row = Some(json!({"revision": 4, "status": "running", "checkpoint": {"mark": "m1", "x": 1.5}}));
        let mut redo = first.clone();
        redo.seq = 2;
        redo.old_row = first.new_row.clone();
        redo.new_row = Some(json!({"revision": 5, "status": "running", "checkpoint": {"mark": "m1", "x": 1.5}}));
        let once = writes_commit_at_the_revision_named(&[first.clone()], &[sent("m1", 3, "outcome_unknown")]);
        assert!(once.passed(), "{once:?}");
        let c = writes_commit_at_the_revision_named(&[first.clone(), redo], &[sent("m1", 3, "outcome_unknown")]);
        assert!(!c.passed(), "{c:?}");
        assert!(c.evidence.contains("committed 2 times"), "{}", c.evidence);
        // A completion that keeps the checkpoint is not the save again.
        let mut done = first.clone();
        done.seq = 2;
        done.old_row = first.new_row.clone();
        done.new_row = Some(json!({"revision": 5, "status": "succeeded", "checkpoint": {"mark": "m1", "x": 1.5}}));
        assert!(writes_commit_at_the_revision_named(&[first, done], &[sent("m1", 3, "ok")]).passed());
    }

    #[test]
    fn answers_must_agree_with_the_oracle() {
        let rows = vec![update(1, 3, "m1", json!({"x": 1.5}))];
        assert!(answers_agree_with_commits(&rows, &[sent("m1", 3, "ok"), sent("m2", 3, "conflict")]).passed());
        assert!(!answers_agree_with_commits(&rows, &[sent("m1", 3, "conflict")]).passed());
        assert!(!answers_agree_with_commits(&rows, &[sent("m2", 3, "ok")]).passed());
        assert!(answers_agree_with_commits(&rows, &[sent("m1", 3, "outcome_unknown")]).passed());
    }

    #[test]
    fn a_changed_checkpoint_fails() {
        let rows = vec![update(1, 3, "m1", json!({"x": 1.5}))];
        assert!(checkpoints_stored_as_sent(&rows, &[sent("m1", 3, "ok")]).passed());
        let rows = vec![update(1, 3, "m1", json!({"x": 1}))];
        assert!(!checkpoints_stored_as_sent(&rows, &[sent("m1", 3, "ok")]).passed());
    }
}
