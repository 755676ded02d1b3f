//! Trace validation: a recorded history (the oracle's commits, grouped into transactions) is
//! checked to be a behaviour of the model. Each committed change is mapped to the model action
//! whose effect it is — a takeover, renewal or release of the lease, a protected commit of the
//! run, a claim, result write, unknown marking or reconciliation of an operation, a control-plane
//! step — and that action's guard is checked on the rows the history had reached, with the
//! database's own clock: a statement's clock reading lies between its transaction's start and its
//! commit. Hidden steps (clock ticks, lock and validation reads, a refused CAS, a process's local
//! decisions) leave no commit and are allowed between any two. A change no action explains is
//! the validation's finding: the first one names its commit and what the model allows there.
//!
//! It is an independent judge beside the rule checks: it knows nothing of experiments, only the
//! model's actions, so it judges every row, schedule and control run the same way.

pub mod calls;
pub mod classify;
pub mod history;
pub mod judge;
pub mod refine;
pub mod report;
pub mod rows;
pub mod scene;

pub use history::{transactions, Call, Change, Env, Table, Txn};
pub use judge::{validate, validate_with};
pub use refine::{Outcome, Tried};
pub use report::{Report, Step, Unexplained};
