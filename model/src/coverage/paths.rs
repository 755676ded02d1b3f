//! A path to every observable transition a driver can play on a real database: a breadth-first
//! walk of the bounded model (workers told apart, no symmetry), restricted to the steps a driver
//! of the protocol's own statements can take in order on one server — the lease's, the protected
//! commit's, the ledger's and the control plane's statements, the clock's ticks and a kill of a
//! process with no transaction open — and to the order the real claim picks operations in (the
//! operation planned first is claimed first). For each transition of the denominator it reaches,
//! the shortest sequence of actions from the initial state whose last action takes it.
//!
//! Faults of the server other than a restore (promotion, clock jumps, 40001, lost replies) and
//! SIGSTOP are left out: their transitions are what the matrix's own rows create.
//!
//! The walk runs three times, each for the transitions the ones before it did not reach, so a
//! path holds an unusual step only when it must: first with the protocol's statements only; then
//! with the one step only the spec's own statements take, a takeover of a finished run's lease,
//! which the fp_* functions refuse ([`spec_only`]; a driver on the fp_* path plays those few as the
//! direct login); then in the bound with one restore ([`restoring`]), for what only a restore and
//! the operator's recovery after it lead to (a run back to pending with operations the tools hold).

use std::collections::{BTreeMap, HashMap};

use stateright::Model;

use super::class::key;
use super::observable;
use super::of_state::classes;
use crate::action::Action;
use crate::state::{OpStatus, State, Txn, Write};
use crate::ProtocolModel;

/// Whether `a` from `s` is a step only the spec's own statements take: a takeover of a finished
/// run's lease (the fp_* functions take no lease of a finished run, a refusal beyond the spec's).
pub fn spec_only(s: &State, a: &Action) -> bool {
    matches!(a, Action::Acquire(_)) && s.primary.run.terminal()
}

/// Whether a driver can play `a` from `s` (see the module's doc), a step only the spec's own
/// statements take ([`spec_only`]) included.
pub fn playable(s: &State, a: &Action) -> bool {
    let ops = &s.primary.ops;
    match *a {
        Action::Acquire(_) => true,
        // A validation whose commit cannot commit (a finished run, a revision moved on) holds
        // nothing a history shows, and the fp_* path refuses it at once.
        Action::Validate(i) => {
            !s.primary.run.terminal() && s.procs[i as usize].lease.is_some_and(|b| b.expect == s.primary.revision)
        }
        Action::Renew(_)
        | Action::Release(_)
        | Action::Lock(_)
        | Action::Call(_)
        | Action::WriteResult(_)
        | Action::GiveUp(_)
        | Action::MarkUnknown(_)
        | Action::Reconcile(_)
        | Action::Tick
        | Action::Restart
        | Action::Recover => true,
        // A restore between transactions (an open one would end with the old server).
        Action::Restore => s.procs.iter().all(|p| p.txn == Txn::Idle),
        // The second operation is planned after the first, so the claim's oldest-first order
        // picks the first while both are prepared.
        Action::Commit(_, Write::Plan(n)) => n == 0 || ops[0].status != OpStatus::Absent,
        Action::Commit(_, _) => true,
        // A cancel beside an open protected commit: the commit's run write (or, on the fp_*
        // path, its row lock on the run) orders them, and no history shows the open one.
        Action::Cancel => s.procs.iter().all(|p| p.txn == Txn::Idle),
        Action::Claim(_, n) => n == 0 || ops[0].status != OpStatus::Prepared,
        Action::Kill(i) => s.procs[i as usize].txn == Txn::Idle,
        _ => false,
    }
}

/// The shortest playable path to each observable transition the walk of `model` reaches (at most
/// `max_states` states; `None` when it had to stop there), keyed by the transition's line: the
/// paths without a step only the spec's statements take, then, for the transitions those leave
/// unreached, the paths with one.
pub fn paths(model: &ProtocolModel, max_states: usize) -> Option<BTreeMap<String, Vec<Action>>> {
    let mut found = walk(model, max_states, false, playable)?;
    for (k, p) in walk(model, max_states, true, playable)? {
        found.entry(k).or_insert(p);
    }
    for (k, p) in walk(&ProtocolModel::new(restoring(&model.cfg)), max_states, false, playable)? {
        found.entry(k).or_insert(p);
    }
    Some(found)
}

/// Whether the worker under test can be driven through `a` from `s` by the worker contract's
/// commands (`worker_paths`): a step [`playable`] by a driver, but for what the contract has no
/// command or fault point for. The contract's `dispatch` claims and calls in one pass (there is no
/// point to hold a dispatcher between its claim and its call), so a claim's call, or its giving up
/// when the request was lost, is its claim session's next step; a restore and the recovery after
/// it are the environment's and the operator's, not the worker's.
pub fn worker_playable(s: &State, a: &Action) -> bool {
    if !playable(s, a) || matches!(a, Action::Restore | Action::Recover | Action::Restart) {
        return false;
    }
    match s.procs.iter().position(|p| p.claim.is_some_and(|c| !c.called)) {
        Some(p) => matches!(*a, Action::Call(i) | Action::GiveUp(i) if i as usize == p),
        None => true,
    }
}

/// The shortest path to each observable transition the worker contract can drive a worker
/// through ([`worker_playable`]), keyed like [`paths`]: without, then with, the step only the
/// spec's own statements take.
pub fn worker_paths(model: &ProtocolModel, max_states: usize) -> Option<BTreeMap<String, Vec<Action>>> {
    let mut found = walk(model, max_states, false, worker_playable)?;
    for (k, p) in walk(model, max_states, true, worker_playable)? {
        found.entry(k).or_insert(p);
    }
    Some(found)
}

