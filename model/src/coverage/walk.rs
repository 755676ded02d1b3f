//! The breadth-first walks that count the bounded model's transitions: every one (`model check
//! --transitions`, in both classes) and the observable ones (the denominator).

use std::collections::{BTreeSet, HashSet, VecDeque};

use stateright::Model;

use super::class::{key, Class, Fine};
use super::observable;
use super::of_state::classes;
use crate::action::Action;
use crate::state::State;
use crate::ProtocolModel;

/// The abstract transitions a walk reached, in both classes.
#[derive(Default)]
pub struct Reachable {
    /// By what the rules read (the denominator's class).
    pub rules: BTreeSet<(Class, &'static str)>,
    /// By both operations' statuses.
    pub fine: BTreeSet<(Fine, &'static str)>,
}

/// Every abstract transition reachable in `model`, by a breadth-first walk of its states (at most
/// `max_states` of them; `None` when the walk had to stop there).
pub fn reachable(model: &ProtocolModel, max_states: usize) -> Option<Reachable> {
    let mut found = Reachable::default();
    walk(model, max_states, |s, a, _| {
        let (class, fine) = classes(s, a);
        found.rules.insert((class, a.kind()));
        found.fine.insert((fine, a.kind()));
    })?;
    Some(found)
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
            found.insert(key(&classes(s, a).0, k));
        }
    })?;
    Some(found)
}

/// A breadth-first walk of `model`'s states (at most `max_states`; `None` when it had to stop
/// there), calling `visit` with every state, enabled action and successor.
fn walk(model: &ProtocolModel, max_states: usize, mut visit: impl FnMut(&State, Action, &State)) -> Option<()> {
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
