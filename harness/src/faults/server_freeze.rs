//! The whole database server stopped at once — every backend, mid-query — the way a container
//! freeze, a VM pause or a network stall looks to its clients: native, the postmaster and its
//! backends in one frozen cgroup; container, `docker pause`. Healed by thawing.

use std::time::Duration;

use nix::unistd::Pid;
use serde_json::{json, Value};

use super::fault::Fault;
use crate::error::Result;
use crate::procs::freezer;
use crate::wait;

/// The database server a [`ServerFreeze`] stops.
#[derive(Debug, Clone)]
pub enum ServerTarget {
    /// A native cluster: its postmaster's pid (the backends are its children).
    Native(Pid),
    /// A container: its id.
    Container(String),
}

/// A freeze of the whole server `target`.
pub struct ServerFreeze {
    target: ServerTarget,
    frozen: Option<freezer::Frozen>,
    paused: bool,
    /// What confirmed the freeze, for the evidence (empty until injected).
    pub confirmed: String,
}

impl ServerFreeze {
    pub fn new(target: &ServerTarget) -> ServerFreeze {
        ServerFreeze { target: target.clone(), frozen: None, paused: false, confirmed: String::new() }
    }

    async fn pause_container(&mut self, id: &str) -> Result<String> {
        self.paused = true;
        crate::db::docker::run(&["pause", id]).await?;
        let id2 = id.to_string();
        wait::until("docker to report the container paused", Duration::from_secs(10), || {
            let id = id2.clone();
            async move {
                let paused = crate::db::docker::run(&["inspect", "-f", "{{.State.Paused}}", &id]).await?;
                Ok((paused == "true").then_some(()))
            }
        })
        .await?;
        Ok(format!("docker pause: container {} State.Paused = true", &id[..12.min(id.len())]))
    }
}

impl Fault for ServerFreeze {
    fn name(&self) -> &'static str {
        "server-freeze"
    }

    fn target(&self) -> String {
        "database".into()
    }

    fn actions(&self) -> (&'static str, &'static str) {
        ("freeze", "thaw")
    }

    /// Freeze the server and wait (bounded) until the kernel (native) or Docker (container)
    /// reports it frozen.
    async fn inject(&mut self) -> Result<Value> {
        self.confirmed = match self.target.clone() {
            ServerTarget::Native(pid) => {
                let f = freezer::Frozen::freeze_tree(pid).await?;
                let c = format!("cgroup freezer FROZEN: postmaster {pid} and {} backends", f.members() - 1);
                self.frozen = Some(f);
                c
            }
            ServerTarget::Container(id) => self.pause_container(&id).await?,
        };
        Ok(json!({"confirmed": self.confirmed}))
    }

    /// Thaw the server: every process resumes where it stopped.
    async fn heal(&mut self) -> Result<()> {
        if let Some(f) = self.frozen.take() {
            return f.thaw().await;
        }
        match (&self.target, std::mem::take(&mut self.paused)) {
            (ServerTarget::Container(id), true) => crate::db::docker::run(&["unpause", id]).await.map(|_| ()),
            _ => Ok(()),
        }
    }

    fn heal_now(&mut self) {
        // A Frozen thaws itself on drop.
        self.frozen = None;
        if let (ServerTarget::Container(id), true) = (&self.target, std::mem::take(&mut self.paused)) {
            let _ = std::process::Command::new("docker")
                .args(["unpause", id])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}
