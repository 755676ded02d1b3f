//! A job-queue library's audit adapter: a Python script (`audit/adapters/lib_<name>.py`) run with
//! the project's own Python environment, or a native binary (the Rust libraries' adapters). One-shot commands (`setup`, `enqueue`) bounded in time, and worker processes
//! that run the library's own worker until the harness stops them. Each process gets its own
//! `application_name` through `PGAPPNAME` (libpq reads it for every session the library opens), so
//! the commit triggers tell the writers apart. A worker's stdout (the adapter's events, secondary
//! evidence) and stderr (the library's logs) go to files in the experiment's folder.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tokio::process::Child;

use crate::error::{HarnessError, Result};
use crate::procs::registry::{self, Kind};
use crate::procs::spawn::{prepare, run_bounded};
use crate::record::timeline::Timeline;

/// One library's adapter: the script and its interpreter, or (no interpreter) a native binary.
#[derive(Debug, Clone)]
pub struct Adapter {
    pub python: Option<PathBuf>,
    pub script: PathBuf,
}

/// How a worker is started.
#[derive(Debug, Clone)]
pub struct WorkerSpec<'a> {
    pub name: &'a str,
    pub app_name: &'a str,
    pub dsn: &'a str,
    pub tools: &'a str,
    pub gates: &'a Path,
    pub outcome: &'a str,
    /// The settings the worker runs at (`fast`, `production`) and their numbers: the stall
    /// threshold, the heartbeat interval (0: none) and the recovery's cadence, in seconds.
    pub settings: &'a str,
    pub stall_s: f64,
    pub heartbeat_s: f64,
    pub sweep_s: f64,
    pub recover: bool,
    /// The name the worker gives itself in the library (its owner/worker id): `name` unless a
    /// restart under the paused worker's own name is the experiment.
    pub owner: &'a str,
}

/// The JSON lines of `text` (other lines, a library's stray prints, are skipped).
pub fn events(text: &str) -> Vec<Value> {
    text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter(|v| v["event"].is_string()).collect()
}

impl Adapter {
    fn command(&self, cmd: &str, dsn: &str, app_name: &str) -> std::process::Command {
        let mut c = match &self.python {
            Some(python) => {
                let mut c = std::process::Command::new(python);
                c.arg("-u").arg(&self.script);
                c
            }
            None => std::process::Command::new(&self.script),
        };
        c.arg(cmd).arg("--dsn").arg(dsn);
        c.env("PGAPPNAME", app_name).env("PYTHONDONTWRITEBYTECODE", "1").stdin(Stdio::null());
        c
    }

    /// Run `setup` or `enqueue` to its end within `bound`; its events, or an error with its stderr.
    pub async fn once(
        &self,
        cmd: &str,
        dsn: &str,
        extra: &[&str],
        app_name: &str,
        bound: Duration,
    ) -> Result<Vec<Value>> {
        let mut c = self.command(cmd, dsn, app_name);
        c.args(extra);
        prepare(&mut c, Signal::SIGKILL, None);
        let what = format!("{} {cmd}", self.script.display());
        let out = run_bounded(c, &what, bound).await?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string();
            return Err(HarnessError::Process(format!("{what} exited with {}: {last}", out.status)));
        }
        Ok(events(&String::from_utf8_lossy(&out.stdout)))
    }

    /// Start a worker of the library; its events go to `<dir>/adapter-<name>.events.jsonl`.
    pub fn spawn_worker(&self, spec: &WorkerSpec<'_>, dir: &Path, timeline: &Timeline) -> Result<AdapterWorker> {
        let events = dir.join(format!("adapter-{}.events.jsonl", spec.name));
        let stderr = dir.join(format!("adapter-{}.stderr.log", spec.name));
        let mut c = self.command("worker", spec.dsn, spec.app_name);
        c.arg("--name").arg(spec.name).arg("--tools").arg(spec.tools).arg("--gates").arg(spec.gates);
        c.arg("--outcome").arg(spec.outcome).arg("--settings").arg(spec.settings);
        c.arg("--stall-s").arg(spec.stall_s.to_string()).arg("--heartbeat-s").arg(spec.heartbeat_s.to_string());
        c.arg("--sweep-s").arg(spec.sweep_s.to_string());
        c.arg("--owner").arg(spec.owner);
        if spec.recover {
            c.arg("--recover");
        }
        c.stdout(std::fs::File::create(&events)?).stderr(std::fs::File::create(&stderr)?);
        prepare(&mut c, Signal::SIGKILL, None);
        let mut c = tokio::process::Command::from(c);
        c.kill_on_drop(true);
        let child = c.spawn().map_err(|e| HarnessError::Process(format!("starting {}: {e}", self.script.display())))?;
        let pid = Pid::from_raw(
            child.id().ok_or_else(|| HarnessError::Process("adapter worker exited at once".into()))? as i32,
        );
        registry::register(pid, Kind::Other);
        timeline.record(
            "harness",
            "spawn",
            spec.name,
            json!({"pid": pid.as_raw(), "application_name": spec.app_name, "outcome": spec.outcome, "recover": spec.recover}),
        );
        Ok(AdapterWorker { name: spec.name.to_string(), pid, child, events, stderr, stopped: false })
    }
}

/// A running worker process of a library; its process group is killed on drop.
pub struct AdapterWorker {
    pub name: String,
    pub pid: Pid,
    child: Child,
    pub events: PathBuf,
    pub stderr: PathBuf,
    stopped: bool,
}

impl AdapterWorker {
    /// What it has printed so far.
    pub fn read_events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.events).map(|t| events(&t)).unwrap_or_default()
    }

    /// Whether it has exited (and with what), without waiting.
    pub fn exited(&mut self) -> Option<String> {
        self.child.try_wait().ok().flatten().map(|s| s.to_string())
    }

    /// The last non-empty line of its stderr, for an error message.
    pub fn last_words(&self) -> String {
        let t = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        t.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().chars().take(300).collect()
    }

    /// SIGKILL the whole group and reap it (bounded).
    pub async fn kill(&mut self) {
        let _ = killpg(self.pid, Signal::SIGKILL);
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
        registry::unregister(self.pid);
        self.stopped = true;
    }

    /// Ask it to stop (SIGCONT first, in case it is paused, then SIGTERM: the libraries' graceful
    /// shutdown), wait up to `grace`, then kill the group whatever happened.
    pub async fn stop(&mut self, grace: Duration) {
        let _ = killpg(self.pid, Signal::SIGCONT);
        let _ = killpg(self.pid, Signal::SIGTERM);
        let _ = tokio::time::timeout(grace, self.child.wait()).await;
        self.kill().await;
    }
}

impl Drop for AdapterWorker {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = killpg(self.pid, Signal::SIGKILL);
            registry::unregister(self.pid);
        }
    }
}
