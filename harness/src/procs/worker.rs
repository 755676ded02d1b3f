//! A worker process (fenceproof-worker or a compatible binary) driven over JSON lines.
//!
//! The harness writes commands to the worker's stdin and reads its events from stdout; the worker
//! also appends them to its own events file. Every command and signal is entered in the harness's
//! timeline. Dropping a [`WorkerProc`] kills its process group.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;

use crate::error::{HarnessError, Result};
use crate::faults::{Pause, PauseKind};
use crate::procs::registry::{self, Kind};
use crate::procs::spawn::prepare;
use crate::record::timeline::Timeline;

/// How to start one worker.
pub struct WorkerSpec {
    /// The harness's name for it ("a", "b", ...).
    pub name: String,
    /// Its owner id; it connects with this application_name.
    pub owner: String,
    pub binary: PathBuf,
    pub database_url: String,
    /// Folder for its events and stderr files.
    pub dir: PathBuf,
    /// Extra arguments (e.g. scripted mode).
    pub extra_args: Vec<String>,
}

pub struct WorkerProc {
    pub name: String,
    pub owner: String,
    pub pid: Pid,
    child: Child,
    stdin: Option<ChildStdin>,
    events: mpsc::UnboundedReceiver<Value>,
    /// Events received but not yet consumed by a wait.
    backlog: Vec<Value>,
    /// Every event received, in order.
    pub history: Vec<Value>,
    next_id: u64,
    timeline: Timeline,
}

impl WorkerProc {
    pub async fn spawn(spec: WorkerSpec, timeline: Timeline) -> Result<WorkerProc> {
        if !spec.binary.is_file() {
            return Err(HarnessError::Worker {
                name: spec.name,
                detail: format!("binary {} not found (build it with `cargo build --workspace`)", spec.binary.display()),
            });
        }
        let events_path = spec.dir.join(format!("worker-{}.events.jsonl", spec.name));
        let stderr = std::fs::File::create(spec.dir.join(format!("worker-{}.stderr.log", spec.name)))?;
        let mut std_cmd = std::process::Command::new(&spec.binary);
        std_cmd
            .arg("--database-url")
            .arg(&spec.database_url)
            .arg("--owner")
            .arg(&spec.owner)
            .arg("--events")
            .arg(&events_path)
            .args(&spec.extra_args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr);
        prepare(&mut std_cmd, Signal::SIGKILL, None);
        let mut cmd = tokio::process::Command::from(std_cmd);
        cmd.kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .map_err(|e| HarnessError::Worker { name: spec.name.clone(), detail: format!("spawn failed: {e}") })?;
        let pid =
            Pid::from_raw(child.id().ok_or_else(|| HarnessError::Process("worker exited at once".into()))? as i32);
        registry::register(pid, Kind::Other);
        timeline.record(
            "harness",
            "spawn",
            &spec.name,
            json!({ "pid": pid.as_raw(), "owner": spec.owner, "args": spec.extra_args }),
        );

        let stdout = child.stdout.take().expect("stdout piped");
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let v = serde_json::from_str(&line).unwrap_or_else(|_| json!({ "event": "unparsed", "line": line }));
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Ok(WorkerProc {
            name: spec.name,
            owner: spec.owner,
            pid,
            child,
            stdin,
            events: rx,
            backlog: Vec::new(),
            history: Vec::new(),
            next_id: 1,
            timeline,
        })
    }

