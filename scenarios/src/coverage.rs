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
    /// With the transitions a row that drives the database itself exercised (Model-paths-db: the
    /// model's paths played by fenceproof's reference driver, SQL the worker never sends), when
    /// it ran: what the database's fenced functions were tried in. `exercised` counts only the
    /// rows that run the worker under test, and `coverage.md` lists what they left unreached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub with_database_probe: Option<usize>,
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
    let drives_the_database =
        |id: &str| crate::all().iter().any(|e| e.id == id && e.needs(crate::experiment::Need::DatabaseProbe));
    let seen_by = |probe: bool| -> BTreeSet<String> {
        let rows = matrix.results.iter().filter(|r| probe || !drives_the_database(&r.id));
        rows.flat_map(|r| exercised(&run.join(&r.evidence))).collect()
    };
    let mut c = of_transitions(run, &seen_by(false));
    if matrix.results.iter().any(|r| drives_the_database(&r.id)) {
        c.with_database_probe = Some(count(&seen_by(true)).exercised);
    }
    let tried: Vec<(String, bool, String)> =
        matrix.results.iter().flat_map(|r| refusals(&run.join(&r.evidence))).collect();
    if let Ok(mut page) = std::fs::read_to_string(run.join("coverage.md")) {
        page.push_str(&refusals_section(&tried));
        let _ = std::fs::write(run.join("coverage.md"), page);
    }
    c
}

/// The commands a row tried where the model refuses their action (`paths.json` of Model-paths in
/// `dir`): each keyed by the transition it would be, and whether the worker refused it.
fn refusals(dir: &Path) -> Vec<(String, bool, String)> {
    let Ok(text) = std::fs::read_to_string(dir.join("paths.json")) else { return Vec::new() };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else { return Vec::new() };
    let paths = v.as_array().into_iter().flatten();
    let tried = paths.flat_map(|p| p["refusals"].as_array().cloned().unwrap_or_default());
    tried
        .filter_map(|r| {
            Some((r["transition"].as_str()?.to_string(), r["refused"].as_bool()?, r["word"].as_str()?.to_string()))
        })
        .collect()
}

/// What the model refuses that the contract has no command or fault point to try.
const INEXPRESSIBLE_REFUSALS: &[&str] = &[
    "a result write under a claim that moved while its dispatcher was held between its claim and its call \
     (the contract's dispatch claims and calls in one pass)",
    "an advance on an operation that did not succeed (the model has no advance; the W-commit row tries it by hand)",
    "a write after a restore by a worker that read the lost rows (a restore is the environment's)",
];

/// `coverage.md`'s section on the refused commands tried, per action and state class.
/// One action's refused commands: the state classes tried, how many were refused and answered
/// ok, and the words answered.
type Tried<'a> = (BTreeSet<&'a str>, usize, usize, BTreeSet<&'a str>);

fn refusals_section(tried: &[(String, bool, String)]) -> String {
    let mut by_action: BTreeMap<&str, Tried<'_>> = BTreeMap::new();
    for (key, refused, word) in tried {
        let action = key.rsplit("| ").next().unwrap_or(key);
        let e = by_action.entry(action).or_default();
        e.0.insert(key.as_str());
        e.3.insert(word.as_str());
        if *refused {
            e.1 += 1;
        } else {
            e.2 += 1;
        }
    }
    let mut s = format!(
        "\n## Refused commands tried\n\n{} commands were sent where the model refuses their action (steps of \
         Model-paths' paths, its probes after each grant, its stale holders' saves after each takeover and its races \
         of two takeovers), each judged by trace \
         validation like every commit, and each refusal's word against the contract's:\n\n| action | state classes | \
         refused | answered ok | words answered |\n|---|---|---|---|---|\n",
        tried.len()
    );
    for (action, (classes, refused, ok, words)) in &by_action {
        let words: Vec<&str> = words.iter().copied().collect();
        let _ = writeln!(s, "| {action} | {} | {refused} | {ok} | {} |", classes.len(), words.join(", "));
    }
    s.push_str("\nWhat the model refuses that the contract cannot ask a worker for:\n\n");
    for r in INEXPRESSIBLE_REFUSALS {
        let _ = writeln!(s, "- {r}");
    }
    s
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
    Coverage { exercised, reachable: all.len(), beyond_bound: beyond, with_database_probe: None }
}

/// The one line `verify` prints: what the worker under test was tried in, by its own commits.
pub fn line(c: &Coverage) -> String {
    let pct = |n: usize| 100.0 * n as f64 / c.reachable.max(1) as f64;
    let probe = match c.with_database_probe {
        Some(d) => format!(
            "; with {}'s reference driver on the database's fenced functions (not your worker), {d} ({:.0}%)",
            crate::model_paths::EXPERIMENT.id,
            pct(d)
        ),
        None => String::new(),
    };
    format!(
        "model coverage: {} of {} reachable transitions of the bounded model exercised by the worker's own commits ({:.0}%){probe}; unreached: coverage.md",
        c.exercised,
        c.reachable,
        pct(c.exercised)
    )
}

fn page(all: &BTreeSet<&str>, seen: &BTreeSet<String>, exercised: usize) -> String {
    let unreached: Vec<&str> = all.iter().copied().filter(|t| !seen.contains(*t)).collect();
    let mut s = format!(
        "# Model coverage\n\n{exercised} of {} reachable transitions of the bounded model (docs/model.md) were \
         exercised by the commits of the rows that run the worker under test (a row that drives the database \
         itself is not counted). The {} unreached ones, first those a known reason keeps out of \
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
        let alone = Coverage { exercised: 44, reachable: 336, beyond_bound: 0, with_database_probe: None };
        let row = crate::model_paths::EXPERIMENT.id;
        assert!(!line(&alone).contains(row), "{}", line(&alone));
        assert!(line(&alone).contains("44 of 336 reachable transitions"), "{}", line(&alone));
        let with_paths = Coverage { with_database_probe: Some(336), ..alone };
        let said = line(&with_paths);
        assert!(said.contains("44 of 336") && said.contains("by the worker's own commits (13%)"), "{said}");
        assert!(said.contains(&format!("{row}'s reference driver")) && said.contains("336 (100%)"), "{said}");
    }
}
