//! Tours: few long worker paths that together reach what the shortest paths reach one by one.
//! Each tour starts from the initial state and goes, by a breadth-first search over the steps the
//! worker contract can drive ([`worker_playable`], no step only the spec's own statements take),
//! to the nearest step that takes a transition no tour has reached yet; then on from there, until
//! no such step is within reach or the tour is [`TOUR_MAX`] steps long. Every transition a tour
//! passes on its way counts as reached. What no tour reaches (the steps only the spec's statements
//! take, and anything the search bound left) keeps its shortest path.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};

use stateright::Model;

use super::observable;
use super::paths::{commits, replay, spec_only, step, taken, worker_playable};
use crate::action::Action;
use crate::config::Capability;
use crate::state::{OpStatus, State};
use crate::ProtocolModel;

/// The most steps of one tour (a longer one holds its run longer and loses more when it stops).
pub const TOUR_MAX: usize = 60;

/// The most states one search from a tour's end visits before that tour ends.
const SEARCH_MAX: usize = 200_000;

/// The shortest steps from `from` to a step that takes one of `wanted`: the steps, the states
/// after each, and the transitions they take (in order, each once).
fn nearest(m: &ProtocolModel, from: &Node, wanted: &BTreeSet<String>) -> Option<(Vec<Action>, Node)> {
    search(m, from, wanted, false).or_else(|| search(m, from, wanted, true))
}

/// Where a tour stands: the state, and the convergence its last step owes ([`converged_in_pass`]).
type Node = (State, Option<u8>);

/// Whether the step from `s` to `n` closes doors: it finishes the run or kills a process.
fn ends(s: &State, a: Action, n: &State) -> bool {
    matches!(a, Action::Kill(_)) || (n.primary.run.terminal() && !s.primary.run.terminal())
}

/// Whether the reconciler's pass (the contract's grain: one `reconcile` command marks every
/// expired claim and converges every unknown operation it can) would act on an operation other
/// than `n`'s in `s`: then the model's single step is not one pass, and a tour does not take it.
fn pass_touches_others(m: &ProtocolModel, s: &State, n: u8) -> bool {
    (0..s.primary.ops.len()).filter(|k| *k != n as usize).any(|k| {
        let op = s.primary.ops[k];
        (op.status == OpStatus::Dispatching && op.until <= 0)
            || (op.status == OpStatus::Unknown && m.cfg.caps[k] != Capability::None)
    })
}

/// After the reconciler marks operation `n` unknown, the operation its pass converges at once
/// (reconcilable, the tool holding what it created): the tour's next step must be that convergence.
fn converged_in_pass(m: &ProtocolModel, a: Action, n: &State) -> Option<u8> {
    let Action::MarkUnknown(k) = a else { return None };
    let op = n.primary.ops[k as usize];
    (op.status == OpStatus::Unknown && m.cfg.caps[k as usize] != Capability::None && n.resources[k as usize] > 0)
        .then_some(k)
}

/// Whether a tour may take `a` from `s` (`pending`: the convergence its last step owes).
fn tour_step(m: &ProtocolModel, s: &State, a: Action, pending: Option<u8>) -> bool {
    if !worker_playable(s, &a) || spec_only(s, &a) {
        return false;
    }
    let other_claim = |i: u8| s.procs.iter().enumerate().any(|(j, p)| j != i as usize && p.claim.is_some());
    match (pending, a) {
        (Some(k), a) => a == Action::Reconcile(k),
        // Two claim sessions open at once, each with the tool fault its give-up needs, are what
        // the shortest paths play one at a time; a tour leaves them to those paths.
        (None, Action::Claim(i, _)) => !other_claim(i),
        (None, Action::MarkUnknown(k) | Action::Reconcile(k)) => !pass_touches_others(m, s, k),
        _ => true,
    }
}

