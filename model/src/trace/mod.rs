//! Trace validation: a recorded history (the oracle's commits, grouped into transactions) is
//! checked to be a behaviour of the model, by the model itself. Each committed change is abstracted
//! to the model's state it was taken from ([`scene`]), and the model's own `enabled`, `step::next`
//! and invariants say which of its actions, taken there, leaves the rows as the commit did
//! ([`refine`]); no guard is written here a second time. Time is read from the database's own
//! clock: a statement's reading lies between its transaction's start and its commit. Hidden steps
//! (clock ticks, lock and validation reads, a refused CAS, a process's local decisions) leave no
//! commit. A change no action explains is the validation's finding, with each action asked and the
//! model's answer, and the rule the model names for it.
//!
//! It judges beside the rule checks and knows nothing of experiments, so it judges every row,
//! schedule and control run the same way.

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
