//! The facts of a model state and action, for [`super::class`]: the model's side of the one class
//! function (trace validation builds the same facts from a history's rows).

use super::class::{Class, Facts, Fine, LeaseClass};
use crate::action::Action;
use crate::state::{State, Txn};

/// The operation `a` acts on in `s`: the one it names, or the one its process's claim holds;
/// `None` for a lease, run, control-plane or environment action.
pub fn target(s: &State, a: Action) -> Option<usize> {
    match a {
        Action::Claim(_, n) | Action::MarkUnknown(n) | Action::Reconcile(n) => Some(n as usize),
        Action::Call(i) | Action::WriteResult(i) | Action::GiveUp(i) => {
            s.procs[i as usize].claim.map(|c| c.op as usize)
        }
        _ => None,
    }
}

/// The class of action `a` taken from `s`, and its finer class. A validated commit is open when
/// another process's is (the acting process's own is the step itself, as trace validation sees it)
/// and can still commit after this step: a history shows only committed transactions, so an open
/// commit that can never commit (its run finished or cancelled, by this step or before, or its
/// revision moved on) is no open commit any history can show.
pub fn classes(s: &State, a: Action) -> (Class, Fine) {
    let l = s.primary.lease;
    let ops = s.primary.ops.map(|o| o.status);
    let facts = Facts {
        lease: LeaseClass::of(l.owner.is_some(), l.expired()),
        run: s.primary.run,
        ops: &ops,
        target: target(s, a),
        validated_open: (0..s.procs.len()).any(|j| Some(j as u8) != a.process() && can_commit(s, j, a)),
        stale_believer: s.procs.iter().any(|p| p.lease.is_some_and(|b| b.epoch < l.epoch)),
    };
    (facts.class(), facts.fine())
}

/// Whether process `j`'s validated commit can still commit once `a` is taken from `s`.
fn can_commit(s: &State, j: usize, a: Action) -> bool {
    let p = &s.procs[j];
    p.txn == Txn::Validated
        && !s.primary.run.terminal()
        && a != Action::Cancel
        && p.lease.is_some_and(|b| b.expect == s.primary.revision)
}
