//! The Docker command line, for what testcontainers does not cover: a private network per
//! primary + standby pair (create, connect, disconnect — the network cut — and remove), `docker
//! kill` as the fence, `docker exec`, inspection. The removal sweeps that must work without an
//! async runtime (the panic hook, the signal handler, `Drop`) live in [`crate::db::docker_sweep`]
//! and are re-exported here.
//!
//! Everything the harness creates carries the label [`PID_LABEL`] = the harness's pid, so a sweep
//! can remove what a harness killed with SIGKILL left behind, and a Ctrl-C can remove what this
//! one created before its handle existed.

use std::process::Stdio;
use std::time::Duration;

use crate::db::docker_sweep::run_now;
pub use crate::db::docker_sweep::{remove_all_of_this_process, remove_now, sweep_stale, PID_LABEL};
use crate::error::{HarnessError, Result};
use crate::procs::registry;

/// Bound on one docker command (they answer in well under a second on a live daemon).
const CLI_TIMEOUT: Duration = Duration::from_secs(60);

/// Run `docker ARGS`, bounded; its stdout, or an error naming the command and its last stderr line.
pub async fn run(args: &[&str]) -> Result<String> {
    let child = tokio::process::Command::new("docker").args(args).stdin(Stdio::null()).kill_on_drop(true).output();
    let what = format!("docker {}", args.join(" "));
    let out = tokio::time::timeout(CLI_TIMEOUT, child)
        .await
        .map_err(|_| HarnessError::Timeout { what: what.clone(), after_ms: CLI_TIMEOUT.as_millis() })?
        .map_err(|e| HarnessError::Container(format!("cannot run docker: {e}")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
        Err(HarnessError::Container(format!("{what}: {}", last.trim())))
    }
}

/// Whether the container exists and runs.
pub async fn running(id: &str) -> bool {
    run(&["inspect", "-f", "{{.State.Running}}", id]).await.is_ok_and(|s| s == "true")
}

/// `docker kill`: SIGKILL to the container's first process, which takes the whole container (every
/// process of its pid namespace) down at once. The container stays, stopped, for its logs.
pub async fn kill(id: &str) -> Result<()> {
    run(&["kill", id]).await.map(|_| ())
}

/// `docker exec` a shell script in the container, as `user`.
pub async fn exec_sh(id: &str, user: &str, script: &str) -> Result<String> {
    run(&["exec", "-u", user, id, "sh", "-c", script]).await
}

/// A user-defined bridge network private to one experiment (e.g. the replication link between a
/// primary and its standby), removed on drop.
pub struct PrivateNetwork {
    pub name: String,
}

impl PrivateNetwork {
    /// Create a network named `fenceproof-<what>-<pid>-<random>`.
    pub async fn create(what: &str) -> Result<PrivateNetwork> {
        registry::STARTED_CONTAINERS.store(true, std::sync::atomic::Ordering::SeqCst);
        let name =
            format!("fenceproof-{what}-{}-{}", std::process::id(), &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let label = format!("{PID_LABEL}={}", std::process::id());
        run(&["network", "create", "--label", &label, &name]).await?;
        Ok(PrivateNetwork { name })
    }

    /// Attach a running container to this network.
    pub async fn connect(&self, id: &str) -> Result<()> {
        run(&["network", "connect", &self.name, id]).await.map(|_| ())
    }

    /// Detach a container: its interface on this network disappears, and with it every connection
    /// that ran over it (what is still in a socket buffer is never delivered).
    pub async fn disconnect(&self, id: &str) -> Result<()> {
        run(&["network", "disconnect", "--force", &self.name, id]).await.map(|_| ())
    }

    /// The container's address on this network.
    pub async fn ip_of(&self, id: &str) -> Result<String> {
        let format = format!("{{{{(index .NetworkSettings.Networks \"{}\").IPAddress}}}}", self.name);
        let ip = run(&["inspect", "-f", &format, id]).await?;
        if ip.is_empty() || ip == "<no value>" {
            return Err(HarnessError::Container(format!("{id} has no address on {}", self.name)));
        }
        Ok(ip)
    }
}

impl Drop for PrivateNetwork {
    fn drop(&mut self) {
        // Containers still attached (a failed experiment) would keep the network: remove them
        // first, they are this harness's own.
        if let Some(ids) =
            run_now(&["network", "inspect", "-f", "{{range $k, $v := .Containers}}{{$k}} {{end}}", &self.name])
        {
            for id in ids.split_whitespace() {
                remove_now(id);
            }
        }
        let _ = run_now(&["network", "rm", &self.name]);
    }
}
