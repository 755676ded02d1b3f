//! The abstraction from recorded rows to the model's state (a refinement mapping, per run). Trace
//! validation asks the model itself whether a commit is one of its steps, so it needs the model's
//! state the commit was taken from; this module builds it from the rows the history had reached:
//!
//! - the writing session is process 0, any other session that holds the lease or a claim is
//!   process 1 (owner ids are the model's, one session each);
//! - revisions and epochs are kept relative (the run's revision before the step is 0; epochs keep
//!   their distance to the highest one granted), so a long history fits the model's small bound;
//! - a stored time is read against the statement's clock, which lies between its transaction's
//!   start and its commit: passed at every reading (term 0), ahead at every reading (term 1), or
//!   undecided, where both states are built and either may explain the step (the model's hidden
//!   clock ticks);
//! - the run's final words `succeeded` and `failed` are the model's one final status, and an
//!   operation's `succeeded` and `failed_final` its one settled status, when a step is compared:
//!   no guard of the model reads the difference (the remote's answer decides it).
//!
//! What the writer believes (its owner, epoch and expected revision, its claim) is chosen as the
//! step needs it: trace validation asks whether *some* belief makes the commit a step.

use super::history::{Change, Env, Table};
use super::rows::{Lease, Op, Rows, Run};
use crate::config::{Capability, Config, Replication};
use crate::state::{Belief, Budget, Claim, Cond, Ghost, OpRow, OpStatus, Owner, Proc, RunStatus, State, Txn};

/// The writing session's process slot, and the slot of any other session the rows name.
pub const WRITER: u8 = 0;
pub const OTHER: u8 = 1;

/// A stored term, in ticks of the model's relative clock: passed, or ahead of every reading.
const PASSED: i8 = 0;
const AHEAD: i8 = 1;

/// A revision or epoch the model's bound cannot hold (a value below the base, or far above it).
const OUT: u8 = u8::MAX;

/// The configuration trace validation asks the model with: the default bound's statements, room
/// for every session and revision a step reads (both relative), no faults to spend (the history
/// shows what happened), terms of two ticks so a renewal visibly moves a live term.
pub fn config(ablations: &[crate::config::Ablation]) -> Config {
    Config {
        workers: 2,
        ops: 1,
        replication: Replication::Off,
        ablations: ablations.to_vec(),
        ttl: 2,
        claim_ttl: 2,
        max_revision: 4,
        max_sessions: 4,
        symmetry: false,
        jumps: 0,
        promotes: 0,
        restores: 0,
        ..Config::default_bound()
    }
}

/// A statement's clock bounds: its transaction's start and commit, by the database's clock (µs).
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    pub began: i64,
    pub at: i64,
    /// False when the server's clock moved back: no time is proven.
    pub judged: bool,
}

impl Clock {
    /// The terms `t` may have had at the statement's reading.
    pub fn terms(&self, t: Option<i64>) -> Vec<i8> {
        match t {
            Some(t) if self.judged && t <= self.began => vec![PASSED],
            Some(t) if self.judged && t > self.at => vec![AHEAD],
            Some(_) => vec![PASSED, AHEAD],
            None => vec![PASSED],
        }
    }
    /// Whether `t` had surely passed when the transaction began.
    pub fn passed_at_start(&self, t: i64) -> bool {
        self.judged && t <= self.began
    }
}

/// Who a row names, seen from the step's writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Who {
    Nobody,
    Writer,
    Other,
}

/// What a step changes in one run's rows, in the model's terms: the model's step and the recorded
/// commit are the same step when these agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct View {
    pub run: RunStatus,
    /// How far the revision moved.
    pub revision: u8,
    pub owner: Who,
    pub epoch: u8,
    /// The lease's term was set anew (read only while the lease is owned).
    pub term_moved: bool,
    /// The operation the step acts on, its holder and whether its claim is live (both read only
    /// while it is dispatching).
    pub op: OpStatus,
    pub holder: Who,
    pub claim_live: bool,
}

/// The model's status words, with the final and settled words merged as the model compares them.
pub fn run_status(s: &str) -> Option<RunStatus> {
    Some(match s {
        "pending" => RunStatus::Pending,
        "running" => RunStatus::Running,
        "succeeded" | "failed" => RunStatus::Succeeded,
        "cancelled" => RunStatus::Cancelled,
        _ => return None,
    })
}

pub fn op_status(s: Option<&str>) -> Option<OpStatus> {
    Some(match s {
        None => OpStatus::Absent,
        Some("prepared") => OpStatus::Prepared,
        Some("dispatching") => OpStatus::Dispatching,
        Some("unknown") => OpStatus::Unknown,
        Some("succeeded" | "failed_final") => OpStatus::Succeeded,
        Some("cancelled") => OpStatus::Cancelled,
        Some(_) => return None,
    })
}

/// The rows of one run a step is judged on, before and after it.
#[derive(Clone, Debug, Default)]
pub struct RunRows {
    pub run: Option<Run>,
    pub lease: Option<Lease>,
    pub op: Option<Op>,
    /// Who holds the operation's claim, as the history shows it.
    pub holder: Option<Who>,
}

