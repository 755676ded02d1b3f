//! The operations a randomized schedule is made of, and the proptest strategy that generates them.

use proptest::prelude::*;
use serde::{Deserialize, Serialize};

/// How many worker slots a schedule uses.
pub const WORKERS: usize = 3;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Worker `w` acquires (or takes over) the lease.
    Acquire {
        w: usize,
    },
    Renew {
        w: usize,
    },
    /// Save at the revision the worker knows.
    Save {
        w: usize,
    },
    /// Save at the run's current revision (a stale worker that re-read the row).
    SaveCurrent {
        w: usize,
    },
    Release {
        w: usize,
    },
    /// Complete the run (succeed) at the revision the worker knows.
    Succeed {
        w: usize,
    },
    /// SIGSTOP worker `w`.
    Pause {
        w: usize,
    },
    /// SIGCONT worker `w`.
    Resume {
        w: usize,
    },
    /// SIGKILL worker `w` (the slot is respawned with a new owner on its next acquire).
    Kill {
        w: usize,
    },
    /// Wait until the lease expires on the database clock, when its holder cannot renew.
    Expire,
    /// Control-plane cancel of the run.
    Cancel,
    /// Worker `w` plans the next step (registers a tool intent).
    Plan {
        w: usize,
    },
    /// One dispatcher pass.
    Dispatch,
    /// One reconciler pass.
    Reconcile,
    /// Worker `w` advances the run on the newest planned operation's result.
    Advance {
        w: usize,
    },
}

impl Op {
    pub fn worker(&self) -> Option<usize> {
        match self {
            Op::Acquire { w }
            | Op::Renew { w }
            | Op::Save { w }
            | Op::SaveCurrent { w }
            | Op::Release { w }
            | Op::Succeed { w }
            | Op::Pause { w }
            | Op::Resume { w }
            | Op::Kill { w }
            | Op::Plan { w }
            | Op::Advance { w } => Some(*w),
            _ => None,
        }
    }
}

pub fn op() -> impl Strategy<Value = Op> {
    let w = 0..WORKERS;
    prop_oneof![
        4 => w.clone().prop_map(|w| Op::Acquire { w }),
        2 => w.clone().prop_map(|w| Op::Renew { w }),
        4 => w.clone().prop_map(|w| Op::Save { w }),
        2 => w.clone().prop_map(|w| Op::SaveCurrent { w }),
        1 => w.clone().prop_map(|w| Op::Release { w }),
        1 => w.clone().prop_map(|w| Op::Succeed { w }),
        2 => w.clone().prop_map(|w| Op::Pause { w }),
        2 => w.clone().prop_map(|w| Op::Resume { w }),
        1 => w.clone().prop_map(|w| Op::Kill { w }),
        2 => Just(Op::Expire),
        1 => Just(Op::Cancel),
        2 => w.clone().prop_map(|w| Op::Plan { w }),
        2 => Just(Op::Dispatch),
        1 => Just(Op::Reconcile),
        1 => w.prop_map(|w| Op::Advance { w }),
    ]
}

/// A schedule: 6 to 24 operations.
pub fn schedule() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 6..24)
}
