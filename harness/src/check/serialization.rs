//! Serialization failures (spec §04, §07): SQLSTATE 40001 means the transaction did not commit;
//! the worker retries the whole short transaction from its start, under a budget, and a 40001 says
//! nothing about the lease. A worker that never retries, retries forever, or takes 40001 for a
//! lost lease passes every row where the server never answers 40001.
//!
//! Judged from evidence, for any worker: the server itself answers the worker's writes with 40001
//! (the oracle's trigger, [`crate::faults::serialization`]), which counts every attempt in a
//! sequence no rollback returns; the oracle says what the worker's writes committed; the worker's
//! answers and events are judged against both.

use super::Check;

/// One write the harness made the server answer with 40001 `failures` times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Episode {
    /// How many of the writer's attempts the server answered 40001, at most.
    pub failures: i64,
    /// How many attempts the writer made (the trigger's count: failed ones and the last one).
    pub attempts: i64,
    /// The worker's answer to the write.
    pub answer: String,
    /// The writer's run writes that committed during the episode (oracle).
    pub committed: usize,
}

impl Episode {
    fn describe(&self) -> String {
        format!(
            "server answered 40001 to the first {} attempt(s); the worker attempted {} time(s), answered `{}`, and {} write(s) committed",
            self.failures, self.attempts, self.answer, self.committed
        )
    }
}

/// A checker's name (the rule catalogue links rules to it).
pub const RETRIED_WHOLE: &str = "a write answered 40001 is retried from its start and commits exactly once";
/// A checker's name.
pub const WITHIN_BUDGET: &str = "retries of a write the server keeps answering 40001 stop within a budget";
/// A checker's name.
pub const NOT_LEASE_LOSS: &str =
    "a 40001 is not taken for a lost lease: no lease_lost, no cancellation, the next write commits";

/// After `once` (one 40001) the write must have been retried and committed exactly once with an
/// `ok` answer; after `several` (a few 40001s), either the same, or a refusal with nothing
/// committed and no attempt beyond the failures (a smaller budget is the worker's choice).
pub fn retried_whole(once: &Episode, several: &Episode) -> Check {
    let committed_once = |e: &Episode| e.answer == "ok" && e.committed == 1 && e.attempts == e.failures + 1;
    let gave_up_clean = |e: &Episode| e.answer != "ok" && e.committed == 0 && e.attempts <= e.failures;
    let mut bad = Vec::new();
    if !committed_once(once) {
        bad.push(format!("one failure: {}", once.describe()));
    }
    if !(committed_once(several) || gave_up_clean(several)) {
        bad.push(format!("several failures: {}", several.describe()));
    }
    Check::from_violations(
        RETRIED_WHOLE,
        bad,
        format!("one failure: {}; several failures: {}", once.describe(), several.describe()),
    )
}

/// Under endless 40001s the worker must stop before the failures run out, refuse the write, and
/// commit nothing.
pub fn within_budget(endless: &Episode) -> Check {
    Check::expect(
        WITHIN_BUDGET,
        endless.attempts < endless.failures && endless.answer != "ok" && endless.committed == 0,
        endless.describe(),
    )
}

/// No write the server answered 40001 was answered `lease_lost`, the worker never announced a
/// lost lease or a cancelled execution during the faults (`lease_events`: such events seen), and
/// its next write once the faults were healed was answered `ok` and committed (`next`).
pub fn not_lease_loss(episodes: &[&Episode], lease_events: &[String], next: (&str, usize)) -> Check {
    let mut bad: Vec<String> = episodes
        .iter()
        .filter(|e| e.answer == "lease_lost")
        .map(|e| format!("answered lease_lost: {}", e.describe()))
        .collect();
    bad.extend(lease_events.iter().map(|e| format!("the worker emitted {e} while only 40001 happened")));
    if next != ("ok", 1) {
        bad.push(format!("the next write after the faults answered `{}` with {} commit(s)", next.0, next.1));
    }
    Check::from_violations(NOT_LEASE_LOSS, bad, "the lease held through every 40001; the next write committed")
}

