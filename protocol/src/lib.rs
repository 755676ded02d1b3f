//! Reference implementation of the lease + fencing + outbox protocol on PostgreSQL.
//!
//! This crate is what a team would embed in its workers: it owns no process, no harness and no
//! experiment. Every function takes a `sqlx::PgPool` and runs short READ COMMITTED transactions
//! on the writable primary, following the spec:
//!
//! - [`lease`]: acquire / takeover (epoch + 1, only when free or expired, on the database clock),
//!   renew (owner + epoch + unexpired), release (never zeroes the epoch);
//! - [`runs`]: create a task, its run and the run's lease in one transaction; the control-plane
//!   cancel; read-back of a run and its lease;
//! - [`commit`]: the protected state transition (row-lock the lease, validate owner/epoch/expiry,
//!   compare-and-set the revision, all in one short transaction) behind start / save / succeed / fail;
//! - [`heartbeat`]: a renewal loop with its own timeout that cancels the execution when a renewal is
//!   not confirmed;
//! - [`retry`]: SQLSTATE 40001 retries the whole short transaction under a budget;
//! - [`operation`]: operation_id and canonical request digests of side-effect intents;
//! - [`intents`]: the ledger writes inside the protected transaction (register an intent, require a
//!   verified result);
//! - [`outbox`]: intents registered inside the protected transaction, the dispatcher's claim and
//!   result writes, the reconciler, and advancing a run on a verified result;
//! - [`dispatch`]: the dispatcher and reconciler loops, over a [`dispatch::ToolAdapter`];
//! - [`metrics`]: the section-12 metrics in Prometheus text format (no ids as labels);
//! - [`notices`]: a success that came with "committed locally, might not be replicated" is an
//!   unknown outcome (the synchronous-replication cancel trap);
//! - [`restore`]: the operator's recovery after a restore from an old backup (epochs raised above
//!   anything handed out since, the ledger settled from the remote history, forks reported);
//! - [`mutant`]: named broken variants, reachable only in a build with the `mutants` feature;
//! - [`faults`]: named fault points where a harness can hold a transaction on a database barrier;
//! - [`secrets`]: secret fields of request bodies are masked to references before the ledger sees them;
//! - [`write_path`]: table statements, or only the fenced `fp_*` functions (the worker role's boundary).

pub mod commit;
pub mod dispatch;
pub mod error;
pub mod faults;
pub mod heartbeat;
pub mod ids;
pub mod intents;
pub mod lease;
pub mod metrics;
pub mod mutant;
pub mod notices;
pub mod operation;
pub mod outbox;
pub mod restore;
pub mod retry;
pub mod runs;
pub mod secrets;
pub mod sql;
mod tx;
pub mod write_path;

pub use commit::{protected_transition, Transition};
pub use error::{ProtocolError, RejectReason};
pub use faults::{Barrier, FaultPoint, FaultPoints};
pub use ids::{Lease, LeaseTerms, RunStatus, Ttl};
