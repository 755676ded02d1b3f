//! Faults, in one shape ([`Fault`], driven by [`inject`], healed through its [`Injected`] guard,
//! which records every step in the timeline and heals on drop):
//!
//! - [`pause::ProcessPause`]: stop a whole process, heal by resuming it: SIGSTOP or a cgroup
//!   freeze, the way a container runtime pauses a container.
//! - [`server_freeze::ServerFreeze`]: the whole database server stops at once — every backend,
//!   mid-query: native, the postmaster and its backends in one frozen cgroup; container,
//!   `docker pause`. Healed by thawing.
//! - [`barrier::DbBarrier`]: the harness holds an exclusive advisory lock; a transaction armed with
//!   the matching fault point waits on it inside the database. Healed by releasing the lock.
//! - [`row_hold::RowHold`]: a protocol row rewritten to itself in an open transaction, so a
//!   statement that touches it waits and re-checks its conditions when the harness commits.
//! - [`held_write::HeldWrite`]: one session's writes of a table held by a statement trigger before
//!   they touch a row, released after someone else took the rows over (the audit's held write).
//! - [`clock::ClockFault`]: the database server's own clock, frozen or jumped with libfaketime.
//! - [`tools::ArmedToolFault`]: the fake tools' next create fails, hangs or loses its answer.
//! - [`serialization::SerializationFailures`]: the server answers a worker's writes of a table
//!   with SQLSTATE 40001 (a set number of times), aborting each transaction as a real one would.
//! - [`proxy::Proxy`]'s faults, per worker: lost acknowledgements and requests, cuts, latency,
//!   partitions and statement barriers between the worker and the server.
//!
//! A new fault is one type implementing [`Fault`]; experiments and schedules inject it with
//! [`inject`] and get its timeline entries and its heal on drop for free.

pub mod barrier;
pub mod clock;
mod fault;
pub mod held_write;
pub mod pause;
pub mod proxy;
pub mod row_hold;
pub mod serialization;
pub mod server_freeze;
pub mod tools;

pub use barrier::DbBarrier;
pub use fault::{inject, Fault, Injected};
pub use pause::{Pause, PauseKind, ProcessPause};
pub use server_freeze::{ServerFreeze, ServerTarget};
