//! Checkers of a job queue under a stale worker (`fenceproof audit`), one per property, judged from
//! evidence the library does not control: the fake tools' ledger (each execution's START and END,
//! fsynced before the job body goes on), the commit triggers on the library's job table (which
//! process's change committed, and when) and the harness's own pauses and kills.
//!
//! The story every history tells: worker `stalled` took the job and was paused (or killed); the
//! library's stall recovery handed the job to worker `taker`; then the stalled worker came back (or
//! not). The checks say what the library let through.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::Check;

pub const STALE_WRITE: &str =
    "no change of the job's state by the stalled worker commits after the takeover (commit triggers)";
pub const CONCURRENT: &str =
    "no execution starts while another live (not paused, not killed) execution of the job runs (tools' ledger)";
pub const STALE_CHECKPOINT: &str =
    "no checkpoint/progress write by the stalled worker commits after the takeover (commit triggers on the library's checkpoint table)";
pub const CURRENT_OUTCOME: &str =
    "the current worker's own outcome commits and stands: nobody else's write replaces it (commit triggers)";

/// One execution of the job body, from the tools' ledger.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Execution {
    pub worker: String,
    pub start: DateTime<Utc>,
    pub end: Option<DateTime<Utc>>,
}

/// One committed change of the job's row.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobWrite {
    pub seq: i64,
    /// The worker whose process committed it, or the session's application_name for anyone else.
    pub writer: String,
    pub at: DateTime<Utc>,
    pub op: String,
    pub status_before: Option<String>,
    /// `None` when the row was deleted.
    pub status_after: Option<String>,
}

impl JobWrite {
    fn changes_state(&self) -> bool {
        self.op == "DELETE" || self.status_before != self.status_after
    }

    fn describe(&self) -> String {
        format!(
            "#{} {} by {} at {}: {} -> {}",
            self.seq,
            self.op,
            self.writer,
            self.at.format("%H:%M:%S%.3f"),
            self.status_before.as_deref().unwrap_or("-"),
            self.status_after.as_deref().unwrap_or("(deleted)")
        )
    }
}

/// A window in which the harness held a worker: paused (SIGSTOP or a frozen cgroup) until `to`, or
/// killed (`to` = `None`: it never came back).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hold {
    pub worker: String,
    pub from: DateTime<Utc>,
    pub to: Option<DateTime<Utc>>,
}

/// What success looks like in the library's job table.
#[derive(Debug, Clone, Copy, Serialize)]
pub enum Success {
    /// The row stays, with this status.
    Status(&'static str),
    /// The row is deleted (the outcome goes to a log table).
    Deleted,
}

/// Read back from a saved report (`merge`): the status's text is kept for the rest of the
/// process, which reads each report once.
impl<'de> Deserialize<'de> for Success {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        enum Saved {
            Status(String),
            Deleted,
        }
        Ok(match Saved::deserialize(d)? {
            Saved::Status(s) => Success::Status(Box::leak(s.into_boxed_str())),
            Saved::Deleted => Success::Deleted,
        })
    }
}

/// Everything one audit experiment observed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AuditHistory {
    pub stalled: String,
    pub taker: String,
    pub executions: Vec<Execution>,
    pub writes: Vec<JobWrite>,
    pub holds: Vec<Hold>,
    /// Status values that mean "a worker has claimed the job and runs it".
    pub claimed: Vec<String>,
    pub success: Success,
    /// How the taker's execution ends: "success" (its success must stand), "fail" or "retry" (its
    /// failure or retry request, the first change of the job it commits after its END, must stand).
    pub taker_outcome: String,
    /// The committed writes of the library's checkpoint/progress table, when the experiment
    /// watched one (a stale checkpoint is then judged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoints: Option<Vec<JobWrite>>,
}

impl AuditHistory {
    /// When the job passed to the taker: its first committed change of the job row.
    pub fn takeover_at(&self) -> Option<DateTime<Utc>> {
        self.writes.iter().filter(|w| w.writer == self.taker).map(|w| w.at).min()
    }

    /// How many times the job body ran (a START in the tools' ledger).
    pub fn executions_count(&self) -> usize {
        self.executions.len()
    }

    /// When the taker asked for a retry, when `worker` ran the retry after `t`: its first new START
    /// (the ledger's, not a claim: a claim may be followed by a stale write of the worker's old
    /// execution, as pgqueuer's buffered completion shows). Its later writes belong to that run.
    fn retried_by(&self, worker: &str, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if self.taker_outcome != "retry" {
            return None;
        }
        self.executions.iter().filter(|e| e.worker == worker && e.start > t).map(|e| e.start).min()
    }

