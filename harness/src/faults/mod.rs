//! Faults with an inject and a heal step.
//!
//! - [`Pause`]: stop a whole process, heal by resuming it. Two kinds: SIGSTOP (confirmed in /proc,
//!   healed by SIGCONT) and a cgroup freeze (confirmed by the kernel's freezer state, healed by
//!   thawing), the way a container runtime pauses a container. A real pause: the process's
//!   heartbeat stops with it, which a sleep inside one process can never show.
//! - [`ServerFreeze`]: the whole database server stops at once — every backend, mid-query — the way
//!   a container freeze, a VM pause or a network stall looks to its clients: native, the postmaster
//!   and its backends in one frozen cgroup; container, `docker pause`. Healed by thawing.
//! - [`DbBarrier`]: the harness holds an exclusive advisory lock; a transaction armed with the
//!   matching fault point waits on it inside the database. The harness observes the wait through
//!   `pg_stat_activity` / `pg_blocking_pids` and heals by releasing the lock.
//! - [`clock::ServerClock`]: the database server's own clock, frozen or jumped with libfaketime.
//! - [`proxy::Proxy`]: a wire-protocol proxy per worker: lost acknowledgements and requests, cuts,
//!   latency, partitions and statement barriers between the worker and the server.
//! - [`row_hold::RowHold`]: a protocol row rewritten to itself in an open transaction, so a statement
//!   that touches it waits and re-checks its conditions when the harness commits.

pub mod clock;
pub mod proxy;
pub mod row_hold;
pub mod tools;

use std::time::Duration;

use nix::unistd::Pid;
use sqlx::{Connection, PgConnection};

use crate::error::{HarnessError, Result};
use crate::procs::{freezer, signals};
use crate::wait;

/// How a process is paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseKind {
    /// SIGSTOP / SIGCONT.
    Sigstop,
    /// The cgroup freezer (what `docker pause` does to a container).
    Freeze,
}

impl PauseKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PauseKind::Sigstop => "sigstop",
            PauseKind::Freeze => "freeze",
        }
    }
}

/// A paused process; resumed by [`Pause::heal`] (or on drop, before the process guard kills it).
pub struct Pause {
    pub pid: Pid,
    pub kind: PauseKind,
    frozen: Option<freezer::Frozen>,
    healed: bool,
}

impl Pause {
    pub async fn inject(pid: Pid) -> Result<Pause> {
        Pause::inject_kind(pid, PauseKind::Sigstop).await
    }

    pub async fn inject_kind(pid: Pid, kind: PauseKind) -> Result<Pause> {
        let frozen = match kind {
            PauseKind::Sigstop => {
                signals::pause(pid).await?;
                None
            }
            PauseKind::Freeze => Some(freezer::Frozen::freeze(pid).await?),
        };
        Ok(Pause { pid, kind, frozen, healed: false })
    }

    pub async fn heal(mut self) -> Result<()> {
        self.healed = true;
        match self.frozen.take() {
            Some(f) => f.thaw().await,
            None => signals::resume(self.pid).await,
        }
    }
}

impl Drop for Pause {
    fn drop(&mut self) {
        if !self.healed && self.frozen.is_none() {
            let _ = nix::sys::signal::kill(self.pid, nix::sys::signal::Signal::SIGCONT);
        }
        // A Frozen thaws itself on drop.
    }
}

/// The database server a [`ServerFreeze`] stops.
#[derive(Debug, Clone)]
pub enum ServerTarget {
    /// A native cluster: its postmaster's pid (the backends are its children).
    Native(Pid),
    /// A container: its id.
    Container(String),
}

/// A whole database server, frozen; thawed by [`ServerFreeze::heal`] or on drop.
pub struct ServerFreeze {
    target: ServerTarget,
    frozen: Option<freezer::Frozen>,
    /// What confirmed the freeze, for the evidence.
    pub confirmed: String,
    healed: bool,
}

