//! The fake-tools process: spawned with its ledger inside the experiment's folder, its address read
//! from the first line it prints, killed (group) on drop. The ledger file outlives it and every
//! caller: the harness reads it as an oracle with [`crate::record::ledger`]. Given the experiment's
//! database, the tools record at every call the callers' sessions with an open transaction
//! (`--observe-database-url`, its password passed in `PGPASSWORD`), judged by
//! [`crate::check::claims`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::json;
use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, ChildStdin};

use crate::error::{HarnessError, Result};
use crate::procs::registry::{self, Kind};
use crate::procs::spawn::prepare;
use crate::record::timeline::Timeline;

pub struct ToolsProc {
    pub addr: SocketAddr,
    pub pid: Pid,
    pub ledger: PathBuf,
    child: Child,
    _stdin: Option<ChildStdin>,
}

impl ToolsProc {
    /// Start the tools with their ledger in `dir`; with `observe`, a URL of the callers' database
    /// that they read at every call.
    pub async fn spawn(binary: &Path, dir: &Path, timeline: &Timeline, observe: Option<&str>) -> Result<ToolsProc> {
        if !binary.is_file() {
            return Err(HarnessError::Other(format!(
                "fake-tools binary {} not found (build it with `cargo build --workspace`)",
                binary.display()
            )));
        }
        let ledger = dir.join("tools-ledger.jsonl");
        let stderr = std::fs::File::create(dir.join("tools.stderr.log"))?;
        let mut cmd = std::process::Command::new(binary);
        cmd.arg("--ledger").arg(&ledger).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(stderr);
        match observe {
            Some(url) => {
                // No password on a command line: the URL without it, the password in the
                // environment (or, for a URL without one, the harness's own PGPASSWORD/PGPASSFILE).
                let (url, password) = crate::procs::worker::without_password(url);
                cmd.arg("--observe-database-url").arg(url);
                if let Some(pw) = password {
                    cmd.env("PGPASSWORD", pw);
                }
            }
            None => {
                cmd.env_remove("PGPASSWORD");
            }
        }
        prepare(&mut cmd, Signal::SIGKILL, None);
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| HarnessError::Other(format!("spawning fake tools: {e}")))?;
        let pid =
            Pid::from_raw(child.id().ok_or_else(|| HarnessError::Process("fake tools exited at once".into()))? as i32);
        registry::register(pid, Kind::Other);
        let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout piped")).lines();
        let first = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .map_err(|_| HarnessError::Timeout { what: "fake tools to listen".into(), after_ms: 10_000 })??
            .ok_or_else(|| HarnessError::Other("fake tools exited before listening".into()))?;
        let addr: SocketAddr = serde_json::from_str::<serde_json::Value>(&first)
            .ok()
            .and_then(|v| v["addr"].as_str().and_then(|a| a.parse().ok()))
            .ok_or_else(|| HarnessError::Other(format!("fake tools said {first:?}, not their address")))?;
        timeline.record("harness", "spawn", "tools", json!({"pid": pid.as_raw(), "addr": addr.to_string()}));
        let stdin = child.stdin.take();
        Ok(ToolsProc { addr, pid, ledger, child, _stdin: stdin })
    }
}

impl Drop for ToolsProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = killpg(self.pid, Signal::SIGKILL);
        }
        registry::unregister(self.pid);
    }
}