/// [`nearest`], through steps that close no door unless `ending`.
fn search(m: &ProtocolModel, from: &Node, wanted: &BTreeSet<String>, ending: bool) -> Option<(Vec<Action>, Node)> {
    let mut seen: HashSet<Node> = HashSet::from([from.clone()]);
    let mut queue: VecDeque<(Node, Vec<Action>)> = VecDeque::from([(from.clone(), Vec::new())]);
    let mut actions = Vec::new();
    while let Some(((s, pending), path)) = queue.pop_front() {
        actions.clear();
        m.actions(&s, &mut actions);
        for a in actions.drain(..).filter(|a| tour_step(m, &s, *a, pending)) {
            let Some(n) = step(m, &s, a) else { continue };
            // A refused step changes only what a process believes, which no history shows: trace
            // validation would class the steps after it by the belief the model dropped.
            if (!ending && ends(&s, a, &n)) || (observable(a.kind()).is_some() && !commits(&s, a, &n)) {
                continue;
            }
            let mut p = path.clone();
            p.push(a);
            let next = (n.clone(), converged_in_pass(m, a, &n));
            if taken(&s, a, &n).is_some_and(|k| wanted.contains(&k)) {
                return Some((p, next));
            }
            if seen.len() < SEARCH_MAX && seen.insert(next.clone()) {
                queue.push_back((next, p));
            }
        }
    }
    None
}

/// The tours reaching `targets` (keys of the worker's shortest paths), and the targets none reached.
fn tours(targets: &BTreeSet<String>) -> (Vec<Vec<Action>>, BTreeSet<String>) {
    let mut cfg = crate::config::Config::driver_bound();
    cfg.symmetry = false;
    let m = ProtocolModel::new(cfg);
    let init = m.init_states().remove(0);
    let mut left = targets.clone();
    let mut out = Vec::new();
    loop {
        let (mut at, mut tour): (Node, Vec<Action>) = ((init.clone(), None), Vec::new());
        while tour.len() < TOUR_MAX {
            let Some((steps, next)) = nearest(&m, &at, &left) else { break };
            let mut s = at.0.clone();
            for a in steps {
                let n = step(&m, &s, a).expect("a step the search took");
                if let Some(k) = taken(&s, a, &n) {
                    left.remove(&k);
                }
                tour.push(a);
                s = n;
            }
            at = next;
        }
        if tour.is_empty() {
            return (out, left);
        }
        out.push(tour);
    }
}

/// The worker's tours keyed `tour-NN` (as `worker_tours.json` keeps them) for the transitions of
/// `paths` (the worker's shortest paths), and the transitions they leave to those paths.
pub fn worker_tours(paths: &BTreeMap<String, Vec<Action>>) -> (BTreeMap<String, Vec<Action>>, BTreeSet<String>) {
    let (found, left) = tours(&paths.keys().cloned().collect());
    (found.into_iter().enumerate().map(|(i, t)| (format!("tour-{i:03}"), t)).collect(), left)
}

/// Whether every step of `path` is one a tour may take: playable through the worker contract, no
/// step only the spec's statements take, no refused step, and the reconciler's steps each one pass
/// of its own.
pub fn tour_playable(path: &[Action]) -> bool {
    let Some((m, states)) = replay(path) else { return false };
    let mut pending = None;
    path.iter().enumerate().all(|(i, a)| {
        let (s, n) = (&states[i], &states[i + 1]);
        let ok = tour_step(&m, s, *a, pending) && (observable(a.kind()).is_none() || commits(s, *a, n));
        pending = converged_in_pass(&m, *a, &states[i + 1]);
        ok
    })
}

/// The transitions `path` takes, in order, each once (as a database records them); empty when
/// the path is no behaviour of the model.
pub fn reaches(path: &[Action]) -> Vec<String> {
    let Some((_, states)) = replay(path) else { return Vec::new() };
    let mut out: Vec<String> = Vec::new();
    for (i, a) in path.iter().enumerate() {
        if let Some(k) = taken(&states[i], *a, &states[i + 1]).filter(|k| !out.contains(k)) {
            out.push(k);
        }
    }
    out
}
