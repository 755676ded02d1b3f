//! fenceproof harness: everything an experiment needs except the experiment itself.
//!
//! Jepsen's split, in Rust:
//! - [`db`]: PostgreSQL backends (a native throwaway cluster started from the machine's binaries),
//!   the protocol's migrations, the oracle install, and a fresh database per experiment;
//! - [`procs`]: child processes in their own process groups, real signals, and a registry that
//!   kills whatever is left on every exit path;
//! - [`faults`]: faults with an inject and a heal step (pause/resume a process, a barrier held
//!   inside the database);
//! - [`record`]: the run folder, the harness's own timeline, and the oracle rows;
//! - [`check`]: one checker per invariant, each with its evidence;
//! - [`report`]: the pass/fail matrix in the terminal, JSON, Markdown and JUnit;
//! - [`lag`]: the harness's own scheduling delay, which its waits grant themselves and which
//!   tells a starved row (STARVED) from a hang;
//! - `testkit` (feature `testkit`, and in the harness's own unit tests): the fixtures every crate's
//!   tests share.
//!
//! The harness knows no particular experiment; those live in the `scenarios` crate.

pub mod check;
pub mod contract;
pub mod db;
pub mod error;
pub mod faults;
pub mod lag;
pub mod pressure;
pub mod procs;
pub mod record;
pub mod report;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod wait;

pub use error::HarnessError;
