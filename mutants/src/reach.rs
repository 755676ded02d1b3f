//! Which rows reach which direct-path statement. The reference's run on the direct path (the
//! mutants build with `--report-statements`) leaves, in each worker's stderr log, one line per
//! statement the first time that worker runs it; a direct-path mutant then runs only through the
//! rows that reached its statement. A row that does not run a statement cannot tell its mutant from
//! the original, so leaving it out changes no fate; a row the reference did not PASS may have
//! stopped early, so nothing is known of it and it runs every mutant.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use fenceproof_harness::report::{ExperimentResult, Outcome};

/// The worker flag that asks for the lines.
pub const FLAG: &str = "--report-statements";

/// The start of each line (`fenceproof_protocol::sql::report_statements`).
const LINE: &str = "fenceproof-worker: direct statement ";

/// The statements each row reached on the reference, for the rows that PASSed.
#[derive(Debug, Default)]
pub struct Reach(BTreeMap<String, BTreeSet<String>>);

impl Reach {
    /// Read the rows of a finished run (`results`, whose evidence folders are under `run`).
    pub fn read(run: &Path, results: &[ExperimentResult]) -> Reach {
        let rows = results
            .iter()
            .filter(|r| r.outcome == Outcome::Pass)
            .filter_map(|r| statements_in(&run.join(&r.evidence)).map(|s| (r.id.clone(), s)))
            .collect();
        Reach(rows)
    }

    /// Whether row `id` may reach `statement`: it did on the reference, or nothing is known of it.
    pub fn may_reach(&self, id: &str, statement: &str) -> bool {
        self.0.get(id).is_none_or(|s| s.contains(statement))
    }

    /// How many rows are known.
    pub fn known(&self) -> usize {
        self.0.len()
    }

    /// How many known rows reached `statement`.
    pub fn reached_by(&self, statement: &str) -> usize {
        self.0.values().filter(|s| s.contains(statement)).count()
    }
}

/// The statements named in the worker logs of one row's folder; `None` if it cannot be read.
fn statements_in(dir: &Path) -> Option<BTreeSet<String>> {
    let mut found = BTreeSet::new();
    for entry in std::fs::read_dir(dir).ok()? {
        let path = entry.ok()?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if !(name.starts_with("worker-") && name.ends_with(".stderr.log")) {
            continue;
        }
        let text = std::fs::read_to_string(&path).ok()?;
        found.extend(text.lines().filter_map(|l| l.strip_prefix(LINE)).map(|s| s.trim().to_string()));
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(id: &str, outcome: Outcome) -> ExperimentResult {
        ExperimentResult {
            id: id.into(),
            title: String::new(),
            outcome,
            duration_ms: 0,
            observations: String::new(),
            checks: Vec::new(),
            error: None,
            reproduce: String::new(),
            evidence: id.into(),
        }
    }

    #[test]
    fn rows_reach_the_statements_their_workers_named_and_unknown_rows_reach_everything() {
        let run = std::env::temp_dir().join(format!("fp-reach-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&run);
        for (row, file, text) in [
            ("E", "worker-w.stderr.log", "{\"json\":1}\nfenceproof-worker: direct statement claim\n"),
            ("E", "worker-d.stderr.log", "fenceproof-worker: direct statement expired_claims\n"),
            ("E", "tools.stderr.log", "fenceproof-worker: direct statement converge\n"),
            ("A", "worker-a.stderr.log", "fenceproof-worker: direct statement lease_acquire\n"),
            ("B", "worker-b.stderr.log", "fenceproof-worker: direct statement expired_claims\n"),
        ] {
            std::fs::create_dir_all(run.join(row)).unwrap();
            std::fs::write(run.join(row).join(file), text).unwrap();
        }
        let results = [result("E", Outcome::Pass), result("A", Outcome::Pass), result("B", Outcome::Fail)];
        let reach = Reach::read(&run, &results);
        std::fs::remove_dir_all(&run).unwrap();
        assert!(reach.may_reach("E", "claim") && reach.may_reach("E", "expired_claims"));
        assert!(!reach.may_reach("E", "converge"), "only the workers' logs count");
        assert!(!reach.may_reach("A", "expired_claims"));
        assert!(reach.may_reach("B", "converge"), "a row that did not PASS is not known");
        assert!(reach.may_reach("Z", "claim"), "a row not run is not known");
        assert_eq!((reach.known(), reach.reached_by("expired_claims")), (2, 1));
    }
}
