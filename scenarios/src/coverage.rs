//! What a PASS covered: the model transitions (state class × the kind of a committed action) the
//! rows' histories exercised, read from each row's `trace.json`, against the reachable observable
//! transitions of the bounded model (`model/transitions.txt`). Written to `coverage.md` in the run
//! folder, the unreached ones grouped by the action and the rules it bears on.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use fenceproof_harness::report::Matrix;
use serde::Serialize;

/// The coverage of one run.
#[derive(Debug, Clone, Serialize)]
pub struct Coverage {
    pub exercised: usize,
    pub reachable: usize,
    /// Transitions the rows showed that the bounded model does not reach (larger than its bound:
    /// a third operation, more processes); counted apart.
    pub beyond_bound: usize,
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
    from_dirs(run, &dirs)
}

/// The transitions every `trace.json` under `run` (a schedules run: one per case) exercised.
pub fn of_folder(run: &Path) -> Coverage {
    let mut dirs = Vec::new();
    let mut todo = vec![run.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p.clone());
                if p.join("trace.json").is_file() {
                    dirs.push(p);
                }
            }
        }
    }
    from_dirs(run, &dirs)
}

fn from_dirs(run: &Path, dirs: &[std::path::PathBuf]) -> Coverage {
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for d in dirs {
        let Ok(text) = std::fs::read_to_string(d.join("trace.json")) else { continue };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else { continue };
        seen.extend(v["transitions"].as_array().into_iter().flatten().filter_map(|t| t.as_str().map(str::to_string)));
    }
    let all = fenceproof_model::coverage::denominator();
    let exercised = all.iter().filter(|t| seen.contains(**t)).count();
    let beyond = seen.iter().filter(|t| !all.contains(t.as_str())).count();
    let _ = std::fs::write(run.join("coverage.md"), page(&all, &seen, exercised));
    Coverage { exercised, reachable: all.len(), beyond_bound: beyond }
}

/// The one line `verify` prints.
pub fn line(c: &Coverage) -> String {
    format!(
        "model coverage: {} of {} reachable transitions of the bounded model exercised ({:.0}%); unreached: coverage.md",
        c.exercised,
        c.reachable,
        100.0 * c.exercised as f64 / c.reachable.max(1) as f64
    )
}

fn page(all: &BTreeSet<&str>, seen: &BTreeSet<String>, exercised: usize) -> String {
    let mut by_kind: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for t in all.iter().filter(|t| !seen.contains(**t)) {
        let (class, kind) = t.rsplit_once(" | ").unwrap_or((t, ""));
        by_kind.entry(kind).or_default().push(class);
    }
    let mut s = format!(
        "# Model coverage\n\n{exercised} of {} reachable transitions of the bounded model (docs/model.md) were \
         exercised by this run's histories. The unreached ones, by action:\n",
        all.len()
    );
    for (kind, classes) in by_kind {
        let rules = RULES_OF_KIND.iter().find(|(k, _)| *k == kind).map(|(_, r)| *r).unwrap_or("");
        let _ = writeln!(s, "\n## {kind} ({} unreached; rules: {rules})\n", classes.len());
        for c in classes {
            let _ = writeln!(s, "- {c}");
        }
    }
    s
}
