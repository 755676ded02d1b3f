//! The YAML a Patroni node of the harness's cluster starts from: its name, its REST and PostgreSQL
//! ports on loopback, the etcd it talks to, and (for the bootstrap) the contract's Patroni
//! settings as the cluster's dynamic configuration.

use std::path::Path;

use crate::contract::PatroniSettings;
use crate::db::native::SUPERUSER;

/// What one node's configuration is made of.
pub struct NodeConfig<'a> {
    pub scope: &'a str,
    pub name: &'a str,
    pub dir: &'a Path,
    pub bin_dir: &'a Path,
    pub rest_port: u16,
    pub pg_port: u16,
    /// The port the node reaches etcd on (a proxy's in front of it; `use_proxies` keeps Patroni
    /// from discovering etcd's own address and going around the proxy).
    pub etcd_port: u16,
    /// Throwaway passwords of the cluster (trust on loopback; Patroni wants them set).
    pub password: &'a str,
}

/// The node's `patroni.yml`.
pub fn yaml(n: &NodeConfig, s: &PatroniSettings) -> String {
    let dir = n.dir.display();
    format!(
        r#"scope: {scope}
name: {name}
restapi:
  listen: 127.0.0.1:{rest}
  connect_address: 127.0.0.1:{rest}
etcd3:
  hosts: 127.0.0.1:{etcd}
  use_proxies: true
bootstrap:
  dcs:
    ttl: {ttl}
    loop_wait: {loop_wait}
    retry_timeout: {retry}
    maximum_lag_on_failover: {lag}
    synchronous_mode: {sync}
    synchronous_mode_strict: {strict}
    synchronous_node_count: {count}
    postgresql:
      use_pg_rewind: false
      use_slots: true
      parameters:
        max_connections: 200
        max_wal_senders: 10
        max_replication_slots: 10
  initdb:
    - encoding: UTF8
    - auth: trust
postgresql:
  listen: 127.0.0.1:{pg}
  connect_address: 127.0.0.1:{pg}
  data_dir: {dir}/data
  bin_dir: {bin}
  pgpass: {dir}/pgpass
  authentication:
    superuser:
      username: {su}
      password: "{pw}"
    replication:
      username: replicator
      password: "{pw}"
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
  parameters:
    unix_socket_directories: "{dir}"
    fsync: "off"
    full_page_writes: "off"
    shared_buffers: 64MB
    log_line_prefix: "%m [%p] app=%a "
    log_min_messages: warning
"#,
        scope = n.scope,
        name = n.name,
        rest = n.rest_port,
        etcd = n.etcd_port,
        ttl = s.ttl,
        loop_wait = s.loop_wait,
        retry = PatroniSettings::RETRY_TIMEOUT,
        lag = s.maximum_lag_on_failover,
        sync = s.synchronous_mode,
        strict = s.synchronous_mode_strict,
        count = s.synchronous_node_count,
        pg = n.pg_port,
        bin = n.bin_dir.display(),
        su = SUPERUSER,
        pw = n.password,
    )
}