    /// Whether `worker` was held at some moment from `from` to `to` (its execution then was
    /// superseded by the takeover: a stale one, whatever runs beside it later).
    fn held_during(&self, worker: &str, from: DateTime<Utc>, to: DateTime<Utc>) -> bool {
        self.holds.iter().any(|h| h.worker == worker && h.from <= to && h.to.map(|x| x > from).unwrap_or(true))
    }

    /// The taker's own outcome write: its success, or (when it failed or asked for a retry) the
    /// first change of the job it committed after its execution's END.
    fn taker_outcome_write(&self) -> Option<&JobWrite> {
        if self.taker_outcome == "success" {
            return self.writes.iter().rev().find(|w| {
                w.writer == self.taker
                    && match self.success {
                        Success::Status(s) => {
                            w.status_after.as_deref() == Some(s) && w.status_before.as_deref() != Some(s)
                        }
                        Success::Deleted => w.op == "DELETE",
                    }
            });
        }
        let end = self.executions.iter().filter(|e| e.worker == self.taker).find_map(|e| e.end)?;
        self.writes.iter().find(|w| w.writer == self.taker && w.at >= end && w.changes_state())
    }

    fn is_fresh_claim(&self, w: &JobWrite) -> bool {
        let claimed = |s: &Option<String>| s.as_ref().map(|s| self.claimed.contains(s)).unwrap_or(false);
        !claimed(&w.status_before) && claimed(&w.status_after)
    }
}

/// Every change the stalled worker committed after the takeover, except a fresh claim (a new
/// execution, judged by [`concurrent_executions`]). Writes that leave the status as it was (a
/// heartbeat) are named in the evidence but are not a failure of this property.
pub fn stale_write(h: &AuditHistory) -> Check {
    let Some(takeover) = h.takeover_at() else {
        return Check::fail(
            STALE_WRITE,
            format!("{} never committed a change of the job: no takeover to judge", h.taker),
        );
    };
    let own_run = h.retried_by(&h.stalled, takeover);
    let late: Vec<&JobWrite> = h
        .writes
        .iter()
        .filter(|w| w.writer == h.stalled && w.at > takeover && own_run.is_none_or(|r| w.at < r))
        .collect();
    let (state, touch): (Vec<&JobWrite>, Vec<&JobWrite>) =
        late.into_iter().filter(|w| !h.is_fresh_claim(w)).partition(|w| w.changes_state());
    let touches = if touch.is_empty() {
        String::new()
    } else {
        format!(
            "; status-preserving writes also accepted: {}",
            touch.iter().map(|w| w.describe()).collect::<Vec<_>>().join("; ")
        )
    };
    if state.is_empty() {
        Check::pass(
            STALE_WRITE,
            format!(
                "takeover by {} at {}; no state change by {} after it{touches}",
                h.taker,
                takeover.format("%H:%M:%S%.3f"),
                h.stalled
            ),
        )
    } else {
        Check::fail(
            STALE_WRITE,
            format!(
                "takeover by {} at {}; then accepted from {}: {}{touches}",
                h.taker,
                takeover.format("%H:%M:%S%.3f"),
                h.stalled,
                state.iter().map(|w| w.describe()).collect::<Vec<_>>().join("; ")
            ),
        )
        .citing(state.iter().chain(&touch).map(|w| w.seq))
    }
}

/// An execution that starts while another one runs whose worker the harness was not holding.
/// (The taker starting while the stalled worker is paused is the takeover itself, not a failure.)
pub fn concurrent_executions(h: &AuditHistory) -> Check {
    let mut bad = Vec::new();
    for (i, e) in h.executions.iter().enumerate() {
        for o in &h.executions[..i] {
            let running = o.start <= e.start && o.end.map(|end| end > e.start).unwrap_or(true);
            // An execution whose worker was held after it started was superseded by the takeover:
            // a stale one, judged by the stale-write check, not a live owner's.
            if running && !h.held_during(&o.worker, o.start, e.start) {
                bad.push(format!(
                    "{}'s execution started at {} while {}'s (started {}) ran unpaused",
                    e.worker,
                    e.start.format("%H:%M:%S%.3f"),
                    o.worker,
                    o.start.format("%H:%M:%S%.3f")
                ));
            }
        }
    }
    let seen = h
        .executions
        .iter()
        .map(|e| format!("{} {}", e.worker, e.start.format("%H:%M:%S%.3f")))
        .collect::<Vec<_>>()
        .join(", ");
    if bad.is_empty() {
        Check::pass(CONCURRENT, format!("{} execution(s): {seen}", h.executions.len()))
    } else {
        Check::fail(CONCURRENT, bad.join("; "))
    }
}

