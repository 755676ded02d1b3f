//! The model's state: the database's rows (one run, its lease, the ledger's operations), the
//! database clock, a standby and a backup, every process with its condition and what it believes,
//! the tools' remote resources, the faults still allowed, and the ghost facts the properties read
//! (what has happened in this behaviour, which no row remembers).

use serde::{Deserialize, Serialize};

/// How many operations the ledger can hold (the configuration gives each a tool capability).
pub const OPS: usize = 2;
/// How many process slots: two workers and the replacement a restart may start.
pub const PROCS: usize = 3;
/// Epochs stop growing below this.
pub const EPOCHS: usize = 6;

/// A run's status (§04's CHECK).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum RunStatus {
    Pending,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl RunStatus {
    /// Succeeded, failed or cancelled: the run never moves again.
    pub fn terminal(self) -> bool {
        matches!(self, RunStatus::Succeeded | RunStatus::Failed | RunStatus::Cancelled)
    }
}

/// An operation's ledger status (§04's CHECK), or `Absent` before its intent is registered.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum OpStatus {
    Absent,
    Prepared,
    Dispatching,
    Unknown,
    Succeeded,
    FailedFinal,
    Cancelled,
}

/// An owner id: one session of one process name. With owner reuse, a name keeps one id.
pub type Owner = u8;

/// The lease row (§04 `worker_leases`). Times are kept relative to the database clock: `expires`
/// is `expires_at - now` in ticks (expired at 0 or below), floored where a backward clock jump can
/// no longer make the difference, so the model needs no absolute clock and no bound on it.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Lease {
    pub owner: Option<Owner>,
    pub epoch: u8,
    pub expires: i8,
    /// Which grant (takeover) wrote this owner and epoch: a ghost column the real table does not
    /// have, which tells a reissued epoch's holders apart.
    pub grant: u8,
}

impl Lease {
    /// `expires_at <= clock_timestamp()`.
    pub fn expired(&self) -> bool {
        self.expires <= 0
    }
}

/// One ledger row (§04 `tool_operations`): its status and claim. The row's revision is not kept:
/// every write of the model's ledger conditions on the status and the claim's owner, and a claim
/// session (a process slot) never claims twice, so the revision would decide nothing the owner
/// does not. Whether the operation has been unknown is kept, to tell convergence from a result.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct OpRow {
    pub status: OpStatus,
    /// The process slot whose claim session holds it.
    pub dispatch_owner: Option<u8>,
    /// `dispatch_until - now` in ticks, like the lease's expiry.
    pub until: i8,
    pub was_unknown: bool,
}

/// Every row the protocol reads and writes, as one server holds them.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Rows {
    pub run: RunStatus,
    pub revision: u8,
    pub lease: Lease,
    pub ops: [OpRow; OPS],
}

impl Rows {
    /// The database clock moves by `ticks` (negative: back); times stay within `[-floor, …]`.
    pub fn shift(&mut self, ticks: i8, floor: i8) {
        let f = |t: i8| (t - ticks).max(-floor);
        self.lease.expires = f(self.lease.expires);
        for op in self.ops.iter_mut() {
            op.until = f(op.until);
        }
        self.canonical();
    }

    /// Times no statement can read are set to 0, so states that differ only there are one state:
    /// an unowned lease's expiry (every takeover may take it) and the claim term of an operation
    /// that is not dispatching.
    pub fn canonical(&mut self) {
        if self.lease.owner.is_none() {
            self.lease.expires = 0;
        }
        for op in self.ops.iter_mut() {
            if op.status != OpStatus::Dispatching {
                op.until = 0;
                op.dispatch_owner = None;
            }
        }
    }

    /// The rows the short creating transaction leaves: a pending run, a free lease of epoch 0.
    pub fn created() -> Rows {
        let op = OpRow { status: OpStatus::Absent, dispatch_owner: None, until: 0, was_unknown: false };
        Rows {
            run: RunStatus::Pending,
            revision: 0,
            lease: Lease { owner: None, epoch: 0, expires: 0, grant: 0 },
            ops: [op; OPS],
        }
    }
}

