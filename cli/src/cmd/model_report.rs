//! What `model check` and `model merge` print: each bound's exploration as a report (text or
//! JSON), shared by both so neither depends on the other.

use fenceproof_harness::report::exit;
use fenceproof_model::check::Outcome;
use serde::{Deserialize, Serialize};

/// How the result is printed.
#[derive(Clone, Copy)]
pub struct Print {
    pub json: bool,
    pub quiet: bool,
}

/// The order `model merge` puts bounds in: `--bound all`'s.
pub const BOUND_ORDER: &[&str] = &["database", "processes"];

/// One bound's exploration, as `--json` and model-check.json list it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Bound {
    pub bound: String,
    pub describes: String,
    pub outcome: Outcome,
}

/// What `model check --json` prints (and `--out` writes): each bound, the situations no bound
/// reached, the states of all bounds summed, the shards and the flags that shaped the bounds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub bounds: Vec<Bound>,
    pub unreached: Vec<String>,
    pub states: usize,
    pub unique_states: usize,
    pub shards: Vec<String>,
    pub flags: String,
}

impl Report {
    pub fn of(bounds: Vec<Bound>, shards: Vec<String>, flags: String) -> Report {
        let outcomes: Vec<&Outcome> = bounds.iter().map(|b| &b.outcome).collect();
        Report {
            unreached: unreached_by_all(&outcomes),
            states: outcomes.iter().map(|o| o.states).sum(),
            unique_states: outcomes.iter().map(|o| o.unique_states).sum(),
            bounds,
            shards,
            flags,
        }
    }
}

/// Print the closing lines (all of a merged report, when `merged`) and return the exit code.
pub fn finish(r: &Report, p: Print, merged: bool) -> u8 {
    if p.json {
        outln!("{}", serde_json::to_string(r).expect("json"));
    } else {
        if merged {
            for b in &r.bounds {
                print_outcome(&b.bound, &b.describes, &b.outcome, p.quiet);
            }
        }
        if r.bounds.len() > 1 || merged {
            let n = fenceproof_model::properties::SITUATIONS.len();
            outln!("situations reached by the bounds together: {} of {n}", n - r.unreached.len());
            for s in &r.unreached {
                outln!("  never reached: {s}");
            }
        }
        if merged || r.shards.iter().any(|s| s != "1/1") {
            outln!(
                "{} bounds, {} states ({} unique) in all; shards {}",
                r.bounds.len(),
                r.states,
                r.unique_states,
                r.shards.join(", ")
            );
        }
    }
    if r.bounds.iter().any(|b| !b.outcome.broken.is_empty()) {
        exit::FAILED
    } else if r.bounds.iter().any(|b| !b.outcome.complete) {
        exit::HARNESS
    } else {
        exit::OK
    }
}

/// The situations no bound reached.
fn unreached_by_all(outcomes: &[&Outcome]) -> Vec<String> {
    let first = outcomes.first().map(|o| o.unreached.clone()).unwrap_or_default();
    first.into_iter().filter(|s| outcomes.iter().all(|o| o.unreached.contains(s))).collect()
}

pub fn print_outcome(name: &str, header: &str, o: &Outcome, quiet: bool) {
    outln!("model, {name} bound: {header}");
    outln!(
        "explored {} states ({} unique, depth {}) in {:.1} s: {:.0} unique states/s{}",
        o.states,
        o.unique_states,
        o.max_depth,
        o.seconds,
        o.rate(),
        if o.complete { "" } else { " — NOT exhausted (timeout): no verdict" }
    );
    let total = o.held.len() + o.broken.len();
    outln!("invariants: {} of {total} held", o.held.len());
    for r in o.held.iter().filter(|_| !quiet) {
        outln!("  held    {r}");
    }
    for (r, path) in &o.broken {
        outln!("  BROKEN  {r}: {}", steps(path));
    }
    let n = fenceproof_model::properties::SITUATIONS.len();
    outln!("situations: {} of {n} reached", n - o.unreached.len());
    for s in &o.unreached {
        outln!("  never reached: {s}");
    }
}

pub fn steps(path: &[fenceproof_model::action::Action]) -> String {
    path.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(" → ")
}
