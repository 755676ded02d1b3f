//! Who claimed a job the stale worker's retry request put back in the queue while the current
//! worker still ran it. With both workers' polls free to take it, which comes first is the
//! library's race (pgqueuer's two dequeue loops), not the harness's: A's claim runs the job again
//! beside B (a concurrent execution), B's does not. The cell's note names which happened and the
//! other outcome, so a verdict that differs between runs says why. When B asked for the retry and A
//! comes back late, B's retried job runs again at once (its gate is open) until the library stops
//! retrying it, and A's stale success meets whichever state that reached: the note names it.

use chrono::{DateTime, Utc};

use fenceproof_harness::check::audit::{AuditHistory, JobWrite};

fn claimed(h: &AuditHistory, status: &Option<String>) -> bool {
    status.as_ref().is_some_and(|s| h.claimed.contains(s))
}

fn describe(w: &JobWrite) -> String {
    format!(
        "#{} {} -> {}",
        w.seq,
        w.status_before.as_deref().unwrap_or("-"),
        w.status_after.as_deref().unwrap_or("(deleted)")
    )
}

/// The note on the stalled worker's retry request that put the job back in the queue after the
/// takeover (a claimed status to an unclaimed one, the row kept), and on the next claim of it.
pub fn note(h: &AuditHistory) -> Option<String> {
    let takeover = h.takeover_at()?;
    let requeued = h.writes.iter().find(|w| {
        w.writer == h.stalled
            && w.at > takeover
            && claimed(h, &w.status_before)
            && w.status_after.is_some()
            && !claimed(h, &w.status_after)
    })?;
    let next =
        h.writes.iter().find(|w| w.seq > requeued.seq && !claimed(h, &w.status_before) && claimed(h, &w.status_after));
    let put = format!(
        "{}'s stale retry put the job back in the queue ({}) while {} ran it",
        h.stalled,
        describe(requeued),
        h.taker
    );
    let race = "which free worker's poll claims a re-queued job first is the library's race";
    Some(match next {
        Some(w) if w.writer == h.stalled => format!(
            "{put}; {} claimed it first ({}) and ran it again beside {}; {race}, and a claim by {} would start no second execution",
            h.stalled,
            describe(w),
            h.taker,
            h.taker
        ),
        Some(w) => format!(
            "{put}; {} claimed it first ({}); {race}, and a claim by {} would run it again beside {}",
            w.writer,
            describe(w),
            h.stalled,
            h.taker
        ),
        None => format!("{put}; nobody claimed it again"),
    })
}

/// The job's state when the stalled worker came back at `resumed` after the taker's retry request:
/// the last change of its state committed before then.
pub fn at_return(h: &AuditHistory, resumed: DateTime<Utc>) -> Option<String> {
    let last = h.writes.iter().rfind(|w| w.at <= resumed && (w.op == "DELETE" || w.status_before != w.status_after))?;
    Some(format!(
        "when {} came back ({}) the job was `{}` ({} by {}): {}'s retried job runs again at once until the library stops retrying it, and which of those states {}'s stale success meets decides this cell, a timing the harness does not fix",
        h.stalled,
        resumed.format("%H:%M:%S%.3f"),
        last.status_after.as_deref().unwrap_or("(deleted)"),
        describe(last),
        last.writer,
        h.taker,
        h.stalled
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fenceproof_harness::check::audit::Success;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).expect("a time")
    }

    fn w(seq: i64, writer: &str, before: &str, after: &str) -> JobWrite {
        JobWrite {
            seq,
            writer: writer.into(),
            at: at(seq),
            op: "UPDATE".into(),
            status_before: Some(before.into()),
            status_after: Some(after.into()),
        }
    }

    fn history(writes: Vec<JobWrite>) -> AuditHistory {
        AuditHistory {
            stalled: "A".into(),
            taker: "B".into(),
            executions: Vec::new(),
            writes,
            holds: Vec::new(),
            claimed: vec!["picked".into()],
            success: Success::Deleted,
            taker_outcome: "success".into(),
            checkpoints: None,
        }
    }

    #[test]
    fn the_first_claim_after_a_stale_requeue_is_named_with_the_other_outcome() {
        let base = vec![w(1, "A", "queued", "picked"), w(2, "B", "picked", "picked"), w(3, "A", "picked", "queued")];
        let mut by_a = base.clone();
        by_a.push(w(4, "A", "queued", "picked"));
        let note = note(&history(by_a)).expect("a requeue");
        assert!(note.contains("A claimed it first (#4 queued -> picked) and ran it again beside B"), "{note}");
        let mut by_b = base.clone();
        by_b.push(w(4, "B", "queued", "picked"));
        let note = super::note(&history(by_b)).expect("a requeue");
        assert!(note.contains("B claimed it first") && note.contains("a claim by A would run it again"), "{note}");
        assert!(super::note(&history(base)).expect("a requeue").ends_with("nobody claimed it again"));
    }

    #[test]
    fn the_state_a_late_worker_meets_is_the_last_change_before_it_came_back() {
        let chain = vec![w(1, "A", "queued", "picked"), w(2, "B", "picked", "queued"), w(3, "B", "queued", "failed")];
        let mid = at_return(&history(chain.clone()), at(2)).expect("a state");
        assert!(mid.contains("the job was `queued` (#2 picked -> queued by B)"), "{mid}");
        let end = at_return(&history(chain), at(5)).expect("a state");
        assert!(end.contains("the job was `failed`"), "{end}");
    }

    #[test]
    fn no_note_without_a_stale_requeue() {
        let done = vec![w(1, "A", "queued", "picked"), w(2, "B", "picked", "picked"), w(3, "B", "picked", "done")];
        assert!(note(&history(done)).is_none());
        let before = vec![w(1, "A", "queued", "picked"), w(2, "A", "picked", "queued"), w(3, "B", "queued", "picked")];
        assert!(note(&history(before)).is_none(), "A's retry before the takeover is not stale");
    }
}
