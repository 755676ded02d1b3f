//! The invariants judge the runner applies to every row that declares it (`Checks::invariants`):
//! the global invariants and state machines (`check::invariants::all`) over the row's history,
//! after its story ended. An experiment never calls them itself; it says on its context what the
//! judge must know ([`InvariantScope`]: the writers it ran as the harness's control plane, the
//! commit its protocol steps start after, a check the story makes untrue by design), and the
//! runner judges. A row that declares the judge and is not judged is an ERROR naming it.

use fenceproof_harness::check::{invariants, Check};
use fenceproof_harness::record::oracle::CommitRow;

/// What an experiment tells the invariants judge about its row.
#[derive(Debug, Clone, Default)]
pub struct InvariantScope {
    /// Writers that are the harness's control plane: its own session (`ctx::CONTROL`, which the
    /// runner puts first), then a control-plane process the story started, a restorer.
    pub control: Vec<String>,
    /// Judge only the commits after this sequence number: the protocol's steps start there (a
    /// rollout's fenced phase, what follows a restore's recovery).
    pub after_seq: Option<i64>,
    /// Checks left out by name, each one the story makes untrue on purpose (P-api's probes
    /// register intents with token digests the fp_* functions cannot canonicalize).
    pub skip: Vec<&'static str>,
}

impl InvariantScope {
    /// A row's scope before its story: `control` (the harness's own session) the one
    /// control-plane writer.
    pub fn new(control: &str) -> InvariantScope {
        InvariantScope { control: vec![control.to_string()], ..InvariantScope::default() }
    }

    /// The invariants' checks over `history`, as this scope reads it.
    pub fn judge(&self, history: &[CommitRow]) -> Vec<Check> {
        let rows: Vec<CommitRow> = match self.after_seq {
            Some(seq) => history.iter().filter(|r| r.seq > seq).cloned().collect(),
            None => history.to_vec(),
        };
        let control: Vec<&str> = self.control.iter().map(String::as_str).collect();
        invariants::all(&rows, &control).into_iter().filter(|c| !self.skip.contains(&c.name.as_str())).collect()
    }
}

/// The names of the invariants' checks.
pub fn names() -> Vec<String> {
    invariants::all(&[], &[]).into_iter().map(|c| c.name).collect()
}

/// Whether `checks` hold the invariants judge's (all of them but those `scope` leaves out).
pub fn judged(checks: &[Check], scope: &InvariantScope) -> bool {
    names().iter().filter(|n| !scope.skip.contains(&n.as_str())).all(|n| checks.iter().any(|c| &c.name == n))
}

/// The runner's step for a row whose story ran to its end: the invariants judged over `history`
/// when the row declares them (`declared`: its `Checks::invariants`), unless the story already judged them (the Model-paths row, until it
/// says its scope on its context). `Err`: the ERROR that names the judge, when the row declares it
/// and it could not judge (its history was not read).
pub fn apply(
    declared: bool,
    scope: &InvariantScope,
    history: Result<&[CommitRow], String>,
    checks: &mut Vec<Check>,
) -> Result<(), String> {
    if !declared || judged(checks, scope) {
        return Ok(());
    }
    match history {
        Ok(rows) => {
            checks.extend(scope.judge(rows));
            Ok(())
        }
        Err(why) => Err(unjudged(&why)),
    }
}

/// A row that declares the invariants judge and ran to its end without it: the ERROR naming it.
pub fn unjudged_error(declared: bool, scope: &InvariantScope, checks: &[Check]) -> Option<String> {
    (declared && !judged(checks, scope)).then(|| unjudged("its checks do not hold the judge's"))
}

fn unjudged(why: &str) -> String {
    format!("declares the invariants judge (check::invariants) but was not judged by it: {why}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::Checks;

    /// Whether a row declared so declares the invariants judge.
    fn experiment(checks: Checks) -> bool {
        checks.invariants
    }

    #[test]
    fn a_row_that_declares_the_judge_is_judged_by_the_runner() {
        let mut checks = Vec::new();
        apply(experiment(Checks::ALL), &InvariantScope::default(), Ok(&[]), &mut checks).expect("judged");
        assert_eq!(checks.len(), names().len());
        assert!(unjudged_error(experiment(Checks::ALL), &InvariantScope::default(), &checks).is_none());
        // Judged once: a second pass (or a story that judged itself) adds nothing.
        apply(experiment(Checks::ALL), &InvariantScope::default(), Ok(&[]), &mut checks).expect("judged");
        assert_eq!(checks.len(), names().len());
    }

    #[test]
    fn a_row_that_declares_the_judge_and_is_not_judged_is_an_error_naming_it() {
        let mut checks = Vec::new();
        let e = apply(experiment(Checks::ALL), &InvariantScope::default(), Err("no oracle".into()), &mut checks)
            .expect_err("not judged");
        assert!(e.contains("invariants judge") && e.contains("no oracle"), "{e}");
        assert!(checks.is_empty());
        let e = unjudged_error(experiment(Checks::NO_ANSWERS), &InvariantScope::default(), &checks);
        assert!(e.is_some_and(|e| e.contains("invariants judge")));
    }

    #[test]
    fn a_row_that_does_not_declare_it_is_left_alone() {
        let mut checks = Vec::new();
        apply(experiment(Checks::MEASUREMENT), &InvariantScope::default(), Err("no oracle".into()), &mut checks)
            .expect("not declared");
        assert!(checks.is_empty());
        assert!(unjudged_error(experiment(Checks::MEASUREMENT), &InvariantScope::default(), &checks).is_none());
    }

    #[test]
    fn the_scope_says_where_the_steps_start_and_what_is_left_out() {
        let skip = fenceproof_harness::check::intents::DIGESTS_CANONICAL;
        let scope = InvariantScope { skip: vec![skip], ..InvariantScope::default() };
        let checks = scope.judge(&[]);
        assert_eq!(checks.len(), names().len() - 1);
        assert!(checks.iter().all(|c| c.name != skip));
        assert!(judged(&checks, &scope) && !judged(&checks, &InvariantScope::default()));
    }

    /// Files under src/ (recursively) with their text.
    fn sources(dir: &std::path::Path, out: &mut Vec<(String, String)>) {
        for e in std::fs::read_dir(dir).expect("src") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                sources(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push((p.display().to_string(), std::fs::read_to_string(&p).expect("read")));
            }
        }
    }

    /// No experiment judges the invariants itself: the runner does. The catalogue's test lists
    /// the checks' names; the model's paths (Model-paths-db, and Model-paths' lanes, which judge
    /// databases of their own) are left, until they say their scope on their context.
    #[test]
    fn no_experiment_calls_the_invariants_itself() {
        let mut files = Vec::new();
        sources(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
        assert!(files.len() > 30, "{} source files", files.len());
        let allowed = ["invariants_judge.rs", "catalogue.rs", "model_paths.rs", "worker_paths/lanes.rs"];
        for (path, text) in files.iter().filter(|(p, _)| !allowed.iter().any(|a| p.ends_with(a))) {
            assert!(
                !text.contains("invariants::all(") && !text.contains("judge_invariants()"),
                "{path} judges the invariants itself"
            );
        }
    }
}
