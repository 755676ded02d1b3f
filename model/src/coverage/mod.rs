//! The denominator of a PASS: the abstract transitions (state class × action) the bounded model can
//! take. A transition's class keeps what the action's guard and the rules read and drops the rest
//! (`class.rs`): a run that takes a transition of the same class and kind exercises it; the ones no
//! run takes are what the suite never creates.

mod class;
mod of_state;
mod paths;
mod tours;
mod walk;

use std::collections::BTreeSet;

pub use class::{fine_key, in_flight, key, Class, Facts, Fine, LeaseClass};
pub use of_state::{classes, target};
pub use paths::{commits, paths, playable, replay, spec_only, step, takes, worker_paths, worker_playable};
pub use tours::{reaches, tour_playable, worker_tours, TOUR_MAX};
pub use walk::{observable_reachable, reachable, Reachable};

/// The action kinds a recorded history shows (each is a commit); the others are hidden steps.
pub const OBSERVABLE: &[&str] = &[
    "acquire",
    "renew",
    "release",
    "commit",
    "claim",
    "write-result",
    "give-up-unknown",
    "mark-unknown",
    "reconcile",
    "cancel",
];

/// The observable kind an action kind is recorded as (a commit whose reply was lost is a commit).
pub fn observable(kind: &str) -> Option<&'static str> {
    let kind = if kind == "commit-lost-reply" { "commit" } else { kind };
    OBSERVABLE.iter().copied().find(|k| *k == kind)
}

/// The observable transitions of both default bounds, as generated into `transitions.txt` (the
/// denominator `verify` reports coverage against; a test keeps the file current).
pub const DENOMINATOR: &str = include_str!("../../transitions.txt");

/// The shortest playable path to each transition a driver can reach, as generated into
/// `paths.json` by `model/tests/paths.rs` (the model-paths experiment plays them).
pub const PATHS: &str = include_str!("../../paths.json");
/// The paths the worker contract can drive a worker through ([`worker_paths`]), kept in
/// `worker_paths.json` by `model/tests/paths.rs` (the Model-paths experiment drives the worker
/// under test through them).
pub const WORKER_PATHS: &str = include_str!("../../worker_paths.json");
/// The worker's tours ([`worker_tours`]): few long paths that together take every transition of
/// [`WORKER_PATHS`] but the ones only the spec's own statements reach, kept in
/// `worker_tours.json` by `model/tests/paths.rs` (Model-paths plays them, then the shortest paths
/// of what they left).
pub const WORKER_TOURS: &str = include_str!("../../worker_tours.json");

/// The denominator's transitions.
pub fn denominator() -> BTreeSet<&'static str> {
    DENOMINATOR.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).collect()
}