/// A process's condition, as the faults leave it.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Cond {
    /// Not started yet (the restart slot).
    Absent,
    Running,
    Paused,
    Crashed,
}

/// What a protected transaction writes once its lease is validated (§06, §07, §09.1).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Write {
    /// pending → running.
    Start,
    /// A checkpoint of a running run.
    Checkpoint,
    /// A checkpoint that registers operation `n`'s intent (status prepared), in one transaction.
    Plan(u8),
    /// running → succeeded.
    Complete,
}

/// Where a process's protected transaction stands.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Txn {
    Idle,
    /// `SELECT … FOR UPDATE` on the lease row returned: the row lock is held (unless ablated).
    Locked,
    /// The lease was valid when checked; the CAS and the commit are next.
    Validated,
}

/// The lease a process believes it holds and the run revision it expects to write over.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Belief {
    pub owner: Owner,
    pub epoch: u8,
    pub expect: u8,
    /// The grant that answered its takeover (see [`Lease::grant`]).
    pub grant: u8,
}

/// A claim session's call: the operation and whether the remote has received the request.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Claim {
    pub op: u8,
    pub called: bool,
}

/// One worker process (it is also a dispatcher).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Proc {
    pub cond: Cond,
    /// How many sessions (acquires) this process has started.
    pub sessions: u8,
    pub lease: Option<Belief>,
    pub txn: Txn,
    /// Without the re-check: the takeover's condition held when first evaluated, and the
    /// statement is waiting for the row lock to apply it.
    pub acquire_checked: bool,
    /// A reply was lost: the process must read back from the primary before anything else.
    pub unknown: bool,
    pub claim: Option<Claim>,
}

impl Proc {
    pub fn new(cond: Cond) -> Proc {
        Proc { cond, sessions: 0, lease: None, txn: Txn::Idle, acquire_checked: false, unknown: false, claim: None }
    }
}

/// The faults a behaviour may still inject (each bound is the configuration's).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Budget {
    pub kills: u8,
    pub jumps: u8,
    pub promotes: u8,
    pub restores: u8,
    pub aborts: u8,
    pub lost_acks: u8,
    pub restarts: u8,
}

/// What has happened, which no row keeps: the properties judge these.
#[derive(Clone, Copy, Debug, Default, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Ghost {
    /// A run write committed by a writer that was not the lease row's owner and epoch then.
    pub stale_write: bool,
    /// A run write committed over a revision its writer had not read.
    pub lost_update: bool,
    /// An epoch was granted to a second owner.
    pub epoch_reissued: bool,
    /// A takeover committed while another process's validated commit was still open.
    pub overtook_commit: bool,
    /// A takeover took a lease that was held and unexpired when it committed.
    pub took_live_lease: bool,
    /// A renewal extended a lease that had already expired.
    pub renewed_expired: bool,
    /// A terminal run changed status.
    pub terminal_left: bool,
    /// An operation was claimed while its run was not pending or running.
    pub dead_run_claimed: bool,
    /// A result was written by a claim session that no longer held the claim.
    pub stale_result: bool,
    /// A promotion lost an epoch or a revision the old primary had committed (and acknowledged).
    pub ack_lost: bool,
    /// How many takeovers have committed, and the highest epoch any of them granted.
    pub grants: u8,
    pub max_epoch: u8,
}

/// The whole state of the modelled system.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct State {
    pub primary: Rows,
    /// The standby's copy (what it has received), if the configuration has one.
    pub standby: Option<Rows>,
    /// The backup a restore returns to: the rows as the run was created (the oldest backup, which
    /// loses the most).
    pub backup: Option<Rows>,
    /// Restored and not yet recovered: dispatch must wait for the recovery.
    pub restored: bool,
    /// The process slot whose open transaction holds the lease row lock.
    pub lock: Option<u8>,
    pub procs: [Proc; PROCS],
    /// Remote resources each operation's tool has created.
    pub resources: [u8; OPS],
    pub budget: Budget,
    pub ghost: Ghost,
}
