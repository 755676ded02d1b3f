//! The properties the checker judges in every reachable state: the rules of the catalogue the model
//! can express as `always` properties (each named by its rule id), and the situations the
//! schedules name as `sometimes` properties (each must be reachable, or the model is trivially safe).

use crate::config::Capability;
use crate::state::{Cond, OpStatus, State, Txn};
use crate::ProtocolModel;

type Cond_ = fn(&ProtocolModel, &State) -> bool;

/// A rule of the catalogue as an invariant of the model.
pub struct Invariant {
    pub rule: &'static str,
    pub holds: Cond_,
}

/// A situation the suite means to create, as a predicate on a state.
pub struct Situation {
    pub name: &'static str,
    pub reached: Cond_,
}

/// The catalogue's rules that the model judges, in the catalogue's words (rule ids).
pub const INVARIANTS: &[Invariant] = &[
    Invariant { rule: "holder.only-current-epoch-writes", holds: |_, s| !s.ghost.stale_write },
    Invariant { rule: "commit.revision-cas", holds: |_, s| !s.ghost.lost_update },
    Invariant { rule: "lease.acquire-free-or-expired", holds: |_, s| !s.ghost.took_live_lease },
    Invariant { rule: "lease.takeover-waits-for-validated-commit", holds: |_, s| !s.ghost.overtook_commit },
    Invariant { rule: "lease.epoch-plus-one", holds: |_, s| !s.ghost.epoch_reissued },
    Invariant { rule: "lease.renew-unexpired", holds: |_, s| !s.ghost.renewed_expired },
    Invariant { rule: "runs.terminal-final", holds: |_, s| !s.ghost.terminal_left },
    Invariant { rule: "claim.prepared-of-live-runs", holds: |_, s| !s.ghost.dead_run_claimed },
    Invariant { rule: "result.claim-owner-revision-digest", holds: |_, s| !s.ghost.stale_result },
    Invariant { rule: "effects.one-per-operation", holds: |_, s| s.resources.iter().all(|r| *r <= 1) },
    Invariant { rule: "unknown.never-failure", holds: executed_never_failed },
    Invariant { rule: "failover.contract", holds: |_, s| !s.ghost.ack_lost },
];

/// An operation whose tool ran it is never recorded as failed.
fn executed_never_failed(_: &ProtocolModel, s: &State) -> bool {
    (0..s.resources.len()).all(|n| !(s.primary.ops[n].status == OpStatus::FailedFinal && s.resources[n] > 0))
}

/// The situations the schedules name, each a state the checker must reach.
pub const SITUATIONS: &[Situation] = &[
    Situation { name: "old owner outlived by a takeover", reached: outlived_by_takeover },
    Situation { name: "valid at check, expired before commit", reached: valid_then_expired },
    Situation { name: "takeover waits on a validated commit", reached: takeover_waits },
    Situation { name: "a lost reply to be read back", reached: |_, s| s.procs.iter().any(|p| p.unknown) },
    Situation { name: "an expired claim marked unknown", reached: |_, s| has_op(s, OpStatus::Unknown) },
    Situation { name: "an unknown operation converged", reached: converged },
    Situation { name: "a prepared operation cancelled", reached: |_, s| has_op(s, OpStatus::Cancelled) },
    Situation { name: "a run completed", reached: |_, s| s.primary.run == crate::state::RunStatus::Succeeded },
    Situation { name: "a standby promoted", reached: |_, s| s.budget.promotes == 0 },
    Situation { name: "restored from a backup", reached: |_, s| s.restored },
    Situation { name: "the clock jumped", reached: |_, s| s.budget.jumps == 0 },
    Situation { name: "a 40001 aborted a transaction", reached: |_, s| s.budget.aborts == 0 },
    Situation { name: "a stale claim session called after its claim expired", reached: stale_call },
];

fn has_op(s: &State, st: OpStatus) -> bool {
    s.primary.ops.iter().any(|o| o.status == st)
}

fn outlived_by_takeover(_: &ProtocolModel, s: &State) -> bool {
    let epoch = s.primary.lease.epoch;
    s.procs.iter().any(|p| p.cond == Cond::Running && p.lease.is_some_and(|b| b.epoch < epoch))
}

fn valid_then_expired(_: &ProtocolModel, s: &State) -> bool {
    s.primary.lease.expired() && s.procs.iter().any(|p| p.txn == Txn::Validated)
}

fn takeover_waits(_: &ProtocolModel, s: &State) -> bool {
    let holder = s.lock.map(|i| s.procs[i as usize].txn == Txn::Validated).unwrap_or(false);
    let waiting = s.procs.iter().any(|p| p.cond == Cond::Running && p.lease.is_none() && p.txn == Txn::Idle);
    holder && s.primary.lease.expired() && waiting
}

fn converged(m: &ProtocolModel, s: &State) -> bool {
    (0..s.resources.len()).any(|n| {
        m.cfg.caps[n] != Capability::None
            && s.primary.ops[n].status == OpStatus::Succeeded
            && s.primary.ops[n].was_unknown
    })
}

fn stale_call(_: &ProtocolModel, s: &State) -> bool {
    s.procs
        .iter()
        .any(|p| p.claim.is_some_and(|c| c.called && s.primary.ops[c.op as usize].status == OpStatus::Unknown))
}