/// The run `c` bears on.
pub fn run_of(c: &Change) -> String {
    if c.table != Table::Operations {
        return c.key();
    }
    c.new.as_ref().or(c.old.as_ref()).map(Op::from).map(|o| o.run).unwrap_or_default()
}

impl RunRows {
    /// The rows of `run` (and of operation `op`) as `rows` holds them.
    pub fn of(rows: &Rows, run: &str, op: Option<&str>, writer: &str) -> RunRows {
        let o = op.and_then(|k| rows.ops.get(k)).cloned();
        let holder = o.as_ref().filter(|o| o.status == "dispatching").map(|o| {
            let claimer = op.and_then(|k| rows.claimer.get(k));
            if claimer.map(String::as_str) == Some(writer) || o.dispatch_owner.as_deref() == Some(writer) {
                Who::Writer
            } else {
                Who::Other
            }
        });
        RunRows { run: rows.runs.get(run).cloned(), lease: rows.leases.get(run).cloned(), op: o, holder }
    }

    /// These rows after change `c` of `writer`.
    pub fn after(&self, c: &Change) -> RunRows {
        let mut n = self.clone();
        match (c.table, c.new.as_ref()) {
            (Table::Runs, Some(v)) => n.run = Some(Run::from(v)),
            (Table::Leases, Some(v)) => n.lease = Some(Lease::from(v)),
            (Table::Operations, Some(v)) => {
                let op = Op::from(v);
                n.holder = (op.status == "dispatching").then(|| match &self.op {
                    Some(o) if o.status == "dispatching" => self.holder.unwrap_or(Who::Other),
                    _ if op.dispatch_owner.is_some() => Who::Writer,
                    _ => Who::Nobody,
                });
                n.op = Some(op);
            }
            _ => {}
        }
        n
    }
}

/// The epoch base: the lease's epoch keeps its distance to the highest one granted (up to two,
/// which is all a takeover's guard and the epoch invariant read), and is never below the base
/// (after a rollback it may lie far below the highest).
fn epoch_base(rows: &RunRows, max_epoch: i64) -> i64 {
    let lease = rows.lease.as_ref().map_or(0, |l| l.epoch);
    lease.min(max_epoch.max(lease) - 2).max(0)
}

fn rel(v: i64, base: i64) -> u8 {
    if v < base || v - base >= OUT as i64 {
        OUT
    } else {
        (v - base) as u8
    }
}

/// The highest epoch granted, relative (the invariant reads only whether a new epoch exceeds it).
fn rel_max(max_epoch: i64, base: i64) -> u8 {
    (max_epoch - base).clamp(0, OUT as i64 - 1) as u8
}

/// The recorded rows' view after a step from `pre` to `post`.
pub fn observed(pre: &RunRows, post: &RunRows, max_epoch: i64, writer: &str, clock: &Clock) -> Option<View> {
    let base = epoch_base(pre, max_epoch);
    let who = |o: &Option<String>| match o {
        None => Who::Nobody,
        Some(o) if o == writer => Who::Writer,
        Some(_) => Who::Other,
    };
    let lease = post.lease.as_ref();
    let owner = lease.map_or(Who::Nobody, |l| who(&l.owner));
    let op = op_status(post.op.as_ref().map(|o| o.status.as_str()))?;
    let dispatching = op == OpStatus::Dispatching;
    Some(View {
        run: post.run.as_ref().map_or(Some(RunStatus::Pending), |r| run_status(&r.status))?,
        revision: match (&pre.run, &post.run) {
            (Some(a), Some(b)) => rel(b.revision, a.revision),
            _ => 0,
        },
        owner,
        epoch: lease.map_or(0, |l| rel(l.epoch, base)),
        term_moved: owner != Who::Nobody && pre.lease.as_ref().map(|l| l.expires) != lease.map(|l| l.expires),
        op,
        holder: if dispatching { post.holder.unwrap_or(Who::Nobody) } else { Who::Nobody },
        claim_live: dispatching && post.op.as_ref().and_then(|o| o.until).is_some_and(|u| !clock.passed_at_start(u)),
    })
}

/// The model's view after its step from `pre` to `post`.
pub fn modelled(cfg: &Config, pre: &State, post: &State) -> View {
    let who = |o: Option<Owner>| match o {
        None => Who::Nobody,
        Some(id) if slot_of(id) == WRITER => Who::Writer,
        Some(_) => Who::Other,
    };
    let (a, b) = (&pre.primary, &post.primary);
    let op = b.ops[0];
    let dispatching = op.status == OpStatus::Dispatching;
    View {
        run: match b.run {
            RunStatus::Failed => RunStatus::Succeeded,
            s => s,
        },
        revision: b.revision.wrapping_sub(a.revision),
        owner: who(b.lease.owner),
        epoch: b.lease.epoch,
        term_moved: b.lease.owner.is_some() && a.lease.expires != b.lease.expires,
        op: match op.status {
            OpStatus::FailedFinal => OpStatus::Succeeded,
            s => s,
        },
        holder: if dispatching {
            who(op.dispatch_owner.map(|i| crate::step::owner_id(cfg, i, 1)))
        } else {
            Who::Nobody
        },
        claim_live: dispatching && op.until > 0,
    }
}

