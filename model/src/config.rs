//! What a model check explores: the bound (clock, revisions, sessions, faults), the tools'
//! capabilities, the replication mode, and the ablations that remove one thing the protocol relies
//! on (a row lock, a re-check, a condition of a statement) to show what breaks without it.

use serde::Serialize;

/// What a tool lets the reconciler learn about an operation whose outcome is unknown (§09).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, Serialize)]
pub enum Capability {
    /// A durable idempotency key: a retry with the same key never makes a second resource.
    Idempotent,
    /// A deterministic resource id: a create of the same id finds the one that exists.
    DeterministicId,
    /// A query by operation_id: the remote's acceptance record says whether it ran.
    Query,
    /// Neither: unknown stays unknown until a person decides.
    None,
}

/// How the standby receives the primary's commits (§10).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, Serialize)]
pub enum Replication {
    /// No standby: promotion is not offered.
    Off,
    /// A commit is acknowledged only once the standby has it.
    Sync,
    /// The standby receives commits later, whenever it catches up.
    Async,
}

/// One thing the protocol relies on, removed.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Ablation {
    /// The protected commit does not lock the lease row (§06's `FOR UPDATE`).
    NoRowLock,
    /// A takeover waiting on the lease row applies the condition it evaluated before waiting
    /// instead of re-evaluating it on the committed row (READ COMMITTED's re-check, §05.1).
    NoRecheck,
    /// The protected commit validates owner and expiry but not the epoch.
    NoEpochCheck,
    /// The checkpoint's UPDATE does not compare the revision (§06's CAS).
    NoRevisionCas,
    /// A release sets the epoch back to 0 (§05.2 says it must not).
    ReleaseZeroesEpoch,
    /// A renewal does not require the lease to be unexpired.
    RenewWithoutExpiry,
    /// The claim does not join the run's status (§09.2).
    ClaimWithoutRunStatus,
    /// The result write does not compare the claim's owner and revision (§09.3).
    ResultWithoutClaimCheck,
    /// Workers and dispatch resume after a restore without the recovery step (§10).
    ResumeBeforeRecovery,
}

/// The bound and the variant of the protocol one check explores.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// Worker processes that start running (1 or 2); a third slot is the restart's.
    pub workers: u8,
    /// How many of the ledger's operations the run plans (0 leaves the outbox out).
    pub ops: u8,
    /// The tool capability of each operation.
    pub caps: [Capability; crate::state::OPS],
    pub replication: Replication,
    /// A restarted process keeps the owner id of the one it replaces.
    pub owner_reuse: bool,
    pub ablations: Vec<Ablation>,
    /// The lease term and the claim term, in ticks.
    pub ttl: i8,
    pub claim_ttl: i8,
    /// A clock jump moves the database clock by this many ticks, either way.
    pub jump: i8,
    /// Revisions, sessions per process and epochs stop growing at these.
    pub max_revision: u8,
    pub max_sessions: u8,
    /// Whether SIGSTOP/SIGCONT are explored. In the model's interleaving semantics a paused
    /// process's behaviours are a subset of a running one's (a running process may also take no
    /// step), so pausing reaches no new state for the invariants; trace validation applies the
    /// pauses a run recorded.
    pub pauses: bool,
    /// Explore the two workers as interchangeable (the default bound; counterexamples then name
    /// workers after the renaming, so the weak spots' small bounds keep it off).
    pub symmetry: bool,
    /// Faults: each at most this many times in one behaviour.
    pub kills: u8,
    pub jumps: u8,
    pub promotes: u8,
    pub restores: u8,
    pub aborts: u8,
    pub lost_acks: u8,
    pub restarts: u8,
}

impl Config {
    /// The default bound: two workers, one run, an idempotent tool and a tool with neither
    /// idempotency nor query, a synchronous standby and one promotion, one clock jump (either
    /// way), one restore. The processes' faults are [`Config::process_faults`]'s bound.
    pub fn default_bound() -> Config {
        Config {
            workers: 2,
            ops: 2,
            caps: [Capability::Idempotent, Capability::None],
            replication: Replication::Sync,
            owner_reuse: false,
            ablations: Vec::new(),
            ttl: 1,
            claim_ttl: 1,
            jump: 2,
            max_revision: 3,
            max_sessions: 2,
            pauses: false,
            symmetry: true,
            kills: 0,
            jumps: 1,
            promotes: 1,
            restores: 1,
            aborts: 0,
            lost_acks: 0,
            restarts: 0,
        }
    }

    /// The bound the model's paths are searched in (`coverage::paths`): the default bound's
    /// processes and operations, room for every commit of a run that plans both operations and
    /// then completes or checkpoints beside them, a kill, and none of the faults a driver of the
    /// protocol's statements cannot play (promotion, restore, clock jumps, 40001, lost replies).
    pub fn driver_bound() -> Config {
        Config {
            max_revision: 5,
            promotes: 0,
            jumps: 0,
            restores: 0,
            kills: 1,
            replication: Replication::Off,
            ..Config::default_bound()
        }
    }

    /// The processes' faults: a kill, a lost reply and a 40001, without the
    /// database's faults (a smaller space for the larger process state). A replacement's start is
    /// explored by the owner-reuse weak spot.
    pub fn process_faults() -> Config {
        Config { promotes: 0, jumps: 0, restores: 0, kills: 1, lost_acks: 1, aborts: 1, ..Config::default_bound() }
    }

    /// Whether workers 0 and 1 are explored as interchangeable (see [`crate::symmetry`]): asked
    /// for, and nothing names worker 0 in particular.
    pub fn symmetric(&self) -> bool {
        self.symmetry && self.restarts == 0 && !self.owner_reuse && self.workers == 2
    }

    /// Whether `a` is removed in this check.
    pub fn ablated(&self, a: Ablation) -> bool {
        self.ablations.contains(&a)
    }
}

impl Config {
    /// The bound in one line, as `fenceproof model check` prints it.
    pub fn describe(&self) -> String {
        let caps: Vec<String> =
            self.caps.iter().take(self.ops as usize).map(|c| format!("{c:?}").to_lowercase()).collect();
        let mut faults = Vec::new();
        for (n, what) in [
            (self.promotes, "promotion"),
            (self.jumps, "clock jump"),
            (self.restores, "restore"),
            (self.kills, "kill"),
            (self.lost_acks, "lost reply"),
            (self.aborts, "40001"),
            (self.restarts, "restart"),
        ] {
            if n > 0 {
                faults.push(format!("{n} {what}"));
            }
        }
        let ablations: Vec<String> = self.ablations.iter().map(|a| format!("{a:?}")).collect();
        format!(
            "{} workers, 1 run, {} operations ({}), {:?} replication{}; faults: {}; lease {} ticks, revisions ≤ {}, {} sessions per worker{}",
            self.workers,
            self.ops,
            caps.join(", "),
            self.replication,
            if self.owner_reuse { ", owner ids reused" } else { "" },
            if faults.is_empty() { "none".to_string() } else { faults.join(", ") },
            self.ttl,
            self.max_revision,
            self.max_sessions,
            if ablations.is_empty() { String::new() } else { format!("; without: {}", ablations.join(", ")) },
        )
    }
}
