//! The operations a randomized schedule is made of. Plain commands (acquire, save, plan, ...) sit
//! beside composite faults that reach the dangerous states in one step: a holder paused past its
//! expiry with or without a takeover, a write held on a database barrier across a takeover, two
//! writes in flight at one revision, a dispatch whose remote answer is lost, a result written after
//! its claim expired, a rogue session calling the fenced functions with forged terms.
//!
//! Composite operations name *roles* ("the current holder"), resolved when they run, so every one
//! of them applies to whatever state the schedule is in; one whose precondition is missing is a
//! logged no-op, which also keeps shrinking simple (any operation can be removed).
//!
//! The faults the composites inject are the harness's ([`fenceproof_harness::faults`]): each is
//! injected, recorded in the schedule's timeline and healed through the same guard the
//! experiments use, so a composite names the fault and the moment, never its mechanics.

use serde::{Deserialize, Serialize};

/// How many worker slots a schedule uses.
pub const WORKERS: usize = 3;

/// Which revision a write names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rev {
    /// The last revision this worker was told (it may be stale).
    Known,
    /// The run's current revision, read by the harness just before (a worker that re-read).
    Current,
    /// One below the current revision (a write computed from an old read).
    Stale,
}

/// The shape of the data a checkpoint or a tool request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Body {
    Plain,
    /// Non-integer, large and negative numbers.
    Numbers,
    /// Quotes, backslashes, control characters and a NUL-free escape soup.
    Escapes,
    /// Non-ASCII text (combining marks, emoji, right-to-left).
    Unicode,
    /// Nested arrays and objects, an empty key, null.
    Nested,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tool {
    Idem,
    Detid,
    Opquery,
    Plain,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Idem => "idem",
            Tool::Detid => "detid",
            Tool::Opquery => "opquery",
            Tool::Plain => "plain",
        }
    }
}

/// A fault the fake tools apply to their next create.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolFault {
    /// The resource is created, the answer is lost (the connection closes).
    DropAfterCommit,
    /// Nothing is created, the answer is 503.
    Error5xx,
    /// Nothing is created, no answer comes (the dispatcher's call times out).
    Hang,
}

impl ToolFault {
    /// The fake tools' name for it.
    pub fn mode(self) -> &'static str {
        fenceproof_harness::faults::tools::ToolFault::from(self).mode()
    }
}

/// The harness's tool fault it is (which arms it, records it and heals it).
impl From<ToolFault> for fenceproof_harness::faults::tools::ToolFault {
    fn from(f: ToolFault) -> Self {
        match f {
            ToolFault::DropAfterCommit => Self::DropAfterCommit,
            ToolFault::Error5xx => Self::Error5xx,
            ToolFault::Hang => Self::Hang,
        }
    }
}

/// Where a write is held on a database barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Point {
    AfterBegin,
    AfterLeaseValidated,
    BeforeCommit,
}

impl Point {
    pub fn name(self) -> &'static str {
        match self {
            Point::AfterBegin => "after_begin",
            Point::AfterLeaseValidated => "after_lease_validated",
            Point::BeforeCommit => "before_commit",
        }
    }
}

/// What a rogue session forges when it calls the fenced functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Forge {
    /// A checkpoint under the current owner with an older epoch.
    StaleEpochWrite,
    /// A checkpoint under an owner that never held the lease, at the current epoch.
    ForeignOwnerWrite,
    /// A renewal under the current owner with an older epoch.
    StaleEpochRenew,
    /// A release under the current owner with an older epoch.
    StaleEpochRelease,
    /// A renewal at the current epoch under an owner that never held the lease.
    ForeignOwnerRenew,
    /// A release at the current epoch under an owner that never held the lease.
    ForeignOwnerRelease,
    /// A renewal under the current owner and epoch of a lease that has expired (resurrection).
    ExpiredRenew,
    /// A result write for a claimed operation under a dispatcher that does not hold its claim.
    ForeignResult,
}

/// A write whose COMMIT loses its answer in [`Op::LostAnswer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LostWrite {
    Save,
    Succeed,
    Fail,
}