/// The taker's own outcome write (its success) committed, and no later write by anyone else
/// changed the job's state.
pub fn current_outcome(h: &AuditHistory) -> Check {
    let taker_end = h.executions.iter().filter(|e| e.worker == h.taker).find_map(|e| e.end);
    // A retry request may change nothing of the job's row (the reference releases its lease):
    // then what must stand is that nobody else changes the job's state after the taker's END.
    let (own, since_seq, since_at) = match (h.taker_outcome_write(), taker_end) {
        (Some(w), _) => (w.describe(), w.seq, w.at),
        (None, Some(end)) if h.taker_outcome == "retry" => (
            format!("{}'s retry request (no change of the job's row; END at {})", h.taker, end.format("%H:%M:%S%.3f")),
            0,
            end,
        ),
        (None, _) => {
            let last = h.writes.iter().rev().find(|w| w.changes_state());
            let said = last.map(|w| w.describe()).unwrap_or("none".into());
            return Check::fail(
                CURRENT_OUTCOME,
                format!("{}'s {} never committed; the job's last state change: {said}", h.taker, h.taker_outcome),
            )
            .citing(last.map(|w| w.seq));
        }
    };
    // After a retry request, a fresh claim is the retry running, and the claimer's later writes are
    // its new execution's.
    let new_run = |w: &JobWrite| h.is_fresh_claim(w) || h.retried_by(&w.writer, since_at).is_some_and(|r| r <= w.at);
    let after: Vec<&JobWrite> = h
        .writes
        .iter()
        .filter(|w| w.seq > since_seq && (since_seq > 0 || w.at > since_at) && w.writer != h.taker && w.changes_state())
        .filter(|w| h.taker_outcome != "retry" || !new_run(w))
        .collect();
    if after.is_empty() {
        Check::pass(CURRENT_OUTCOME, format!("{} stands", own))
    } else {
        let said: Vec<String> = after.iter().map(|w| w.describe()).collect();
        let cited = (since_seq > 0).then_some(since_seq).into_iter().chain(after.iter().map(|w| w.seq));
        Check::fail(CURRENT_OUTCOME, format!("{} replaced by {}", own, said.join("; "))).citing(cited)
    }
}

/// Every checkpoint/progress write the stalled worker committed after the takeover (§06: a stale
/// worker's progress must not replace the current one's).
pub fn stale_checkpoint(h: &AuditHistory, checkpoints: &[JobWrite]) -> Check {
    let Some(takeover) = h.takeover_at() else {
        return Check::fail(STALE_CHECKPOINT, format!("{} never committed a change of the job", h.taker));
    };
    let late_writes: Vec<&JobWrite> = checkpoints.iter().filter(|w| w.writer == h.stalled && w.at > takeover).collect();
    let late: Vec<String> = late_writes
        .iter()
        .map(|w| format!("#{} {} by {} at {}", w.seq, w.op, w.writer, w.at.format("%H:%M:%S%.3f")))
        .collect();
    let all = checkpoints.iter().map(|w| format!("{} by {}", w.op, w.writer)).collect::<Vec<_>>().join(", ");
    if late.is_empty() {
        Check::pass(
            STALE_CHECKPOINT,
            format!("takeover at {}; checkpoint writes: [{all}]", takeover.format("%H:%M:%S%.3f")),
        )
    } else {
        Check::fail(
            STALE_CHECKPOINT,
            format!(
                "takeover by {} at {}; then accepted from {}: {}",
                h.taker,
                takeover.format("%H:%M:%S%.3f"),
                h.stalled,
                late.join("; ")
            ),
        )
        .citing(late_writes.iter().map(|w| w.seq))
    }
}

