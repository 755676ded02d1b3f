//! The Patroni backend: a cluster of two Patroni nodes (PostgreSQL from the machine's binaries)
//! with an etcd of its own, all on loopback, for the failover rows where a manager, not the
//! harness, decides what is promoted.
//!
//! Everything lives in one short private folder `/tmp/fenceproof-<pid>-<8 hex>` (the native
//! backend's naming, so its sweep covers it), and every process works inside it: etcd and the
//! Patroni nodes are children of the harness (own process group, parent-death SIGKILL, registered
//! for cleanup); the postmasters Patroni starts detach themselves (their own session, reparented
//! away from Patroni), so they are registered once seen, and a killed harness's ones are swept by
//! the next run (processes whose working directory is inside a dead harness's folder). Each
//! cluster gets a fresh `scope`. Each node reaches etcd through a proxy of the harness
//! ([`proxy::EtcdProxy`]), which can partition that node from etcd.

pub mod config;
pub mod http;
pub mod proxy;
pub mod rest;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::contract::PatroniSettings;
use crate::db::native::{make_root, sweep_stale_roots, unprivileged_user, SUPERUSER};
use crate::db::pgbin::PgBin;
use crate::db::ports::free_port;
use crate::db::Backend;
use crate::error::{HarnessError, Result};
use crate::procs::registry::{self, Kind};
use crate::procs::signals;
use crate::procs::spawn::{prepare, RunAs};
use crate::wait;

/// Where setup installs Patroni (a venv of the system Python); `FENCEPROOF_PATRONI` overrides.
pub const DEFAULT_PATRONI: &str = "/opt/fenceproof-patroni/bin/patroni";
/// Debian's etcd; `FENCEPROOF_ETCD` overrides.
pub const DEFAULT_ETCD: &str = "/usr/bin/etcd";
/// Bound on the bootstrap: etcd healthy, a leader, its replica streaming.
pub const BOOTSTRAP: Duration = Duration::from_secs(90);

/// One Patroni node: its process, its ports, its folder.
pub struct Node {
    pub name: String,
    pub pg_port: u16,
    pub rest_port: u16,
    dir: PathBuf,
    child: Option<Child>,
    pub proxy: proxy::EtcdProxy,
}

/// The cluster: etcd, two nodes, their folder.
pub struct PatroniCluster {
    pub scope: String,
    pub nodes: Vec<Node>,
    /// The node Patroni's REST API last named leader.
    pub leader: usize,
    root: PathBuf,
    etcd: Option<Child>,
    version: String,
}

/// Where the binaries are, or why the rows cannot run here.
pub fn binaries() -> std::result::Result<(PathBuf, PathBuf), String> {
    let patroni = PathBuf::from(std::env::var("FENCEPROOF_PATRONI").unwrap_or_else(|_| DEFAULT_PATRONI.into()));
    let etcd = PathBuf::from(std::env::var("FENCEPROOF_ETCD").unwrap_or_else(|_| DEFAULT_ETCD.into()));
    for (what, p) in [("Patroni", &patroni), ("etcd", &etcd)] {
        if !p.is_file() {
            return Err(format!("{what} not found at {} (scripts/setup.sh installs it)", p.display()));
        }
    }
    Ok((patroni, etcd))
}

