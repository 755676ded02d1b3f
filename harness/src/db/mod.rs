//! PostgreSQL backends and databases.
//!
//! A [`Backend`] is a running server the harness can reach with an admin URL. The native backend
//! ([`native::NativeCluster`]) is a throwaway cluster started from the machine's own binaries.
//! [`databases`] prepares a migrated template with the oracle installed and clones a fresh
//! database from it for each experiment, so experiment order never matters. [`restorable`] is a
//! server of either kind that can be backed up and restored (experiment N). [`patroni`] is a
//! Patroni cluster with etcd, for the failover rows where Patroni decides what is promoted.
//! [`connections`] treats the server's connections as a resource: what a refused one looks like,
//! and how many the rows may hold at once.

pub mod connections;
pub mod container;
pub mod databases;
pub mod docker;
pub mod docker_sweep;
pub mod external;
pub mod external_cleanup;
pub mod native;
pub mod patroni;
pub mod pgbin;
pub mod ports;
pub mod pristine;
pub mod privileges;
pub mod restorable;
pub mod team_functions;
pub mod team_schema;
pub mod writers;

/// A running PostgreSQL server under the harness's control.
pub trait Backend: Send + Sync {
    /// Short name for reports ("native", "external", ...).
    fn kind(&self) -> &'static str;
    /// URL of `dbname` on this server, as a superuser-capable admin.
    fn url_for(&self, dbname: &str) -> String;
    /// The server's version string, for the report.
    fn version(&self) -> String;
}