/// All of them, in the report's order (the checkpoint check when the history watched one).
pub fn judge(h: &AuditHistory) -> Vec<Check> {
    let mut checks = vec![stale_write(h), concurrent_executions(h), current_outcome(h)];
    if let Some(c) = &h.checkpoints {
        checks.push(stale_checkpoint(h, c));
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: u32) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-12-01T12:00:00Z").unwrap().with_timezone(&Utc)
            + chrono::Duration::seconds(s.into())
    }

    fn w(seq: i64, writer: &str, at: u32, before: Option<&str>, after: Option<&str>) -> JobWrite {
        let op = if after.is_none() { "DELETE" } else { "UPDATE" };
        JobWrite {
            seq,
            writer: writer.into(),
            at: t(at),
            op: op.into(),
            status_before: before.map(Into::into),
            status_after: after.map(Into::into),
        }
    }

    fn ex(worker: &str, start: u32, end: Option<u32>) -> Execution {
        Execution { worker: worker.into(), start: t(start), end: end.map(t) }
    }

    /// A paused at 1..5; B takes over at 3 and succeeds at 8; A comes back at 5.
    fn fenced() -> AuditHistory {
        AuditHistory {
            stalled: "A".into(),
            taker: "B".into(),
            executions: vec![ex("A", 0, Some(6)), ex("B", 3, Some(8))],
            writes: vec![
                w(1, "A", 0, Some("todo"), Some("doing")),
                w(2, "recovery", 2, Some("doing"), Some("todo")),
                w(3, "B", 3, Some("todo"), Some("doing")),
                w(4, "B", 8, Some("doing"), Some("succeeded")),
            ],
            holds: vec![Hold { worker: "A".into(), from: t(1), to: Some(t(5)) }],
            claimed: vec!["doing".into()],
            success: Success::Status("succeeded"),
            taker_outcome: "success".into(),
            checkpoints: None,
        }
    }

    #[test]
    fn a_fenced_history_passes_every_check() {
        let h = fenced();
        assert!(judge(&h).iter().all(|c| c.passed()), "{:?}", judge(&h));
        assert_eq!(h.executions_count(), 2);
    }

    #[test]
    fn a_stale_completion_while_the_taker_runs_fails_and_loses_the_takers_outcome() {
        let mut h = fenced();
        h.writes.insert(3, w(5, "A", 6, Some("doing"), Some("succeeded")));
        h.writes.retain(|x| x.seq != 4); // the taker's own completion is then refused
        assert!(!stale_write(&h).passed());
        assert!(!current_outcome(&h).passed());
        assert!(concurrent_executions(&h).passed());
    }

    #[test]
    fn a_stale_write_after_the_takers_success_replaces_it() {
        let mut h = fenced();
        h.writes.push(w(5, "A", 9, Some("succeeded"), Some("failed")));
        assert!(!stale_write(&h).passed());
        let c = current_outcome(&h);
        assert!(!c.passed() && c.evidence.contains("replaced"), "{c:?}");
    }

    #[test]
    fn a_stale_retry_that_starts_a_third_execution_is_concurrent() {
        let mut h = fenced();
        h.writes.insert(3, w(5, "A", 6, Some("doing"), Some("todo")));
        h.writes.insert(4, w(6, "A", 6, Some("todo"), Some("doing")));
        h.executions.push(ex("A", 6, Some(7)));
        assert!(!stale_write(&h).passed(), "the retry itself is a stale state change");
        let c = concurrent_executions(&h);
        assert!(!c.passed() && c.evidence.contains("ran unpaused"), "{c:?}");
    }

    #[test]
    fn a_heartbeat_after_the_takeover_is_named_but_not_a_state_change() {
        let mut h = fenced();
        h.writes.insert(3, w(5, "A", 6, Some("doing"), Some("doing")));
        let c = stale_write(&h);
        assert!(c.passed() && c.evidence.contains("status-preserving"), "{c:?}");
    }

    #[test]
    fn a_deleted_row_is_the_success_of_a_deleting_library() {
        let mut h = fenced();
        h.success = Success::Deleted;
        h.writes.retain(|x| x.seq != 4);
        h.writes.push(w(4, "A", 6, Some("doing"), None));
        assert!(!current_outcome(&h).passed(), "the stalled worker deleted the row, not the taker");
        assert!(!stale_write(&h).passed());
        h.writes.retain(|x| x.seq != 4);
        h.writes.push(w(4, "B", 8, Some("doing"), None));
        assert!(current_outcome(&h).passed() && stale_write(&h).passed());
    }

    #[test]
    fn an_execution_beside_a_killed_worker_is_not_concurrent() {
        let mut h = fenced();
        h.executions[0].end = None;
        h.holds = vec![Hold { worker: "A".into(), from: t(1), to: None }];
        assert!(concurrent_executions(&h).passed());
        h.holds.clear();
        assert!(!concurrent_executions(&h).passed(), "nobody held A: B started beside a live execution");
    }

    #[test]
    fn a_stale_checkpoint_after_the_takeover_fails_and_one_before_it_passes() {
        let mut h = fenced();
        h.checkpoints = Some(vec![w(10, "A", 1, None, None), w(11, "B", 4, None, None)]);
        let c = judge(&h);
        assert_eq!(c.len(), 4);
        assert!(c.iter().all(|c| c.passed()), "{c:?}");
        h.checkpoints.as_mut().unwrap().push(w(12, "A", 6, None, None));
        let c = stale_checkpoint(&h, h.checkpoints.as_deref().unwrap());
        assert!(!c.passed() && c.evidence.contains("#12"), "{c:?}");
        assert_eq!(c.commits, vec![12], "the stale checkpoint is cited as data");
    }

    #[test]
    fn no_takeover_is_a_failure_named_as_such() {
        let mut h = fenced();
        h.writes.retain(|x| x.writer != "B");
        let c = stale_write(&h);
        assert!(!c.passed() && c.evidence.contains("no takeover"), "{c:?}");
    }

    /// B fails the job for good at 8 (its END at 7); A comes back at 9.
    fn taker_failed() -> AuditHistory {
        let mut h = fenced();
        h.taker_outcome = "fail".into();
        h.executions[1].end = Some(t(7));
        h.writes.retain(|x| x.seq != 4);
        h.writes.push(w(4, "B", 8, Some("doing"), Some("failed")));
        h.holds[0].to = Some(t(9));
        h
    }

    #[test]
    fn a_stale_success_over_the_takers_failure_loses_it_and_the_failure_alone_stands() {
        let mut h = taker_failed();
        assert!(judge(&h).iter().all(|c| c.passed()), "{:?}", judge(&h));
        h.writes.push(w(5, "A", 10, Some("failed"), Some("succeeded")));
        let c = current_outcome(&h);
        assert!(!c.passed() && c.evidence.contains("replaced by #5"), "{c:?}");
        assert!(!stale_write(&h).passed());
    }

    #[test]
    fn after_a_retry_request_a_new_start_opens_a_new_run_and_a_claim_alone_does_not() {
        let mut h = taker_failed();
        h.taker_outcome = "retry".into();
        h.writes.retain(|x| x.seq != 4);
        h.writes.push(w(4, "B", 8, Some("doing"), Some("todo")));
        h.writes.push(w(5, "A", 10, Some("todo"), Some("doing")));
        h.writes.push(w(6, "A", 11, Some("doing"), Some("succeeded")));
        assert!(!stale_write(&h).passed(), "a claim alone is no new run: the success may be the stale one's");
        h.executions.push(ex("A", 10, Some(11)));
        assert!(stale_write(&h).passed() && current_outcome(&h).passed(), "{:?}", judge(&h));
        h.executions.pop();
        h.writes.retain(|x| x.seq < 5);
        h.writes.push(w(5, "A", 10, Some("todo"), Some("succeeded")));
        assert!(!stale_write(&h).passed() && !current_outcome(&h).passed(), "{:?}", judge(&h));
    }

    #[test]
    fn a_retry_request_that_changes_no_row_stands_until_someone_else_changes_the_job() {
        let mut h = taker_failed();
        h.taker_outcome = "retry".into();
        h.writes.retain(|x| x.seq != 4);
        let c = current_outcome(&h);
        assert!(c.passed() && c.evidence.contains("retry request"), "{c:?}");
        h.writes.push(w(5, "A", 10, Some("doing"), Some("succeeded")));
        assert!(!current_outcome(&h).passed());
    }

    #[test]
    fn a_new_run_beside_a_resumed_stale_execution_is_not_concurrent_and_a_new_start_opens_a_new_run() {
        let mut h = taker_failed();
        h.taker_outcome = "retry".into();
        h.writes.retain(|x| x.seq != 4);
        // B's retry run starts at 9, as A (held 1..9, its execution since 0) comes back.
        h.executions.push(ex("B", 9, Some(9)));
        assert!(concurrent_executions(&h).passed(), "A's execution was superseded at the takeover");
        // A starts a new run at 10 (a claim that keeps the status) and succeeds at 11.
        h.executions.push(ex("A", 10, Some(11)));
        h.writes.push(w(5, "A", 11, Some("doing"), Some("succeeded")));
        assert!(stale_write(&h).passed() && current_outcome(&h).passed(), "{:?}", judge(&h));
    }
}
