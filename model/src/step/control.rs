//! The control plane (cancel), the database's replication, backup and restore, the clock, and
//! the faults on processes (pause, resume, kill, a replacement's start, a 40001).

use crate::action::Action;
use crate::config::Config;
use crate::state::{Cond, OpStatus, Proc, RunStatus, State, Txn};

use super::end_txn;

/// Applies a control, clock or fault action.
pub fn apply(cfg: &Config, s: &mut State, a: Action) -> bool {
    match a {
        Action::Cancel => cancel(s),
        Action::Replicate => s.standby = Some(s.primary),
        Action::Restore => restore(s),
        Action::Recover => recover(s),
        Action::Tick => shift(cfg, s, 1),
        Action::JumpForward | Action::JumpBack => {
            s.budget.jumps -= 1;
            shift(cfg, s, if a == Action::JumpForward { cfg.jump } else { -cfg.jump });
        }
        Action::Pause(i) => s.procs[i as usize].cond = Cond::Paused,
        Action::Resume(i) => s.procs[i as usize].cond = Cond::Running,
        Action::Kill(i) => kill(s, i),
        Action::Restart => {
            s.budget.restarts -= 1;
            s.procs[2] = Proc::new(Cond::Running);
        }
        Action::Abort(i) => {
            s.budget.aborts -= 1;
            end_txn(s, i);
        }
        Action::Promote => promote(s),
        _ => return false,
    }
    true
}

/// The database clock moves: every stored time, on every copy of the rows, is that much nearer.
fn shift(cfg: &Config, s: &mut State, ticks: i8) {
    let floor = cfg.jump * s.budget.jumps as i8;
    s.primary.shift(ticks, floor);
    if let Some(r) = s.standby.as_mut() {
        r.shift(ticks, floor);
    }
    if let Some(r) = s.backup.as_mut() {
        r.shift(ticks, floor);
    }
}

/// The authorized cancel: the run becomes cancelled (a committed write of the run, so its revision
/// rises like every other); prepared operations are never dispatched, in-flight and unknown ones
/// keep their status.
fn cancel(s: &mut State) {
    s.primary.run = RunStatus::Cancelled;
    s.primary.revision += 1;
    for op in s.primary.ops.iter_mut() {
        if op.status == OpStatus::Prepared {
            op.status = OpStatus::Cancelled;
        }
    }
}

fn kill(s: &mut State, i: u8) {
    s.budget.kills -= 1;
    end_txn(s, i);
    let p = &mut s.procs[i as usize];
    *p = Proc { cond: Cond::Crashed, sessions: p.sessions, ..Proc::new(Cond::Crashed) };
}

/// Open transactions on the old server end with it (their writers saw no commit).
fn abort_all(s: &mut State) {
    s.lock = None;
    for p in s.procs.iter_mut() {
        p.txn = Txn::Idle;
    }
}

/// The old primary is fenced; the standby, with what it has received, is the primary.
fn promote(s: &mut State) {
    s.budget.promotes -= 1;
    let Some(rows) = s.standby.take() else { return };
    if rows.lease.epoch < s.primary.lease.epoch || rows.revision < s.primary.revision {
        s.ghost.ack_lost = true;
    }
    s.primary = rows;
    abort_all(s);
}

/// The primary goes back to the backup; dispatch waits for the recovery.
fn restore(s: &mut State) {
    let Some(rows) = s.backup.take() else { return };
    s.budget.restores -= 1;
    s.primary = rows;
    if s.standby.is_some() {
        s.standby = Some(rows);
    }
    abort_all(s);
    s.restored = true;
}

/// After a restore: the workers of the lost history are stopped, the lease is fenced past every
/// epoch ever granted, and each operation the remote has a resource for is unknown until reconciled.
fn recover(s: &mut State) {
    for i in 0..s.procs.len() as u8 {
        let p = s.procs[i as usize];
        if p.cond != Cond::Absent && (p.lease.is_some() || p.claim.is_some()) {
            end_txn(s, i);
            s.procs[i as usize] = Proc { sessions: p.sessions, ..Proc::new(Cond::Crashed) };
        }
    }
    let l = &mut s.primary.lease;
    l.owner = None;
    l.epoch = l.epoch.max(s.ghost.max_epoch);
    l.expires = 0;
    for (n, op) in s.primary.ops.iter_mut().enumerate() {
        let remote = s.resources[n] > 0;
        let open = matches!(op.status, OpStatus::Prepared | OpStatus::Dispatching);
        if (remote && (open || op.status == OpStatus::Absent)) || op.status == OpStatus::Dispatching {
            op.status = OpStatus::Unknown;
            op.dispatch_owner = None;
            op.until = 0;
            op.was_unknown = true;
        }
    }
    s.restored = false;
}
