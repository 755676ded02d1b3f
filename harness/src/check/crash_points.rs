//! Crashes between two durable steps of one command (spec §08, §09): a worker killed the moment
//! the Nth commit of a command was acknowledged must leave a state that a recovery (a new worker
//! process doing what recovery does: take the run over, dispatch, reconcile, advance) finishes. A
//! worker that writes something a later step needs (the secret values an intent references) after
//! the commit that makes the step reachable passes every row where no crash falls between the two.
//!
//! Judged from evidence, for any worker: the final ledger rows and run rows, the oracle's commits
//! (who advanced the run, after what) and the fake tools' ledger (what really reached the tool,
//! how often). Never from the killed worker, which never answered.

use super::Check;

/// One crash point of the sweep, and what the recovery after it left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrashCase {
    /// `plan`, `dispatch`...: the command the worker was running.
    pub command: String,
    /// The commit of that command after whose acknowledgement the worker was killed (from 1).
    pub commit: usize,
    /// The operation the case is about, when one was registered (final rows).
    pub operation_id: Option<String>,
    /// The secret values the planned request carried (the harness sent them).
    pub secrets: Vec<String>,
    /// The resources the tool created for the operation (tools' ledger), each as its entry's text.
    pub created: Vec<String>,
    /// The operation's final status (final rows).
    pub status: Option<String>,
    /// The run's owner committed a run write after the operation settled (oracle).
    pub advanced: bool,
}

impl CrashCase {
    fn point(&self) -> String {
        format!("{} killed after commit {}", self.command, self.commit)
    }
}

/// A checker's name (the rule catalogue links rules to it).
pub const REFERENCES_DURABLE: &str =
    "a crash right after an intent commits leaves what it references durable: its secret values reach the tool on recovery (tools' ledger)";
/// A checker's name.
pub const RECOVERY_FINISHES: &str =
    "after a crash between two durable steps, recovery finishes the step: the operation succeeds and the run advances on it (final rows, oracle)";
/// A checker's name.
pub const AT_MOST_ONCE: &str =
    "across a crash between two durable steps and its recovery the tool creates at most one resource per operation (tools' ledger)";

/// Every case whose intent committed with secret values: each value reached the tool in the
/// operation's created resource.
pub fn references_durable(cases: &[CrashCase]) -> Check {
    let mut bad = Vec::new();
    let mut judged = 0;
    for c in cases.iter().filter(|c| c.operation_id.is_some() && !c.secrets.is_empty()) {
        judged += 1;
        let missing = c.secrets.iter().filter(|v| !c.created.iter().any(|e| e.contains(v.as_str()))).count();
        if missing > 0 {
            bad.push(format!(
                "{}: {missing} of {} secret value(s) never reached the tool ({} created, status {})",
                c.point(),
                c.secrets.len(),
                c.created.len(),
                c.status.as_deref().unwrap_or("none")
            ));
        }
    }
    if judged == 0 {
        return Check::fail(REFERENCES_DURABLE, "no crash point left a committed intent with secrets to judge");
    }
    Check::from_violations(REFERENCES_DURABLE, bad, format!("{judged} crash point(s) with a committed intent"))
}

/// Every case: the operation exists, succeeded, and the run advanced on it.
pub fn recovery_finishes(cases: &[CrashCase]) -> Check {
    let bad: Vec<String> = cases
        .iter()
        .filter(|c| c.status.as_deref() != Some("succeeded") || !c.advanced)
        .map(|c| {
            format!(
                "{}: operation {} status {}, run {}",
                c.point(),
                c.operation_id.as_deref().unwrap_or("(none registered)"),
                c.status.as_deref().unwrap_or("none"),
                if c.advanced { "advanced" } else { "not advanced" }
            )
        })
        .collect();
    let all: Vec<String> = cases.iter().map(CrashCase::point).collect();
    Check::from_violations(RECOVERY_FINISHES, bad, format!("recovered: {}", all.join("; ")))
}

/// Every case: at most one resource for the operation.
pub fn at_most_once(cases: &[CrashCase]) -> Check {
    let bad: Vec<String> = cases
        .iter()
        .filter(|c| c.created.len() > 1)
        .map(|c| format!("{}: {} resources for one operation", c.point(), c.created.len()))
        .collect();
    Check::from_violations(AT_MOST_ONCE, bad, format!("{} crash point(s), at most one resource each", cases.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Verdict;

    fn case(command: &str, commit: usize) -> CrashCase {
        CrashCase {
            command: command.into(),
            commit,
            operation_id: Some("t/r/s/v1".into()),
            secrets: vec!["sk_1".into()],
            created: vec![r#"{"kind":"created","request":{"auth":"sk_1"}}"#.into()],
            status: Some("succeeded".into()),
            advanced: true,
        }
    }

    #[test]
    fn a_recovered_sweep_passes_every_check() {
        let cases = vec![case("plan", 1), case("dispatch", 1), case("dispatch", 2)];
        for c in [references_durable(&cases), recovery_finishes(&cases), at_most_once(&cases)] {
            assert_eq!(c.verdict, Verdict::Pass, "{c:?}");
        }
    }

    #[test]
    fn a_secret_written_after_the_intent_fails_the_reference_check() {
        // The intent committed, the worker died before the store got the value: the dispatcher
        // could not send it (nothing created), and the operation settled as failed.
        let mut c = case("plan", 1);
        c.created.clear();
        c.status = Some("failed_final".into());
        c.advanced = false;
        let r = references_durable(&[c.clone()]);
        assert_eq!(r.verdict, Verdict::Fail);
        assert!(r.evidence.contains("plan killed after commit 1"), "{}", r.evidence);
        assert_eq!(recovery_finishes(&[c]).verdict, Verdict::Fail);
        // A value the tool got under another operation's entry does not count.
        let mut other = case("plan", 1);
        other.created = vec![r#"{"request":{"auth":"sk_other"}}"#.into()];
        assert_eq!(references_durable(&[other]).verdict, Verdict::Fail);
        // Nothing to judge is a failure too: the sweep never made the moment.
        assert_eq!(references_durable(&[]).verdict, Verdict::Fail);
    }

    #[test]
    fn a_second_resource_or_a_run_left_behind_fails() {
        let mut twice = case("dispatch", 1);
        twice.created.push(twice.created[0].clone());
        assert_eq!(at_most_once(&[twice]).verdict, Verdict::Fail);
        let mut stuck = case("dispatch", 2);
        stuck.advanced = false;
        assert_eq!(recovery_finishes(&[stuck]).verdict, Verdict::Fail);
        let mut unknown = case("dispatch", 1);
        unknown.status = Some("unknown".into());
        assert_eq!(recovery_finishes(&[unknown]).verdict, Verdict::Fail);
    }
}
