//! The run's history: the report folder, the harness's own timeline, and the oracle rows.

pub mod audit_commits;
pub mod ledger;
pub mod metrics;
pub mod oracle;
pub mod run_dir;
pub mod timeline;
