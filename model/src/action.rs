//! The model's actions: the worker contract's commands at the grain of committed transactions and
//! observable events, the control plane's and the reconciler's steps, and the faults. Each action
//! that writes a row is one commit the oracle records; the clock's ticks and a process's local
//! decisions are the hidden steps.

use serde::{Deserialize, Serialize};

use crate::state::Write;

/// One step of the modelled system; `u8` fields name a process slot or an operation.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Action {
    /// The takeover UPDATE (§05.1), applied on the committed row once the lease row is free.
    Acquire(u8),
    /// Without the re-check: the takeover's condition evaluated before waiting for the row.
    AcquireCheck(u8),
    /// The renewal UPDATE (§05.2); zero rows drop the process's lease and cancel its execution.
    Renew(u8),
    /// The release UPDATE (§05.2).
    Release(u8),
    /// `BEGIN; SELECT … FOR UPDATE` on the lease row.
    Lock(u8),
    /// The validation SELECT (owner, epoch, unexpired by the database clock).
    Validate(u8),
    /// The run CAS of this write, and the commit.
    Commit(u8, Write),
    /// The same commit, whose reply the process never receives.
    CommitLostReply(u8, Write),
    /// After a lost reply: read the run and lease back from the primary.
    ReadBack(u8),
    /// The dispatcher's claim (§09.2) of operation `.1`.
    Claim(u8, u8),
    /// The remote call, after the claim committed.
    Call(u8),
    /// The result write (§09.3).
    WriteResult(u8),
    /// The claim session gives its own claim up as unknown: its call timed out or answered no
    /// fact (§07's "remote timeout", §09.3). Without the call, the request was lost on its way.
    GiveUp(u8),
    /// The reconciler marks an expired claim unknown (§09.2).
    MarkUnknown(u8),
    /// The reconciler converges an unknown operation by what its tool allows (§09.3).
    Reconcile(u8),
    /// The control plane cancels the run; prepared operations become cancelled (§09.3).
    Cancel,
    /// The asynchronous standby catches up with the primary.
    Replicate,
    /// The primary is restored from the backup.
    Restore,
    /// After a restore: stale leases fenced and the ledger reconciled with the remote's history.
    Recover,
    /// The database clock advances one tick.
    Tick,
    /// The database clock jumps forward, or back, by more than a lease term.
    JumpForward,
    JumpBack,
    /// SIGSTOP, SIGCONT and SIGKILL of a process.
    Pause(u8),
    Resume(u8),
    Kill(u8),
    /// A replacement for process 0 starts in slot 2 (process 0 may only be paused).
    Restart,
    /// A 40001 aborts the process's open transaction whole.
    Abort(u8),
    /// The old primary is fenced and the standby promoted.
    Promote,
}

impl Action {
    /// The process slot that takes this step; `None` for the reconciler's, the control plane's,
    /// the clock's and the database's.
    pub fn process(&self) -> Option<u8> {
        match *self {
            Action::Acquire(i)
            | Action::AcquireCheck(i)
            | Action::Renew(i)
            | Action::Release(i)
            | Action::Lock(i)
            | Action::Validate(i)
            | Action::Commit(i, _)
            | Action::CommitLostReply(i, _)
            | Action::ReadBack(i)
            | Action::Claim(i, _)
            | Action::Call(i)
            | Action::WriteResult(i)
            | Action::GiveUp(i)
            | Action::Pause(i)
            | Action::Resume(i)
            | Action::Kill(i)
            | Action::Abort(i) => Some(i),
            _ => None,
        }
    }

    /// A short name of the action's kind, without its arguments (coverage groups by it).
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Acquire(_) => "acquire",
            Action::AcquireCheck(_) => "acquire-check",
            Action::Renew(_) => "renew",
            Action::Release(_) => "release",
            Action::Lock(_) => "lock",
            Action::Validate(_) => "validate",
            Action::Commit(_, _) => "commit",
            Action::CommitLostReply(_, _) => "commit-lost-reply",
            Action::ReadBack(_) => "read-back",
            Action::Claim(_, _) => "claim",
            Action::Call(_) => "call",
            Action::WriteResult(_) => "write-result",
            Action::GiveUp(_) => "give-up-unknown",
            Action::MarkUnknown(_) => "mark-unknown",
            Action::Reconcile(_) => "reconcile",
            Action::Cancel => "cancel",
            Action::Replicate => "replicate",
            Action::Restore => "restore",
            Action::Recover => "recover",
            Action::Tick => "tick",
            Action::JumpForward => "jump-forward",
            Action::JumpBack => "jump-back",
            Action::Pause(_) => "pause",
            Action::Resume(_) => "resume",
            Action::Kill(_) => "kill",
            Action::Restart => "restart",
            Action::Abort(_) => "abort-40001",
            Action::Promote => "promote",
        }
    }
}