impl PatroniCluster {
    /// Start etcd and two Patroni nodes with `settings`, logs into `logs`, and wait (bounded) for a
    /// leader with a streaming replica.
    pub async fn start(bin: &PgBin, settings: &PatroniSettings, logs: &Path) -> Result<PatroniCluster> {
        let (patroni, etcd) = binaries().map_err(HarnessError::Other)?;
        let run_as = unprivileged_user()?;
        sweep_stale_roots();
        let root = make_root(run_as)?;
        registry::register_dir(root.clone());
        let scope = format!("fp-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let mut cluster =
            PatroniCluster { scope, nodes: Vec::new(), leader: 0, root, etcd: None, version: bin.version() };
        let etcd_port = cluster.start_etcd(&etcd, run_as, &logs.join("etcd.log")).await?;
        let bin_dir = bin.tool("postgres").parent().map(Path::to_path_buf).unwrap_or_default();
        let password = uuid::Uuid::new_v4().simple().to_string();
        for i in 0..2 {
            let node = cluster.node(i, &bin_dir, etcd_port, settings, (&password, run_as)).await?;
            cluster.nodes.push(node);
        }
        for i in 0..2 {
            let log = logs.join(format!("patroni-node{i}.log"));
            cluster.spawn_node(i, &patroni, run_as, &log)?;
        }
        cluster.wait_bootstrapped().await?;
        Ok(cluster)
    }

    async fn start_etcd(&mut self, etcd: &Path, run_as: Option<RunAs>, log: &Path) -> Result<u16> {
        let (client, peer) = (free_port()?, free_port()?);
        let data = self.root.join("etcd");
        let mut cmd = Command::new(etcd);
        cmd.current_dir(&self.root)
            .args(["--name", "fp", "--data-dir"])
            .arg(&data)
            .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
            .arg(format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"))
            .arg(format!("--initial-cluster=fp=http://127.0.0.1:{peer}"))
            .stdout(Stdio::from(std::fs::File::create(log)?.try_clone()?))
            .stderr(Stdio::from(std::fs::OpenOptions::new().append(true).open(log)?));
        prepare(&mut cmd, Signal::SIGKILL, run_as);
        let child = cmd.spawn().map_err(|e| HarnessError::Process(format!("cannot start etcd: {e}")))?;
        registry::register(Pid::from_raw(child.id() as i32), Kind::Other);
        self.etcd = Some(child);
        wait::until("etcd to be healthy", BOOTSTRAP, || async move {
            Ok(http::get(client, "/health").await.ok().filter(|r| r.body.contains("true")).map(|_| ()))
        })
        .await?;
        Ok(client)
    }

    async fn node(
        &self,
        i: usize,
        bin_dir: &Path,
        etcd_port: u16,
        settings: &PatroniSettings,
        (password, run_as): (&str, Option<RunAs>),
    ) -> Result<Node> {
        let name = format!("node{i}");
        let dir = self.root.join(&name);
        std::fs::create_dir(&dir)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        let proxy = proxy::EtcdProxy::start(etcd_port).await?;
        let (rest_port, pg_port) = (free_port()?, free_port()?);
        let c = config::NodeConfig {
            scope: &self.scope,
            name: &name,
            dir: &dir,
            bin_dir,
            rest_port,
            pg_port,
            etcd_port: proxy.port,
            password,
        };
        std::fs::write(dir.join("patroni.yml"), config::yaml(&c, settings))?;
        if let Some(u) = run_as {
            for p in [dir.clone(), dir.join("patroni.yml")] {
                nix::unistd::chown(&p, Some(u.uid), Some(u.gid))
                    .map_err(|e| HarnessError::Process(format!("chown {}: {e}", p.display())))?;
            }
        }
        Ok(Node { name, pg_port, rest_port, dir, child: None, proxy })
    }

    fn spawn_node(&mut self, i: usize, patroni: &Path, run_as: Option<RunAs>, log: &Path) -> Result<()> {
        let node = &mut self.nodes[i];
        let mut cmd = Command::new(patroni);
        cmd.current_dir(&node.dir)
            .arg(node.dir.join("patroni.yml"))
            .env("HOME", &node.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::from(std::fs::File::create(log)?.try_clone()?))
            .stderr(Stdio::from(std::fs::OpenOptions::new().append(true).open(log)?));
        prepare(&mut cmd, Signal::SIGKILL, run_as);
        let child = cmd.spawn().map_err(|e| HarnessError::Process(format!("cannot start Patroni: {e}")))?;
        registry::register(Pid::from_raw(child.id() as i32), Kind::Other);
        node.child = Some(child);
        Ok(())
    }
}

impl PatroniCluster {
    /// Wait until one node is leader and the other streams from it; register both postmasters.
    async fn wait_bootstrapped(&mut self) -> Result<()> {
        let leader = wait::until("Patroni to bootstrap a leader with a streaming replica", BOOTSTRAP, || async {
            let Some(l) = self.find_leader().await else { return Ok(None) };
            let cluster = http::get(self.nodes[l].rest_port, "/cluster").await.ok();
            let members: serde_json::Value =
                cluster.and_then(|r| serde_json::from_str(&r.body).ok()).unwrap_or_default();
            let streaming = members["members"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["role"] != "leader" && m["state"] == "streaming"));
            Ok(streaming.then_some(l))
        })
        .await?;
        self.leader = leader;
        for i in 0..self.nodes.len() {
            if let Some(pid) = self.postmaster(i) {
                registry::register(pid, Kind::Postgres);
            }
        }
        Ok(())
    }

    /// The node whose REST API answers 200 on `/leader`, if any.
    pub async fn find_leader(&self) -> Option<usize> {
        for (i, n) in self.nodes.iter().enumerate() {
            if n.child.is_some() && http::get(n.rest_port, "/leader").await.is_ok_and(|r| r.status == 200) {
                return Some(i);
            }
        }
        None
    }

    /// Wait (bounded) until Patroni's `/cluster` gives node `i` the role `role` (e.g.
    /// `sync_standby`: Patroni has recorded it in etcd as the synchronous standby it may promote,
    /// which it does only once the standby confirmed the WAL of the change).
    pub async fn wait_role(&self, i: usize, role: &str, bound: Duration) -> Result<()> {
        let (port, name) = (self.nodes[self.leader].rest_port, self.nodes[i].name.clone());
        wait::until(&format!("Patroni to give {name} the role {role}"), bound, || {
            let name = name.clone();
            async move {
                let body = http::get(port, "/cluster").await.map(|r| r.body).unwrap_or_default();
                let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                let has = v["members"]
                    .as_array()
                    .is_some_and(|m| m.iter().any(|m| m["name"] == name.as_str() && m["role"] == role));
                Ok(has.then_some(()))
            }
        })
        .await
    }

    /// The pid of node `i`'s postmaster (first line of its `postmaster.pid`), if it runs.
    pub fn postmaster(&self, i: usize) -> Option<Pid> {
        let text = std::fs::read_to_string(self.nodes[i].dir.join("data/postmaster.pid")).ok()?;
        let pid = Pid::from_raw(text.lines().next()?.trim().parse().ok()?);
        signals::proc_state(pid).filter(|s| *s != 'Z').map(|_| pid)
    }

    /// URL of `dbname` on node `i`.
    pub fn url_of(&self, i: usize, dbname: &str) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{dbname}", self.nodes[i].pg_port)
    }