impl LostWrite {
    pub fn cmd(self) -> &'static str {
        match self {
            LostWrite::Save => "save",
            LostWrite::Succeed => "succeed",
            LostWrite::Fail => "fail",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Worker `w` acquires (or takes over) the lease and starts the run.
    Acquire {
        w: usize,
    },
    Renew {
        w: usize,
    },
    /// Worker `w` (the current holder instead, with `holder`) saves a checkpoint at the revision
    /// `at` names.
    Save {
        w: usize,
        #[serde(default)]
        holder: bool,
        at: Rev,
        body: Body,
    },
    /// The holder and worker `w` (the holder itself when `w` is the holder's slot: two commands
    /// of one process) each send a save at the current revision, both in flight at once.
    SaveTwice {
        w: usize,
    },
    Release {
        w: usize,
    },
    /// Complete the run at the revision the worker knows (the holder's, with `holder`).
    Succeed {
        w: usize,
        #[serde(default)]
        holder: bool,
    },
    /// Fail the run (a business failure) at the revision the worker knows.
    Fail {
        w: usize,
        #[serde(default)]
        holder: bool,
    },
    /// SIGSTOP worker `w`; its later commands queue in its stdin.
    Pause {
        w: usize,
    },
    /// SIGCONT worker `w`.
    Resume {
        w: usize,
    },
    /// SIGKILL worker `w` (its slot is respawned with a new owner on its next command).
    Kill {
        w: usize,
    },
    /// Wait until the lease expires on the database clock, when its holder cannot renew.
    Expire,
    /// The current holder is paused past its lease's expiry; worker `by` takes over (when given);
    /// the holder resumes, and its heartbeat's verdict is awaited. With `then_write` it then saves,
    /// renews, completes and releases as if nothing happened.
    StaleHolder {
        by: Option<usize>,
        then_write: bool,
    },
    /// The current holder is paused past its expiry; a new process in another slot, with the
    /// *same owner id* (a restarted host), takes over and is paused; the stale holder resumes (and
    /// with `then_write` saves and renews). While only the stale twin runs, nothing may commit.
    StaleTwin {
        then_write: bool,
    },
    /// The holder takes a fresh, longer term; the whole database server is frozen until the
    /// holder's renewal cannot have been answered in time, then thawed while the lease is still
    /// live. The holder must treat the unanswered renewal as lost: no renewals after the thaw
    /// beyond the one in flight.
    ServerFreeze,
    /// The current holder's save is held on a barrier at `point` while the holder is paused past
    /// its expiry and worker `by` takes over (that acquire may have to wait); then everything goes on.
    HeldAcrossTakeover {
        by: usize,
        point: Point,
    },
    /// Control-plane cancel of the run.
    /// With `plan_first`, the holder first plans a step for `tool` when nothing is prepared, so
    /// the cancel meets a prepared operation.
    Cancel {
        #[serde(default)]
        plan_first: bool,
        #[serde(default = "default_tool")]
        tool: Tool,
    },
    /// Control-plane retry: a new run of the same task (refused while one is live).
    Retry,
    /// Worker `w` plans a step (registers a tool intent) carrying `body`.
    Plan {
        w: usize,
        tool: Tool,
        body: Body,
    },
    /// The fake tools apply `fault` to the next create of every tool.
    ArmToolFault {
        fault: ToolFault,
    },
    /// One dispatcher pass (when nothing of the run is prepared, the holder first plans a step
    /// for `tool` carrying `body`), with `fault` armed in the tools for this pass when given.
    Dispatch {
        tool: Tool,
        body: Body,
        #[serde(default)]
        fault: Option<ToolFault>,
    },
    /// A dispatcher is held after its remote call, before its result write, until the claim
    /// expires; a second dispatcher reconciles and dispatches; the first then writes its result.
    /// With `kill`, the held dispatcher is SIGKILLed instead (the remote call succeeded, the caller
    /// died before recording it) and the reconciler must find out. When nothing of the run is
    /// prepared, the holder first plans a step for `tool`.
    /// With `cancel`, the control plane cancels the run while the dispatcher is held (the
    /// operation is dispatching: it must be kept, not cancelled).
    LateResult {
        #[serde(default)]
        kill: bool,
        #[serde(default)]
        cancel: bool,
        #[serde(default = "default_tool")]
        tool: Tool,
    },
    /// An operation left in flight while its run ends: the holder plans a step for `tool` when
    /// nothing is prepared, a dispatcher claims it, calls and is held before its result write (or,
    /// with `kill`, is SIGKILLed there); meanwhile `end` befalls the run or its lease; then the
    /// claim expires, a reconciler and a dispatcher pass run, and the held dispatcher writes its
    /// result on a run that ended or a lease no one holds.
    EndedInFlight {
        end: RunEnd,
        #[serde(default)]
        kill: bool,
        #[serde(default = "default_tool")]
        tool: Tool,
    },
    /// One reconciler pass.
    Reconcile,
    /// Worker `w` advances the run on the newest planned operation's result.
    Advance {
        w: usize,
    },
    /// A rogue session (not a worker, no lease) calls the fenced functions with forged terms.
    Rogue {
        forge: Forge,
    },
    /// The holder's `what` goes through its own wire-protocol proxy with its COMMIT's answer lost:
    /// committed with the acknowledgement dropped (`ack`), or never committed (the request
    /// dropped). Then the holder saves again without naming a revision: from what it read back.
    LostAnswer {
        ack: bool,
        what: LostWrite,
    },
    /// The server answers the holder's run writes with 40001 (`failures` times: once, a few, or
    /// more than any budget) while it saves without naming a revision; then healed.
    Serialization {
        failures: Failures,
    },
    /// The holder plans a step for `tool` whose request carries secrets at any depth (arrays,
    /// nested objects, several, unicode names): no value may reach a ledger row.
    PlanSecret {
        tool: Tool,
    },
    /// The holder plans a step for `tool` whose request carries secrets, and its proxy kills it the
    /// moment the plan's first durable commit is acknowledged (a crash between two durable steps);
    /// at the end a dispatcher sends what committed: every value must reach the tool.
    PlanCrash {
        tool: Tool,
    },
}

/// What befalls a run while one of its operations is in flight ([`Op::EndedInFlight`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunEnd {
    /// The holder completes the run.
    Succeed,
    /// The holder fails the run (a business failure).
    Fail,
    /// The holder releases its lease; the run stays running, its lease free.
    Release,
    /// The holder is paused until its lease lapses on the database clock.
    Lapse,
}