    /// Send a command without waiting for its answer; returns its id.
    pub async fn send(&mut self, mut cmd: Value) -> Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        cmd["id"] = json!(id);
        self.timeline.record("harness", "command", &self.name, redacted(&cmd));
        let mut line = serde_json::to_string(&cmd).expect("json");
        line.push('\n');
        let name = self.name.clone();
        let err = |detail: String| HarnessError::Worker { name: name.clone(), detail };
        let stdin = self.stdin.as_mut().ok_or_else(|| err("stdin closed".into()))?;
        stdin.write_all(line.as_bytes()).await.map_err(|e| err(format!("write command: {e}")))?;
        stdin.flush().await.map_err(|e| err(format!("flush command: {e}")))?;
        Ok(id)
    }

    /// Wait for the answer to command `id`.
    pub async fn reply(&mut self, id: u64, timeout: Duration) -> Result<Value> {
        self.wait_event(&format!("answer to command {id}"), timeout, |e| e["id"] == json!(id)).await
    }

    /// Send a command and wait for its answer.
    pub async fn request(&mut self, cmd: Value, timeout: Duration) -> Result<Value> {
        let id = self.send(cmd).await?;
        self.reply(id, timeout).await
    }

    /// Wait for the first event matching `pred` (earlier unmatched events stay in the backlog).
    pub async fn wait_event(&mut self, what: &str, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Result<Value> {
        if let Some(i) = self.backlog.iter().position(&pred) {
            return Ok(self.backlog.remove(i));
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Err(_) => {
                    return Err(HarnessError::Timeout {
                        what: format!("worker {}: {what}", self.name),
                        after_ms: timeout.as_millis(),
                    })
                }
                Ok(None) => return Err(self.err(&format!("exited before {what}"))),
                Ok(Some(ev)) => {
                    self.history.push(ev.clone());
                    if pred(&ev) {
                        return Ok(ev);
                    }
                    self.backlog.push(ev);
                }
            }
        }
    }

    /// Without waiting: the first already-received event matching `pred`, if any.
    pub fn poll_event(&mut self, pred: impl Fn(&Value) -> bool) -> Option<Value> {
        while let Ok(ev) = self.events.try_recv() {
            self.history.push(ev.clone());
            self.backlog.push(ev);
        }
        let i = self.backlog.iter().position(pred)?;
        Some(self.backlog.remove(i))
    }

    /// SIGSTOP this worker (confirmed stopped by the kernel).
    pub async fn pause(&self) -> Result<Pause> {
        self.pause_with(PauseKind::Sigstop).await
    }

    /// Pause the whole worker process: SIGSTOP, or freeze it in a cgroup.
    pub async fn pause_with(&self, kind: PauseKind) -> Result<Pause> {
        let (action, state) = match kind {
            PauseKind::Sigstop => ("sigstop", "T"),
            PauseKind::Freeze => ("freeze", "FROZEN"),
        };
        self.timeline.record("harness", action, &self.name, json!({ "pid": self.pid.as_raw() }));
        let p = Pause::inject_kind(self.pid, kind).await?;
        self.timeline.record("harness", "stopped", &self.name, json!({ "state": state }));
        Ok(p)
    }

    /// End a pause of this worker (SIGCONT, or thaw).
    pub async fn resume(&self, p: Pause) -> Result<()> {
        let action = match p.kind {
            PauseKind::Sigstop => "sigcont",
            PauseKind::Freeze => "thaw",
        };
        self.timeline.record("harness", action, &self.name, json!({ "pid": self.pid.as_raw() }));
        p.heal().await
    }

    /// SIGKILL the worker's group and reap it.
    pub async fn kill(&mut self) -> Result<()> {
        self.timeline.record("harness", "sigkill", &self.name, json!({ "pid": self.pid.as_raw() }));
        let _ = killpg(self.pid, Signal::SIGKILL);
        let _ = self.child.wait().await;
        registry::unregister(self.pid);
        Ok(())
    }

    /// Ask the worker to exit and wait for it; kill it if it does not exit in time.
    pub async fn shutdown(&mut self, timeout: Duration) -> Result<()> {
        if self.child.try_wait()?.is_some() {
            registry::unregister(self.pid);
            return Ok(());
        }
        if self.send(json!({ "cmd": "exit" })).await.is_ok() {
            self.stdin = None;
            if tokio::time::timeout(timeout, self.child.wait()).await.is_ok() {
                self.timeline.record("harness", "exited", &self.name, json!({}));
                registry::unregister(self.pid);
                return Ok(());
            }
        }
        self.kill().await
    }

    /// Wait for the worker to exit on its own (scripted mode); returns its exit code.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<Option<i32>> {
        let status = tokio::time::timeout(timeout, self.child.wait()).await.map_err(|_| HarnessError::Timeout {
            what: format!("worker {} to exit", self.name),
            after_ms: timeout.as_millis(),
        })??;
        registry::unregister(self.pid);
        // Drain what it printed before exiting.
        while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_millis(500), self.events.recv()).await {
            self.history.push(ev.clone());
            self.backlog.push(ev);
        }
        self.timeline.record("harness", "exited", &self.name, json!({ "code": status.code() }));
        Ok(status.code())
    }

    /// The events file this worker writes.
    pub fn events_file(dir: &Path, name: &str) -> PathBuf {
        dir.join(format!("worker-{name}.events.jsonl"))
    }

    fn err(&self, detail: &str) -> HarnessError {
        HarnessError::Worker { name: self.name.clone(), detail: detail.to_string() }
    }
}

impl Drop for WorkerProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = killpg(self.pid, Signal::SIGCONT);
            let _ = killpg(self.pid, Signal::SIGKILL);
        }
        registry::unregister(self.pid);
    }
}

/// A command as the timeline keeps it: the value of every field marked secret
/// (`{"$secret": {"name": N, "value": V}}`) replaced by its reference `{"$secret": N}`.
pub fn redacted(v: &Value) -> Value {
    match v {
        Value::Object(m) if m.get("$secret").is_some_and(|s| s.get("value").is_some()) => {
            json!({ "$secret": m["$secret"]["name"].clone() })
        }
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), redacted(v))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(redacted).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_recorded_without_secret_values() {
        let cmd = json!({"cmd": "plan", "request": {"n": 1, "auth": {"$secret": {"name": "k", "value": "sk_live_x"}},
                         "list": [{"$secret": {"name": "p", "value": "4111"}}], "ref": {"$secret": "already"}}});
        let r = redacted(&cmd);
        assert_eq!(r["request"]["auth"], json!({"$secret": "k"}));
        assert_eq!(r["request"]["list"][0], json!({"$secret": "p"}));
        assert_eq!(r["request"]["ref"], json!({"$secret": "already"}));
        assert!(!r.to_string().contains("sk_live_x") && !r.to_string().contains("4111"));
        assert_eq!(r["request"]["n"], 1);
    }
}