/// `cfg` with one restore (to the backup of the run as created) and no kill: the third walk's
/// bound, for the transitions only a restore and its recovery lead to.
pub fn restoring(cfg: &crate::config::Config) -> crate::config::Config {
    crate::config::Config { restores: 1, kills: 0, ..cfg.clone() }
}

/// One walk over the steps `takes` allows: with `spec_steps`, the steps only the spec's statements
/// take are played too.
fn walk(
    model: &ProtocolModel,
    max_states: usize,
    spec_steps: bool,
    takes: fn(&State, &Action) -> bool,
) -> Option<BTreeMap<String, Vec<Action>>> {
    let mut cfg = model.cfg.clone();
    cfg.symmetry = false;
    let raw = ProtocolModel::new(cfg);
    // Every state seen, with the index of the state it was first reached from and the action.
    let mut states: Vec<(State, usize, Option<Action>)> = Vec::new();
    let mut index: HashMap<State, usize> = HashMap::new();
    for s in raw.init_states() {
        index.insert(s.clone(), states.len());
        states.push((s, usize::MAX, None));
    }
    let mut found = BTreeMap::new();
    let mut actions = Vec::new();
    let mut next = 0;
    while next < states.len() {
        let s = states[next].0.clone();
        actions.clear();
        raw.actions(&s, &mut actions);
        for a in actions.drain(..).filter(|a| takes(&s, a) && (spec_steps || !spec_only(&s, a))) {
            let Some(n) = step(&raw, &s, a) else { continue };
            if let Some(k) = taken(&s, a, &n) {
                found.entry(k).or_insert_with(|| path_to(&states, next, a));
            }
            if !index.contains_key(&n) {
                if states.len() >= max_states {
                    return None;
                }
                index.insert(n.clone(), states.len());
                states.push((n, next, Some(a)));
            }
        }
        next += 1;
    }
    Some(found)
}

/// The state `a` leads to from `s`, as a database records it: the model's successor, or for a
/// renewal of a lease whose abstract term it leaves as it was (the model takes no such step), the
/// same state: the real statement commits a new expiry all the same.
pub fn step(m: &ProtocolModel, s: &State, a: Action) -> Option<State> {
    m.next_state(s, a).or_else(|| {
        let Action::Renew(i) = a else { return None };
        let (b, l) = (s.procs[i as usize].lease?, s.primary.lease);
        (l.owner == Some(b.owner) && l.epoch == b.epoch && !l.expired()).then(|| s.clone())
    })
}

/// Whether a database records `a` from `s`: it changes the rows, or it is a renewal that kept its
/// lease (the model keeps times relative to its ticks, so a renewal right after a grant changes no
/// abstract row; the real statement always writes a new expiry).
pub fn commits(s: &State, a: Action, n: &State) -> bool {
    n.primary != s.primary || matches!(a, Action::Renew(i) if n.procs[i as usize].lease.is_some())
}

/// The transition of the denominator `a` takes from `s` to `n`, if a database records it.
pub(super) fn taken(s: &State, a: Action, n: &State) -> Option<String> {
    let o = observable(a.kind())?;
    commits(s, a, n).then(|| key(&classes(s, a).0, o))
}

/// Whether the model commits `a` from `s` (reaching `n`) as a database or a worker answers it: a
/// renewal that kept its lease, a validation that holds the lease checked, any other step that
/// changed the rows; `None` for a step no database records (a tick, a call, the row lock, a kill).
pub fn takes(s: &State, a: Action, n: &State) -> Option<bool> {
    match a {
        Action::Renew(i) => Some(n.procs[i as usize].lease.is_some()),
        Action::Validate(i) => Some(n.procs[i as usize].txn == Txn::Validated),
        Action::Acquire(_)
        | Action::Release(_)
        | Action::Commit(..)
        | Action::Claim(..)
        | Action::WriteResult(_)
        | Action::GiveUp(_)
        | Action::MarkUnknown(_)
        | Action::Reconcile(_)
        | Action::Cancel => Some(n.primary != s.primary),
        _ => None,
    }
}

/// The actions from the initial state to `states[at]`, then `last`.
fn path_to(states: &[(State, usize, Option<Action>)], mut at: usize, last: Action) -> Vec<Action> {
    let mut path = vec![last];
    while let Some(a) = states[at].2 {
        path.push(a);
        at = states[at].1;
    }
    path.reverse();
    path
}

/// The states along `path` from the initial state, in the driver's bound
/// ([`crate::config::Config::driver_bound`]), workers told apart; `None` when it does not play
/// every step.
pub fn replay(path: &[Action]) -> Option<(ProtocolModel, Vec<State>)> {
    let bound = crate::config::Config::driver_bound();
    [restoring(&bound), bound].into_iter().rev().find_map(|mut cfg| {
        cfg.symmetry = false;
        let m = ProtocolModel::new(cfg);
        let mut states = vec![m.init_states().remove(0)];
        for a in path {
            let s = states.last()?;
            let mut enabled = Vec::new();
            m.actions(s, &mut enabled);
            if !enabled.contains(a) || !playable(s, a) {
                return None;
            }
            let n = step(&m, s, *a)?;
            states.push(n);
        }
        Some((m, states))
    })
}
