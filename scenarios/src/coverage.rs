//! What a PASS covered: the model transitions (state class × the kind of a committed action) the
//! rows' histories exercised, read from each row's `trace.json`, against the reachable observable
//! transitions of the bounded model (`model/transitions.txt`). Written to `coverage.md` in the run
//! folder, the unreached ones grouped by the action and the rules it bears on. A schedules run
//! counts its cases' transitions the same way ([`of_transitions`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use fenceproof_harness::report::Matrix;
use serde::{Deserialize, Serialize};

/// The coverage of one run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coverage {
    pub exercised: usize,
    pub reachable: usize,
    /// Transitions the rows showed that the bounded model does not reach (larger than its bound:
    /// a third operation, more processes); counted apart.
    pub beyond_bound: usize,
    /// Of `exercised`, those the rows that run the worker under test exercised, when a row that
    /// drives the database itself (Model-paths, the model's paths played by the reference worker) ran
    /// beside them: its transitions say what the database was tried in, not the worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_worker_rows: Option<usize>,
}

/// The rules each action kind bears on.
const RULES_OF_KIND: &[(&str, &str)] = &[
    ("acquire", "lease.acquire-free-or-expired, lease.epoch-plus-one, lease.takeover-waits-for-validated-commit"),
    ("renew", "lease.renew-owner-epoch, lease.renew-unexpired"),
    ("release", "lease.release-owner-epoch, lease.release-keeps-epoch"),
    ("commit", "commit.lease-owner-epoch-live, commit.revision-cas, runs.transition-from-state, runs.terminal-final"),
    ("claim", "claim.prepared-of-live-runs, claim.no-transaction-across-call"),
    ("write-result", "result.claim-owner-revision-digest, result.settled-statuses-only"),
    ("give-up-unknown", "unknown.own-claim-only, unknown.never-failure"),
    ("mark-unknown", "unknown.expired-claim-as-seen"),
    ("reconcile", "converge.unknown-at-revision, unknown.never-failure"),
    ("cancel", "cancel.prepared-to-cancelled, cancel.in-flight-kept"),
];

/// The transitions the rows of `matrix` (in `run`) exercised, against the model's.
pub fn of(run: &Path, matrix: &Matrix) -> Coverage {
    let dirs: Vec<std::path::PathBuf> = matrix.results.iter().map(|r| run.join(&r.evidence)).collect();
    let mut c = from_dirs(run, &dirs);
    let drives_the_database =
        |id: &str| crate::all().iter().any(|e| e.id == id && e.needs(crate::experiment::Need::ModelPaths));
    if matrix.results.iter().any(|r| drives_the_database(&r.id)) {
        let worker_rows = matrix.results.iter().filter(|r| !drives_the_database(&r.id));
        let seen: BTreeSet<String> = worker_rows.flat_map(|r| exercised(&run.join(&r.evidence))).collect();
        c.by_worker_rows = Some(count(&seen).exercised);
    }
    c
}

fn from_dirs(run: &Path, dirs: &[std::path::PathBuf]) -> Coverage {
    let seen: BTreeSet<String> = dirs.iter().flat_map(|d| exercised(d)).collect();
    of_transitions(run, &seen)
}

/// The transitions one row's or schedule case's history exercised (its `trace.json` in `dir`, and
/// a second database's `trace-<name>.json` beside it); none when trace validation did not run
/// there.
pub fn exercised(dir: &Path) -> BTreeSet<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return BTreeSet::new() };
    let saved = |n: &str| n == crate::trace_check::SAVED || (n.starts_with("trace-") && n.ends_with(".json"));
    let files = entries.filter_map(Result::ok).filter(|e| saved(&e.file_name().to_string_lossy())).map(|e| e.path());
    let mut seen = BTreeSet::new();
    for f in files {
        let Ok(text) = std::fs::read_to_string(f) else { continue };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else { continue };
        let found = v["transitions"].as_array().into_iter().flatten().filter_map(|t| t.as_str().map(str::to_string));
        seen.extend(found);
    }
    seen
}

