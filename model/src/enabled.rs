//! Which actions a state enables. A statement that would wait on the lease row lock is not
//! enabled until the lock is free (PostgreSQL makes it wait, then evaluates it on the committed
//! row); a paused or crashed process takes no step; the faults are enabled while their budget lasts.

use crate::action::Action;
use crate::config::{Ablation, Capability, Config, Replication};
use crate::state::{Cond, OpStatus, Proc, RunStatus, State, Txn, Write, EPOCHS, OPS, PROCS};

/// Every action enabled in `s`, in a fixed order.
pub fn enabled(cfg: &Config, s: &State, out: &mut Vec<Action>) {
    let open = !s.restored || cfg.ablated(Ablation::ResumeBeforeRecovery);
    for i in 0..PROCS as u8 {
        let p = &s.procs[i as usize];
        if p.cond == Cond::Running && open {
            lease_steps(cfg, s, i, p, out);
            commit_steps(cfg, s, i, p, out);
            dispatch_steps(cfg, s, i, p, out);
        }
    }
    control_steps(cfg, s, out);
    fault_steps(cfg, s, out);
}

/// Whether a takeover's condition holds on the committed lease row.
pub fn takeover_allowed(s: &State) -> bool {
    s.primary.lease.owner.is_none() || s.primary.lease.expired()
}

fn lease_steps(cfg: &Config, s: &State, i: u8, p: &Proc, out: &mut Vec<Action>) {
    let row_free = s.lock.is_none();
    if p.unknown {
        out.push(Action::ReadBack(i));
        return;
    }
    if p.txn != Txn::Idle {
        return;
    }
    match p.lease {
        None => {
            let room = p.sessions < cfg.max_sessions && (s.primary.lease.epoch as usize) < EPOCHS - 1;
            if !room {
                return;
            }
            if cfg.ablated(Ablation::NoRecheck) && !p.acquire_checked {
                if takeover_allowed(s) {
                    out.push(Action::AcquireCheck(i));
                }
            } else if row_free && (p.acquire_checked || takeover_allowed(s)) {
                out.push(Action::Acquire(i));
            }
        }
        Some(_) if row_free => {
            out.push(Action::Renew(i));
            out.push(Action::Release(i));
        }
        Some(_) => {}
    }
}

fn commit_steps(cfg: &Config, s: &State, i: u8, p: &Proc, out: &mut Vec<Action>) {
    let Some(b) = p.lease else { return };
    match p.txn {
        Txn::Idle if b.expect < cfg.max_revision => {
            if s.lock.is_none() || cfg.ablated(Ablation::NoRowLock) {
                out.push(Action::Lock(i));
            }
        }
        Txn::Idle => {}
        Txn::Locked => out.push(Action::Validate(i)),
        Txn::Validated => {
            for w in writes(cfg, s) {
                out.push(Action::Commit(i, w));
                if s.budget.lost_acks > 0 {
                    out.push(Action::CommitLostReply(i, w));
                }
            }
        }
    }
}

/// The writes a worker tries at the run's current status (a write of another status is refused
/// by the same CAS that refuses a stale revision, which the model already explores).
fn writes(cfg: &Config, s: &State) -> Vec<Write> {
    match s.primary.run {
        RunStatus::Pending => vec![Write::Start],
        RunStatus::Running => {
            let mut w = vec![Write::Checkpoint, Write::Complete];
            // A run plans its steps in order: the next operation not yet registered.
            let ops = &s.primary.ops[..cfg.ops.min(OPS as u8) as usize];
            if let Some(n) = ops.iter().position(|o| o.status == OpStatus::Absent) {
                w.push(Write::Plan(n as u8));
            }
            w
        }
        _ => vec![Write::Checkpoint],
    }
}

fn dispatch_steps(cfg: &Config, s: &State, i: u8, p: &Proc, out: &mut Vec<Action>) {
    if p.unknown {
        return;
    }
    match p.claim {
        None => {
            let run_ok = !s.primary.run.terminal() || cfg.ablated(Ablation::ClaimWithoutRunStatus);
            let recovered = !s.restored || cfg.ablated(Ablation::ResumeBeforeRecovery);
            for n in 0..OPS as u8 {
                if s.primary.ops[n as usize].status == OpStatus::Prepared && run_ok && recovered {
                    out.push(Action::Claim(i, n));
                }
            }
        }
        Some(c) => {
            out.push(if c.called { Action::WriteResult(i) } else { Action::Call(i) });
            out.push(Action::GiveUp(i));
        }
    }
}

fn control_steps(cfg: &Config, s: &State, out: &mut Vec<Action>) {
    let recovered = !s.restored || cfg.ablated(Ablation::ResumeBeforeRecovery);
    for n in 0..OPS {
        let op = s.primary.ops[n];
        if op.status == OpStatus::Dispatching && op.until <= 0 {
            out.push(Action::MarkUnknown(n as u8));
        }
        if op.status == OpStatus::Unknown && cfg.caps[n] != Capability::None && recovered {
            out.push(Action::Reconcile(n as u8));
        }
    }
    if matches!(s.primary.run, RunStatus::Pending | RunStatus::Running) {
        out.push(Action::Cancel);
    }
    if cfg.replication == Replication::Async && s.standby.is_some_and(|r| r != s.primary) {
        out.push(Action::Replicate);
    }
    if s.budget.restores > 0 && s.backup.is_some() {
        out.push(Action::Restore);
    }
    if s.restored {
        out.push(Action::Recover);
    }
    if ticking(s) {
        out.push(Action::Tick);
    }
}

/// Whether a tick changes anything: some term has not yet run out to the floor.
fn ticking(s: &State) -> bool {
    let rows = std::iter::once(&s.primary).chain(s.standby.iter()).chain(s.backup.iter());
    rows.into_iter().any(|r| r.lease.expires > 0 || r.ops.iter().any(|o| o.until > 0))
}

fn fault_steps(cfg: &Config, s: &State, out: &mut Vec<Action>) {
    if s.budget.jumps > 0 {
        out.push(Action::JumpForward);
        out.push(Action::JumpBack);
    }
    for i in 0..PROCS as u8 {
        let p = &s.procs[i as usize];
        match p.cond {
            Cond::Running if cfg.pauses => out.push(Action::Pause(i)),
            Cond::Paused => out.push(Action::Resume(i)),
            _ => {}
        }
        if s.budget.kills > 0 && matches!(p.cond, Cond::Running | Cond::Paused) {
            out.push(Action::Kill(i));
        }
        if s.budget.aborts > 0 && p.cond == Cond::Running && p.txn != Txn::Idle {
            out.push(Action::Abort(i));
        }
    }
    let replaceable = s.procs[0].cond != Cond::Absent;
    if s.budget.restarts > 0 && s.procs[2].cond == Cond::Absent && replaceable {
        out.push(Action::Restart);
    }
    if cfg.replication != Replication::Off && s.budget.promotes > 0 && s.standby.is_some() {
        out.push(Action::Promote);
    }
}