/// The process slot an owner id belongs to (the model's `owner_id` is slot × 16 + session).
fn slot_of(id: Owner) -> u8 {
    id / 16
}

/// What the writer is taken to hold when a step is asked of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holds {
    /// Nothing: it is about to take the lease or a claim.
    Nothing,
    /// The lease as the row names it (its owner id, the row's epoch, the run's revision read).
    Lease,
    /// A claim on the operation, its call made or not.
    Claim { called: bool },
    /// Nothing, its takeover's condition already evaluated and the statement waiting for the row
    /// (a state only a model without PostgreSQL's re-check reaches: with it, the takeover is
    /// evaluated again on the committed row).
    Checked,
}

/// The model's states `pre` may be, with the writer holding `holds`: one per reading of the
/// lease's and the claim's terms the clock leaves open.
pub fn states(
    cfg: &Config,
    pre: &RunRows,
    max_epoch: i64,
    writer: &str,
    holds: Holds,
    clock: &Clock,
) -> Option<Vec<State>> {
    let base = epoch_base(pre, max_epoch);
    let run = pre.run.as_ref().map_or(Some(RunStatus::Pending), |r| run_status(&r.status))?;
    let lease = pre.lease.clone().unwrap_or(Lease { owner: None, epoch: 0, expires: i64::MIN });
    let epoch = rel(lease.epoch, base);
    let op_word = pre.op.as_ref().map(|o| o.status.as_str());
    let op = op_status(op_word)?;
    if epoch == OUT {
        return None;
    }
    let owner_slot = match &lease.owner {
        None => None,
        Some(o) if o == writer => Some(WRITER),
        Some(_) => Some(OTHER),
    };
    let mut out = Vec::new();
    for term in clock.terms(lease.owner.as_ref().map(|_| lease.expires)) {
        for until in clock.terms(pre.op.as_ref().and_then(|o| o.until).filter(|_| op == OpStatus::Dispatching)) {
            let mut s = base_state(run, op, rel_max(max_epoch, base));
            s.primary.lease = crate::state::Lease {
                owner: owner_slot.map(|i| crate::step::owner_id(cfg, i, 1)),
                epoch,
                expires: term,
                grant: 0,
            };
            if op == OpStatus::Dispatching {
                let slot = if pre.holder == Some(Who::Writer) { WRITER } else { OTHER };
                s.primary.ops[0].dispatch_owner = Some(slot);
                s.primary.ops[0].until = until;
            }
            s.primary.ops[0].was_unknown = op_word == Some("unknown");
            believe(cfg, &mut s, owner_slot, holds);
            s.primary.canonical();
            out.push(s);
        }
    }
    Some(out)
}

fn base_state(run: RunStatus, op: OpStatus, max_epoch: u8) -> State {
    let mut rows = crate::state::Rows::created();
    rows.run = run;
    rows.ops[0] = OpRow { status: op, dispatch_owner: None, until: 0, was_unknown: false };
    let mut procs = [Proc::new(Cond::Absent); crate::state::PROCS];
    procs[WRITER as usize] = Proc { sessions: 1, ..Proc::new(Cond::Running) };
    procs[OTHER as usize] = Proc { sessions: 1, ..Proc::new(Cond::Running) };
    State {
        primary: rows,
        standby: None,
        backup: None,
        restored: false,
        lock: None,
        procs,
        resources: [0; crate::state::OPS],
        budget: Budget { kills: 0, jumps: 0, promotes: 0, restores: 0, aborts: 0, lost_acks: 0, restarts: 0 },
        ghost: Ghost { max_epoch, ..Ghost::default() },
    }
}

/// The processes' beliefs: the lease's owner believes in the row's epoch at the revision it read;
/// the writer holds what the step asks of it.
fn believe(cfg: &Config, s: &mut State, owner_slot: Option<u8>, holds: Holds) {
    let l = s.primary.lease;
    let belief = |slot: u8| Belief { owner: crate::step::owner_id(cfg, slot, 1), epoch: l.epoch, expect: 0, grant: 0 };
    if owner_slot == Some(OTHER) {
        s.procs[OTHER as usize].lease = Some(belief(OTHER));
    }
    let w = &mut s.procs[WRITER as usize];
    match holds {
        Holds::Nothing => {}
        Holds::Lease => w.lease = Some(belief(WRITER)),
        Holds::Claim { called } => w.claim = Some(Claim { op: 0, called }),
        Holds::Checked => w.acquire_checked = true,
    }
    w.txn = Txn::Idle;
}

/// The tool capability of the operation a change acts on (an unnamed tool: the most permissive).
pub fn capability(c: &Change, env: &Env) -> Capability {
    let tool = c.old.as_ref().or(c.new.as_ref()).and_then(|v| v.get("tool_name")).and_then(serde_json::Value::as_str);
    tool.and_then(|t| env.capabilities.get(t).copied()).unwrap_or(Capability::Idempotent)
}