/// The coverage of the transitions `seen` (a run's histories together), against the model's;
/// the unreached ones written to `coverage.md` in `run`.
pub fn of_transitions(run: &Path, seen: &BTreeSet<String>) -> Coverage {
    let all = fenceproof_model::coverage::denominator();
    let c = count(seen);
    let _ = std::fs::write(run.join("coverage.md"), page(&all, seen, c.exercised));
    c
}

/// The model's reachable observable transitions that no known reason keeps out of every run
/// ([`crate::unreached`]): what steering aims at.
pub fn targets() -> Vec<String> {
    let all = fenceproof_model::coverage::denominator();
    all.into_iter().filter(|t| crate::unreached::reason_of(t).is_none()).map(String::from).collect()
}

/// The coverage of the transitions `seen`, against the model's (nothing written).
pub fn count(seen: &BTreeSet<String>) -> Coverage {
    let all = fenceproof_model::coverage::denominator();
    let exercised = all.iter().filter(|t| seen.contains(**t)).count();
    let beyond = seen.iter().filter(|t| !all.contains(t.as_str())).count();
    Coverage { exercised, reachable: all.len(), beyond_bound: beyond, by_worker_rows: None }
}

/// The one line `verify` prints.
pub fn line(c: &Coverage) -> String {
    let pct = |n: usize| 100.0 * n as f64 / c.reachable.max(1) as f64;
    let workers = match c.by_worker_rows {
        Some(w) => format!(
            ": {w} ({:.0}%) by the rows that run the worker, the other {} only by the reference driver of {} on the database",
            pct(w),
            c.exercised.saturating_sub(w),
            crate::model_paths::EXPERIMENT.id
        ),
        None => String::new(),
    };
    format!(
        "model coverage: {} of {} reachable transitions of the bounded model exercised ({:.0}%){workers}; unreached: coverage.md",
        c.exercised,
        c.reachable,
        pct(c.exercised)
    )
}

fn page(all: &BTreeSet<&str>, seen: &BTreeSet<String>, exercised: usize) -> String {
    let unreached: Vec<&str> = all.iter().copied().filter(|t| !seen.contains(*t)).collect();
    let mut s = format!(
        "# Model coverage\n\n{exercised} of {} reachable transitions of the bounded model (docs/model.md) were \
         exercised by this run's histories. The {} unreached ones, first those a known reason keeps out of \
         every run (docs/model.md, \"Why the rest is unreached\"), then the others by action:\n",
        all.len(),
        unreached.len()
    );
    for r in crate::unreached::REASONS {
        let mine: Vec<&str> = unreached
            .iter()
            .copied()
            .filter(|t| crate::unreached::reason_of(t).is_some_and(|x| x.id == r.id))
            .collect();
        if mine.is_empty() {
            continue;
        }
        let _ =
            writeln!(s, "\n## {} ({} unreached; {})\n\n{}: {}.\n", r.id, mine.len(), r.grounds.label(), r.which, r.why);
        for t in mine {
            let _ = writeln!(s, "- {t}");
        }
    }
    let mut by_kind: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for t in unreached.iter().filter(|t| crate::unreached::reason_of(t).is_none()) {
        let (class, kind) = t.rsplit_once(" | ").unwrap_or((t, ""));
        by_kind.entry(kind).or_default().push(class);
    }
    for (kind, classes) in by_kind {
        let rules = RULES_OF_KIND.iter().find(|(k, _)| *k == kind).map(|(_, r)| *r).unwrap_or("");
        let _ = writeln!(s, "\n## {kind} ({} unreached, no reason known; rules: {rules})\n", classes.len());
        for c in classes {
            let _ = writeln!(s, "- {c}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_keeps_what_the_worker_was_tried_in_apart_from_the_database() {
        let alone = Coverage { exercised: 44, reachable: 336, beyond_bound: 0, by_worker_rows: None };
        let row = crate::model_paths::EXPERIMENT.id;
        assert!(!line(&alone).contains(row), "{}", line(&alone));
        let with_paths = Coverage { exercised: 280, by_worker_rows: Some(44), ..alone };
        let said = line(&with_paths);
        assert!(said.contains("280 of 336") && said.contains("44 (13%) by the rows that run the worker"), "{said}");
        assert!(said.contains(&format!("the other 236 only by the reference driver of {row}")), "{said}");
    }
}
