//! What each action does to the state: the lease statements (`lease`), the protected commit
//! (`commit`), the ledger's claim, call, result and reconciliation (`ledger`), and the control
//! plane, the clock, replication and the faults (`control`). After every step a synchronous
//! standby receives the primary's rows, and a lost acknowledged write is noted.

mod commit;
mod control;
mod lease;
mod ledger;

use crate::action::Action;
use crate::config::{Config, Replication};
use crate::state::{Owner, State};

/// The state after `a`, or `None` when `a` changes nothing.
pub fn next(cfg: &Config, s: &State, a: Action) -> Option<State> {
    let mut n = s.clone();
    let changed = match a {
        Action::Acquire(i) => lease::acquire(cfg, &mut n, i),
        Action::AcquireCheck(i) => lease::acquire_check(&mut n, i),
        Action::Renew(i) => lease::renew(cfg, &mut n, i),
        Action::Release(i) => lease::release(cfg, &mut n, i),
        Action::Lock(i) => commit::lock(cfg, &mut n, i),
        Action::Validate(i) => commit::validate(cfg, &mut n, i),
        Action::Commit(i, w) => commit::commit(cfg, &mut n, i, w, false),
        Action::CommitLostReply(i, w) => commit::commit(cfg, &mut n, i, w, true),
        Action::ReadBack(i) => commit::read_back(&mut n, i),
        Action::Claim(i, op) => ledger::claim(cfg, &mut n, i, op),
        Action::Call(i) => ledger::call(cfg, &mut n, i),
        Action::WriteResult(i) => ledger::write_result(cfg, &mut n, i),
        Action::GiveUp(i) => ledger::give_up(&mut n, i),
        Action::MarkUnknown(op) => ledger::mark_unknown(&mut n, op),
        Action::Reconcile(op) => ledger::reconcile(cfg, &mut n, op),
        other => control::apply(cfg, &mut n, other),
    };
    if !changed {
        return None;
    }
    n.primary.canonical();
    if cfg.replication == Replication::Sync && n.standby.is_some() {
        n.standby = Some(n.primary);
    }
    Some(if cfg.symmetric() { crate::symmetry::canonical(n) } else { n })
}

/// The owner id process slot `i` uses for its next session.
pub fn owner_id(cfg: &Config, i: u8, session: u8) -> Owner {
    let name = if i == 2 && cfg.owner_reuse { 0 } else { i };
    if cfg.owner_reuse {
        name * 16
    } else {
        name * 16 + session
    }
}

/// Releases the lease row lock if process `i` holds it, and ends its transaction.
pub(crate) fn end_txn(s: &mut State, i: u8) {
    if s.lock == Some(i) {
        s.lock = None;
    }
    s.procs[i as usize].txn = crate::state::Txn::Idle;
}