/// How many of the holder's attempts [`Op::Serialization`] answers with 40001.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Failures {
    Once,
    Several,
    Endless,
}

impl Failures {
    pub fn count(self) -> i64 {
        match self {
            Failures::Once => 1,
            Failures::Several => 3,
            Failures::Endless => fenceproof_harness::faults::serialization::ENDLESS,
        }
    }
}

impl Op {
    /// The worker slot a plain command goes to (composites resolve their roles themselves).
    pub fn worker(&self) -> Option<usize> {
        match self {
            Op::Acquire { w }
            | Op::Renew { w }
            | Op::Save { w, .. }
            | Op::Release { w }
            | Op::Succeed { w, .. }
            | Op::Fail { w, .. }
            | Op::Plan { w, .. }
            | Op::Advance { w } => Some(*w),
            _ => None,
        }
    }

    /// The kind's index in [`KINDS`] (for swarm weights): its serialized tag, so a new kind is
    /// named once, by its variant, and listed once, in [`KINDS`].
    pub fn kind(&self) -> usize {
        let v = serde_json::to_value(self).expect("an operation serializes");
        let name = v["op"].as_str().expect("every operation has its tag");
        KINDS.iter().position(|k| *k == name).expect("every kind is listed")
    }
}

fn default_tool() -> Tool {
    Tool::Idem
}

/// Every kind of operation, in a fixed order (the swarm draws one weight per kind).
pub const KINDS: &[&str] = &[
    "acquire",
    "renew",
    "save",
    "save_twice",
    "release",
    "succeed",
    "fail",
    "pause",
    "resume",
    "kill",
    "expire",
    "stale_holder",
    "stale_twin",
    "server_freeze",
    "held_across_takeover",
    "cancel",
    "retry",
    "plan",
    "arm_tool_fault",
    "dispatch",
    "late_result",
    "reconcile",
    "advance",
    "rogue",
    "lost_answer",
    "serialization",
    "plan_secret",
    "plan_crash",
    "ended_in_flight",
];