/// In a randomized schedule, where a save may be refused for other reasons (a stale revision, an
/// ended run, a lease that ran out meanwhile), each episode judges only what no other cause
/// explains: the server answered the worker's only attempt with 40001, the lease stayed the
/// worker's, and the worker refused the write without trying again (no retry at all; a retry of
/// the failing statement alone in the aborted transaction never reaches the write again either);
/// it outlasted endless failures (no budget); or it answered `lease_lost` while its lease was
/// unchanged and live (`lease_kept`).
pub fn in_schedule(episodes: &[(Episode, bool)]) -> Vec<Check> {
    if episodes.is_empty() {
        return Vec::new();
    }
    let mut no_retry = Vec::new();
    let mut no_budget = Vec::new();
    let mut as_lost = Vec::new();
    for (e, lease_kept) in episodes {
        let explained =
            matches!(e.answer.as_str(), "ok" | "conflict" | "invalid_state" | "outcome_unknown" | "no_answer_yet");
        if e.failures >= 1 && e.attempts == 1 && *lease_kept && !explained {
            no_retry.push(e.describe());
        }
        if e.failures >= crate::faults::serialization::ENDLESS && e.attempts >= e.failures {
            no_budget.push(e.describe());
        }
        if e.answer == "lease_lost" && *lease_kept {
            as_lost.push(format!("{} (the lease was unchanged and live)", e.describe()));
        }
    }
    let n = episodes.len();
    vec![
        Check::from_violations(RETRIED_WHOLE, no_retry, format!("{n} save(s) met 40001; each was tried again")),
        Check::from_violations(WITHIN_BUDGET, no_budget, format!("{n} save(s) met 40001; none outlasted the failures")),
        Check::from_violations(
            NOT_LEASE_LOSS,
            as_lost,
            format!("{n} save(s) met 40001; none was taken for a lost lease"),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(failures: i64, attempts: i64, answer: &str, committed: usize) -> Episode {
        Episode { failures, attempts, answer: answer.into(), committed }
    }

    #[test]
    fn a_worker_that_retries_whole_passes_and_one_that_never_retries_fails() {
        assert!(retried_whole(&ep(1, 2, "ok", 1), &ep(3, 4, "ok", 1)).passed());
        assert!(retried_whole(&ep(1, 2, "ok", 1), &ep(3, 2, "retry_budget_exhausted", 0)).passed());
        // No retry at all: the first 40001 is the answer.
        assert!(!retried_whole(&ep(1, 1, "db_error", 0), &ep(3, 1, "db_error", 0)).passed());
        // A retry that committed twice, or an ok with nothing committed.
        assert!(!retried_whole(&ep(1, 2, "ok", 2), &ep(3, 4, "ok", 1)).passed());
        assert!(!retried_whole(&ep(1, 2, "ok", 1), &ep(3, 4, "ok", 0)).passed());
    }

    #[test]
    fn endless_failures_need_a_budget() {
        assert!(within_budget(&ep(100, 5, "retry_budget_exhausted", 0)).passed());
        assert!(!within_budget(&ep(100, 401, "ok", 1)).passed());
        assert!(!within_budget(&ep(100, 400, "timeout", 0)).passed());
    }

    #[test]
    fn in_a_schedule_only_what_nothing_else_explains_fails() {
        // A conflict after a retry, a lease_lost once the lease moved on: not this rule's business.
        let fine = [
            (ep(1, 2, "conflict", 0), true),
            (ep(3, 1, "lease_lost", 0), false),
            (ep(100, 5, "x", 0), true),
            (ep(3, 1, "conflict", 0), true),
        ];
        assert!(in_schedule(&fine).iter().all(Check::passed));
        assert!(in_schedule(&[]).is_empty());
        let failed = |eps: &[(Episode, bool)]| -> Vec<String> {
            in_schedule(eps).into_iter().filter(|c| !c.passed()).map(|c| c.name).collect()
        };
        assert_eq!(failed(&[(ep(1, 1, "db_error", 0), true)]), vec![RETRIED_WHOLE.to_string()]);
        assert_eq!(failed(&[(ep(100, 401, "ok", 1), true)]), vec![WITHIN_BUDGET.to_string()]);
        assert_eq!(failed(&[(ep(3, 4, "lease_lost", 0), true)]), vec![NOT_LEASE_LOSS.to_string()]);
        assert_eq!(failed(&[(ep(1, 1, "db_error", 0), false)]), Vec::<String>::new());
    }

    #[test]
    fn a_40001_taken_for_a_lost_lease_fails() {
        let fine = ep(100, 5, "retry_budget_exhausted", 0);
        assert!(not_lease_loss(&[&fine], &[], ("ok", 1)).passed());
        let lost = ep(100, 1, "lease_lost", 0);
        assert!(!not_lease_loss(&[&lost], &[], ("ok", 1)).passed());
        assert!(!not_lease_loss(&[&fine], &["execution_cancelled".into()], ("ok", 1)).passed());
        assert!(!not_lease_loss(&[&fine], &[], ("lease_lost", 0)).passed());
    }
}
