//! The denominator of a PASS: the abstract transitions (state class × action) the bounded model can
//! take. A state's class keeps what the rules are about and drops the rest: the lease (free, live or
//! expired), the run's status, each operation's status, whether a validated commit is open and
//! whether some process still believes in an epoch the lease has left behind. A run that takes a
//! transition of the same class and kind exercises it; the ones no run takes are what the suite
//! never creates.

use std::collections::{BTreeSet, HashSet, VecDeque};

use serde::Serialize;
use stateright::Model;

use crate::state::{OpStatus, RunStatus, State, Txn};
use crate::ProtocolModel;

/// The lease as the rules see it.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum LeaseClass {
    Free,
    Live,
    Expired,
}

/// What the rules look at in a state.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Class {
    pub lease: LeaseClass,
    pub run: RunStatus,
    pub ops: [OpStatus; crate::state::OPS],
    pub validated_open: bool,
    pub stale_believer: bool,
}

/// The class of `s`.
pub fn class(s: &State) -> Class {
    let l = s.primary.lease;
    let lease = match (l.owner, l.expired()) {
        (None, _) => LeaseClass::Free,
        (Some(_), false) => LeaseClass::Live,
        (Some(_), true) => LeaseClass::Expired,
    };
    Class {
        lease,
        run: s.primary.run,
        ops: [s.primary.ops[0].status, s.primary.ops[1].status],
        validated_open: s.procs.iter().any(|p| p.txn == Txn::Validated),
        stale_believer: s.procs.iter().any(|p| p.lease.is_some_and(|b| b.epoch < l.epoch)),
    }
}

/// One abstract transition: a class and the kind of action taken from it.
pub type Transition = (Class, &'static str);

/// Every abstract transition reachable in `model`, by a breadth-first walk of its states (at most
/// `max_states` of them; `None` when the walk had to stop there).
pub fn reachable(model: &ProtocolModel, max_states: usize) -> Option<BTreeSet<Transition>> {
    let mut found = BTreeSet::new();
    walk(model, max_states, |s, a, _| {
        found.insert((class(s), a.kind()));
    })?;
    Some(found)
}

/// A breadth-first walk of `model`'s states (at most `max_states`; `None` when it had to stop
/// there), calling `visit` with every state, enabled action and successor.
fn walk(
    model: &ProtocolModel,
    max_states: usize,
    mut visit: impl FnMut(&State, crate::action::Action, &State),
) -> Option<()> {
    let mut seen: HashSet<State> = model.init_states().into_iter().collect();
    let mut queue: VecDeque<State> = seen.iter().cloned().collect();
    let mut actions = Vec::new();
    while let Some(s) = queue.pop_front() {
        actions.clear();
        model.actions(&s, &mut actions);
        for a in actions.drain(..) {
            let Some(n) = model.next_state(&s, a) else { continue };
            visit(&s, a, &n);
            if seen.len() >= max_states && !seen.contains(&n) {
                return None;
            }
            if seen.insert(n.clone()) {
                queue.push_back(n);
            }
        }
    }
    Some(())
}

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

/// A transition as one line: the class's fields and the kind.
pub fn key(c: &Class, kind: &str) -> String {
    let ops: Vec<String> = c.ops.iter().map(|o| format!("{o:?}").to_lowercase()).collect();
    format!(
        "lease={:?} run={:?} ops={} open={} stale={} | {kind}",
        c.lease,
        c.run,
        ops.join(","),
        c.validated_open,
        c.stale_believer
    )
    .to_lowercase()
}

/// The observable transitions of both default bounds, as generated into `transitions.txt` (the
/// denominator `verify` reports coverage against; a test keeps the file current).
pub const DENOMINATOR: &str = include_str!("../transitions.txt");

/// The denominator's transitions.
pub fn denominator() -> BTreeSet<&'static str> {
    DENOMINATOR.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).collect()
}

/// Every transition a recorded history can show, reachable in `model` (as lines): an observable
/// action that changed the primary's rows (a refused takeover or a failed renewal commits nothing,
/// so no history shows it). `None` when the walk had to stop at `max_states`.
pub fn observable_reachable(model: &ProtocolModel, max_states: usize) -> Option<BTreeSet<String>> {
    let mut raw = model.cfg.clone();
    raw.symmetry = false;
    let mut found = BTreeSet::new();
    walk(model, max_states, |s, a, _| {
        let Some(k) = observable(a.kind()) else { return };
        if crate::step::next(&raw, s, a).is_some_and(|r| r.primary != s.primary) {
            found.insert(key(&class(s), k));
        }
    })?;
    Some(found)
}