    /// The leader crashes, as its machine would: its Patroni and its PostgreSQL (postmaster and
    /// every child, a stopped walsender included) are SIGKILLed. Returns the pids it killed.
    pub fn crash(&mut self, i: usize) -> Vec<Pid> {
        let mut killed = Vec::new();
        if let Some(mut child) = self.nodes[i].child.take() {
            let pid = Pid::from_raw(child.id() as i32);
            let _ = killpg(pid, Signal::SIGKILL);
            let _ = child.wait();
            registry::unregister(pid);
            killed.push(pid);
        }
        if let Some(pm) = self.postmaster(i) {
            for b in signals::children(pm) {
                let _ = nix::sys::signal::kill(b, Signal::SIGKILL);
                killed.push(b);
            }
            let _ = nix::sys::signal::kill(pm, Signal::SIGKILL);
            registry::unregister(pm);
            killed.push(pm);
        }
        killed
    }

    /// Wait (bounded) until node `i` is Patroni's leader and its PostgreSQL takes a write.
    pub async fn wait_writable(&mut self, i: usize, bound: Duration) -> Result<Duration> {
        let start = Instant::now();
        let url = self.url_of(i, "postgres");
        let port = self.nodes[i].rest_port;
        wait::until("the new leader to take writes", bound, || {
            let url = url.clone();
            async move {
                if !http::get(port, "/primary").await.is_ok_and(|r| r.status == 200) {
                    return Ok(None);
                }
                Ok(takes_a_write(&url).await.then_some(()))
            }
        })
        .await?;
        self.leader = i;
        if let Some(pid) = self.postmaster(i) {
            registry::register(pid, Kind::Postgres);
        }
        Ok(start.elapsed())
    }

    /// The cluster as its REST API shows it (a controlled switchover goes through it, as it would
    /// on a team's cluster).
    pub fn rest(&self) -> rest::RestCluster {
        rest::RestCluster { addrs: self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.rest_port)).collect() }
    }

    /// Every process of the cluster that is still alive (Patroni, postmasters and their children,
    /// etcd): none after [`PatroniCluster::stop`].
    pub fn alive(&self) -> Vec<Pid> {
        processes_in(&self.root)
    }

    /// The cluster's folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Stop everything (Patroni, PostgreSQL, etcd: SIGKILL; a throwaway cluster needs no clean
    /// shutdown) and remove the folder. Idempotent.
    pub fn stop(&mut self) {
        for i in 0..self.nodes.len() {
            self.crash(i);
        }
        if let Some(mut etcd) = self.etcd.take() {
            let pid = Pid::from_raw(etcd.id() as i32);
            let _ = killpg(pid, Signal::SIGKILL);
            let _ = etcd.wait();
            registry::unregister(pid);
        }
        // Anything else still working in the folder (a backend that outlived its postmaster).
        for pid in processes_in(&self.root) {
            let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
        }
        if self.root.exists() {
            let _ = std::fs::remove_dir_all(&self.root);
        }
        registry::unregister_dir(&self.root);
    }
}

/// Whether a connection to `url` commits a write within 2 s: a transaction that takes a
/// transaction id (a standby refuses to assign one) and commits; nothing is kept, not even a
/// temporary schema in the catalog (a team's database is left as it was).
pub async fn takes_a_write(url: &str) -> bool {
    use sqlx::Connection;
    let attempt = async {
        let mut c = sqlx::PgConnection::connect(url).await?;
        let mut tx = c.begin().await?;
        sqlx::query("SELECT txid_current()").execute(&mut *tx).await?;
        tx.commit().await?;
        c.close().await
    };
    matches!(tokio::time::timeout(Duration::from_secs(2), attempt).await, Ok(Ok(())))
}

/// The processes whose working directory is `dir` or inside it (every process of a cluster works
/// in its folder: etcd and Patroni by the harness's choice, PostgreSQL in its data directory).
pub fn processes_in(dir: &Path) -> Vec<Pid> {
    signals::working_in(dir)
}

impl Backend for PatroniCluster {
    fn kind(&self) -> &'static str {
        "patroni"
    }
    fn url_for(&self, dbname: &str) -> String {
        self.url_of(self.leader, dbname)
    }
    fn version(&self) -> String {
        self.version.clone()
    }
}

impl Drop for PatroniCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests;
