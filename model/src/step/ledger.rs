//! The outbox (§09): the dispatcher's claim, its remote call, its result write or its giving the
//! claim up as unknown, the reconciler's unknown marking and its convergence by what the tool allows.

use crate::config::{Ablation, Capability, Config};
use crate::state::{Claim, OpStatus, State};

/// The claim: a prepared operation of a live run becomes dispatching under this claim session.
pub fn claim(cfg: &Config, s: &mut State, i: u8, n: u8) -> bool {
    if s.primary.run.terminal() {
        s.ghost.dead_run_claimed = true;
    }
    let op = &mut s.primary.ops[n as usize];
    op.status = OpStatus::Dispatching;
    op.dispatch_owner = Some(i);
    op.until = cfg.claim_ttl;
    s.procs[i as usize].claim = Some(Claim { op: n, called: false });
    true
}

/// The remote receives the call: an idempotent key or a deterministic id finds the resource a
/// first call made; any other tool makes one more.
pub fn call(cfg: &Config, s: &mut State, i: u8) -> bool {
    let Some(mut c) = s.procs[i as usize].claim else { return false };
    create(cfg, s, c.op);
    c.called = true;
    s.procs[i as usize].claim = Some(c);
    true
}

fn create(cfg: &Config, s: &mut State, n: u8) {
    let r = &mut s.resources[n as usize];
    *r = match cfg.caps[n as usize] {
        Capability::Idempotent | Capability::DeterministicId => (*r).max(1),
        Capability::Query | Capability::None => (*r + 1).min(2),
    };
}

/// The result write: only the claim session that still holds the claim.
pub fn write_result(cfg: &Config, s: &mut State, i: u8) -> bool {
    let Some(c) = s.procs[i as usize].claim.take() else { return false };
    let op = &mut s.primary.ops[c.op as usize];
    let holds = op.status == OpStatus::Dispatching && op.dispatch_owner == Some(i);
    let loose = cfg.ablated(Ablation::ResultWithoutClaimCheck)
        && matches!(op.status, OpStatus::Dispatching | OpStatus::Unknown);
    if holds || loose {
        if !holds {
            s.ghost.stale_result = true;
        }
        op.status = OpStatus::Succeeded;
        op.until = 0;
        op.dispatch_owner = None;
    }
    true
}

/// The claim session gives its own claim up as unknown (`fp_mark_unknown_own`): the row moves only
/// while it is still dispatching under this session's claim, expired or not (the statement reads
/// no deadline, no lease and no run); otherwise it matches no row. Either way the session's claim
/// ends.
pub fn give_up(s: &mut State, i: u8) -> bool {
    let Some(c) = s.procs[i as usize].claim.take() else { return false };
    let op = s.primary.ops[c.op as usize];
    if op.status == OpStatus::Dispatching && op.dispatch_owner == Some(i) {
        mark_unknown(s, c.op);
    }
    true
}

/// The reconciler marks an expired claim unknown, keeping the evidence.
pub fn mark_unknown(s: &mut State, n: u8) -> bool {
    let op = &mut s.primary.ops[n as usize];
    op.status = OpStatus::Unknown;
    op.dispatch_owner = None;
    op.until = 0;
    op.was_unknown = true;
    true
}

/// The reconciler converges an unknown operation: a retry with the same key or id, or a query of
/// the remote's acceptance record (found: succeeded; not found: failed_final).
pub fn reconcile(cfg: &Config, s: &mut State, n: u8) -> bool {
    let status = match cfg.caps[n as usize] {
        Capability::Idempotent | Capability::DeterministicId => {
            create(cfg, s, n);
            OpStatus::Succeeded
        }
        Capability::Query if s.resources[n as usize] > 0 => OpStatus::Succeeded,
        Capability::Query => OpStatus::FailedFinal,
        Capability::None => return false,
    };
    let op = &mut s.primary.ops[n as usize];
    op.status = status;
    true
}