impl ServerFreeze {
    /// Freeze the server and wait (bounded) until the kernel (native) or Docker (container)
    /// reports it frozen.
    pub async fn inject(target: &ServerTarget) -> Result<ServerFreeze> {
        match target {
            ServerTarget::Native(pid) => {
                let f = freezer::Frozen::freeze_tree(*pid).await?;
                let confirmed = format!("cgroup freezer FROZEN: postmaster {pid} and {} backends", f.members() - 1);
                Ok(ServerFreeze { target: target.clone(), frozen: Some(f), confirmed, healed: false })
            }
            ServerTarget::Container(id) => {
                let mut me =
                    ServerFreeze { target: target.clone(), frozen: None, confirmed: String::new(), healed: false };
                crate::db::docker::run(&["pause", id]).await?;
                let id2 = id.clone();
                wait::until("docker to report the container paused", Duration::from_secs(10), || {
                    let id = id2.clone();
                    async move {
                        let paused = crate::db::docker::run(&["inspect", "-f", "{{.State.Paused}}", &id]).await?;
                        Ok((paused == "true").then_some(()))
                    }
                })
                .await?;
                me.confirmed = format!("docker pause: container {} State.Paused = true", &id[..12.min(id.len())]);
                Ok(me)
            }
        }
    }

    /// Thaw the server: every process resumes where it stopped.
    pub async fn heal(mut self) -> Result<()> {
        self.healed = true;
        match (&self.target, self.frozen.take()) {
            (ServerTarget::Native(_), Some(f)) => f.thaw().await,
            (ServerTarget::Container(id), _) => crate::db::docker::run(&["unpause", id]).await.map(|_| ()),
            (ServerTarget::Native(_), None) => Ok(()),
        }
    }
}

impl Drop for ServerFreeze {
    fn drop(&mut self) {
        if let (false, ServerTarget::Container(id)) = (self.healed, &self.target) {
            let _ = std::process::Command::new("docker")
                .args(["unpause", id])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
        // A Frozen thaws itself on drop.
    }
}

/// A barrier inside the database, held by the harness's own session.
pub struct DbBarrier {
    pub key: i64,
    conn: Option<PgConnection>,
    /// The backend pid of the harness session holding the lock.
    pub holder_pid: i32,
}

impl DbBarrier {
    /// Take the exclusive advisory lock `key` on a dedicated session.
    pub async fn hold(url: &str, key: i64) -> Result<DbBarrier> {
        let mut conn = PgConnection::connect(url).await?;
        sqlx::query("SET application_name = 'fenceproof-barrier'").execute(&mut conn).await?;
        let holder_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut conn).await?;
        sqlx::query("SELECT pg_advisory_lock($1)").bind(key).execute(&mut conn).await?;
        Ok(DbBarrier { key, conn: Some(conn), holder_pid })
    }

    /// Wait until `count` sessions named in `apps` are blocked by this barrier.
    /// Returns their backend pids.
    pub async fn wait_blocked(
        &self,
        observer: &sqlx::PgPool,
        apps: &[String],
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<i32>> {
        let holder = self.holder_pid;
        wait::until(
            &format!("{count} session(s) of {apps:?} to wait on barrier {}", self.key),
            timeout,
            || async move {
                let pids: Vec<i32> = sqlx::query_scalar(
                    "SELECT pid FROM pg_stat_activity
                  WHERE application_name = ANY($1) AND $2 = ANY(pg_blocking_pids(pid))
                  ORDER BY pid",
                )
                .bind(apps)
                .bind(holder)
                .fetch_all(observer)
                .await?;
                Ok((pids.len() >= count).then_some(pids))
            },
        )
        .await
    }

    /// Release the lock and close the session.
    pub async fn release(mut self) -> Result<()> {
        let mut conn = self.conn.take().ok_or_else(|| HarnessError::Other("barrier already released".into()))?;
        sqlx::query("SELECT pg_advisory_unlock($1)").bind(self.key).execute(&mut conn).await?;
        conn.close().await?;
        Ok(())
    }
}
