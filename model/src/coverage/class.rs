//! A transition's class: what an action's guard and the rules read in the state it is taken from.
//! The lease (free, live or expired), the run's status, the status of the operation the action acts
//! on (none for a lease or run action), whether any other operation is in flight (dispatching or
//! unknown), whether another process's validated commit is open and whether a process still believes in an epoch
//! the lease has left behind. [`Facts::class`] is the one function both the model's walk and trace
//! validation call; [`Facts::fine`] keeps the first walk's finer class (both operations' statuses,
//! whichever the action acts on) for `model check --transitions`.

use serde::Serialize;

use crate::state::{OpStatus, RunStatus, OPS};

/// The lease as the rules see it.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum LeaseClass {
    Free,
    Live,
    Expired,
}

impl LeaseClass {
    /// An owned lease is live until it expires; an unowned one is free, expired or not.
    pub fn of(owned: bool, expired: bool) -> LeaseClass {
        match (owned, expired) {
            (false, _) => LeaseClass::Free,
            (true, false) => LeaseClass::Live,
            (true, true) => LeaseClass::Expired,
        }
    }
}

/// What the rules read where an action is taken: the class of a transition, the denominator's.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Class {
    pub lease: LeaseClass,
    pub run: RunStatus,
    /// The status of the operation the action acts on; `None` for a lease or run action.
    pub op: Option<OpStatus>,
    /// Some other operation of the run is dispatching or unknown.
    pub other_in_flight: bool,
    /// Another process's (transaction's) validated commit of the run is open.
    pub validated_open: bool,
    pub stale_believer: bool,
}

/// The finer class: both operations' statuses, whichever the action acts on.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Fine {
    pub lease: LeaseClass,
    pub run: RunStatus,
    pub ops: [OpStatus; OPS],
    pub validated_open: bool,
    pub stale_believer: bool,
}

/// The facts a class is made of, as the model's state or a recorded history's rows give them.
pub struct Facts<'a> {
    pub lease: LeaseClass,
    pub run: RunStatus,
    /// Every operation of the run, in the order the run planned them.
    pub ops: &'a [OpStatus],
    /// Which of `ops` the action acts on; `None` for a lease or run action.
    pub target: Option<usize>,
    pub validated_open: bool,
    pub stale_believer: bool,
}

/// A claimed operation whose outcome is not settled: dispatching or unknown.
pub fn in_flight(s: OpStatus) -> bool {
    matches!(s, OpStatus::Dispatching | OpStatus::Unknown)
}

impl Facts<'_> {
    /// The class of a transition taken from these facts.
    pub fn class(&self) -> Class {
        let others = self.ops.iter().enumerate().filter(|(n, _)| Some(*n) != self.target);
        Class {
            lease: self.lease,
            run: self.run,
            op: self.target.map(|n| self.ops.get(n).copied().unwrap_or(OpStatus::Absent)),
            other_in_flight: others.map(|(_, s)| *s).any(in_flight),
            validated_open: self.validated_open,
            stale_believer: self.stale_believer,
        }
    }

    /// The finer class: the first two operations' statuses (absent when the run has fewer).
    pub fn fine(&self) -> Fine {
        let mut ops = [OpStatus::Absent; OPS];
        for (slot, s) in ops.iter_mut().zip(self.ops) {
            *slot = *s;
        }
        Fine {
            lease: self.lease,
            run: self.run,
            ops,
            validated_open: self.validated_open,
            stale_believer: self.stale_believer,
        }
    }
}

fn lower<T: std::fmt::Debug>(t: T) -> String {
    format!("{t:?}").to_lowercase()
}

/// A transition as one line (a line of `transitions.txt`): the class's fields and the kind.
pub fn key(c: &Class, kind: &str) -> String {
    let op = c.op.map(lower).unwrap_or_else(|| "-".into());
    format!(
        "lease={} run={} op={op} other-in-flight={} open={} stale={} | {kind}",
        lower(c.lease),
        lower(c.run),
        c.other_in_flight,
        c.validated_open,
        c.stale_believer
    )
}

/// A fine transition as one line.
pub fn fine_key(c: &Fine, kind: &str) -> String {
    let ops: Vec<String> = c.ops.iter().map(lower).collect();
    format!(
        "lease={} run={} ops={} open={} stale={} | {kind}",
        lower(c.lease),
        lower(c.run),
        ops.join(","),
        c.validated_open,
        c.stale_believer
    )
}
