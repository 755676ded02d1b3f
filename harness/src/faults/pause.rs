//! A whole process paused: SIGSTOP (confirmed stopped in /proc, healed by SIGCONT) or a cgroup
//! freeze (confirmed by the kernel's freezer state, healed by thawing), the way a container
//! runtime pauses a container. A real pause: the process's heartbeat stops with it, which a sleep
//! inside one process can never show.

use nix::unistd::Pid;
use serde_json::{json, Value};

use super::fault::{Fault, Injected};
use crate::error::Result;
use crate::procs::{freezer, signals};

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

/// A pause of process `pid`, which the timeline calls `who`.
pub struct ProcessPause {
    pub pid: Pid,
    pub kind: PauseKind,
    who: String,
    frozen: Option<freezer::Frozen>,
    stopped: bool,
}

/// A paused process, resumed by [`Injected::heal`] or on drop (before a process guard kills it).
pub type Pause = Injected<ProcessPause>;

impl ProcessPause {
    pub fn new(pid: Pid, who: &str, kind: PauseKind) -> ProcessPause {
        ProcessPause { pid, kind, who: who.to_string(), frozen: None, stopped: false }
    }
}

impl Fault for ProcessPause {
    fn name(&self) -> &'static str {
        self.kind.as_str()
    }

    fn target(&self) -> String {
        self.who.clone()
    }

    fn actions(&self) -> (&'static str, &'static str) {
        match self.kind {
            PauseKind::Sigstop => ("sigstop", "sigcont"),
            PauseKind::Freeze => ("freeze", "thaw"),
        }
    }

    fn describe(&self) -> Value {
        json!({"pid": self.pid.as_raw()})
    }

    async fn inject(&mut self) -> Result<Value> {
        match self.kind {
            PauseKind::Sigstop => {
                // Marked first: a stop that is sent but not confirmed is still undone.
                self.stopped = true;
                signals::pause(self.pid).await?;
                Ok(json!({"state": "T"}))
            }
            PauseKind::Freeze => {
                self.frozen = Some(freezer::Frozen::freeze(self.pid).await?);
                Ok(json!({"state": "FROZEN"}))
            }
        }
    }

    async fn heal(&mut self) -> Result<()> {
        if let Some(f) = self.frozen.take() {
            return f.thaw().await;
        }
        if std::mem::take(&mut self.stopped) {
            return signals::resume(self.pid).await;
        }
        Ok(())
    }

    fn heal_now(&mut self) {
        // A Frozen thaws itself on drop.
        self.frozen = None;
        if std::mem::take(&mut self.stopped) {
            let _ = nix::sys::signal::kill(self.pid, nix::sys::signal::Signal::SIGCONT);
        }
    }
}
