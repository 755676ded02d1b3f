//! `fenceproof audit`: the stale-worker experiments run against real PostgreSQL job queues, each as
//! real worker processes of the library on the harness's own server, judged by the same kind of
//! oracles as the matrix (the fake tools' ledger counts executions; commit triggers on the
//! library's job table say whose write committed, and when). The reference protocol runs in the
//! same table as the control.
//!
//! - [`libraries`]: the table of libraries (adding one is an adapter file and a line there);
//! - [`experiments`]: the fixed set of experiments (how the first worker is held, when it comes
//!   back, how its execution ends);
//! - [`cell`]: one library under one experiment, from a fresh database to its checks;
//! - [`citations`]: every published verdict's file and function in the library's source, checked against the installed version;
//! - [`hold`]: a write of A held inside the database, and a pause placed outside a library's recovery lock;
//! - [`registry`]: a library's registry of live workers, and what a cell's note says from it;
//! - [`requeue`]: who claimed a job the stale worker's retry put back in the queue;
//! - [`takeover`]: how a cell knows B took the job: its START, or the system's own ownership record;
//! - [`report`]: the audit table in the terminal, JSON, Markdown and HTML;
//! - [`page_settings`]: each page's settings paragraph (what ran, the production defaults, the warnings);
//! - [`pages`]: the published pages (`docs/audit/*.md`) checked against the published results;
//! - [`rust_build`]: the Rust libraries' adapters, built (in a workspace of their own) when the audit runs;
//! - [`settings`]: the stall-recovery settings a run uses (fast, or each library's production defaults);
//! - [`pause`]: how long A was held, read from the cell's timeline.

pub mod cell;
pub mod citations;
pub mod experiments;
pub mod hold;
pub mod libraries;
pub mod page_settings;
pub mod pages;
pub mod pause;
pub mod registry;
pub mod report;
pub mod requeue;
pub mod rust_build;
pub mod settings;
pub mod takeover;
