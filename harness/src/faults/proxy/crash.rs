//! A crash between two durable steps ([`CommitCrash`]): the proxy counts, from the wire, the
//! commits of the worker's durable writes (a transaction that ran a statement matching the pattern
//! and was answered `CommandComplete "COMMIT"` then `ReadyForQuery` idle, or such a statement run
//! on its own and answered without error) and, the moment the acknowledgement of the Nth has been
//! passed to the worker, SIGKILLs the worker's process group through the harness's process registry
//! ([`crate::procs::registry::kill_group`]: only a child the harness started and still tracks) and
//! closes the connection. Nothing the worker meant to do after that commit happens: not the next
//! statement, not a file written after the commit, not the answer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::unistd::Pid;
use regex::Regex;
use serde::Serialize;
use serde_json::{json, Value};

use super::Shared;
use crate::error::{HarnessError, Result};
use crate::faults::Fault;

pub(super) struct CrashArm {
    id: u64,
    pattern: Regex,
    /// Kill after this commit (from 1).
    n: usize,
    /// Durable commits acknowledged since the arm was injected.
    seen: usize,
    pgid: Pid,
    until: Instant,
}

/// A crash the proxy caused.
#[derive(Debug, Clone, Serialize)]
pub struct CrashFired {
    /// The commit after whose acknowledgement the worker was killed (from 1).
    pub commit: usize,
    /// The connection it came on.
    pub connection: u64,
    /// The worker's process group was registered and was sent SIGKILL.
    pub killed: bool,
    /// Milliseconds since the experiment's timeline started.
    pub at_ms: f64,
}

impl Shared {
    /// Whether `sql` is a durable write the armed crash counts.
    pub(super) fn crash_counts(&self, sql: &str) -> bool {
        let n = super::frame::normalize(sql);
        self.st().crash.as_ref().is_some_and(|c| Instant::now() <= c.until && c.pattern.is_match(&n))
    }

    /// A durable write's commit was acknowledged on a connection: the arm's id when it is the Nth.
    pub(super) fn count_commit(&self) -> Option<u64> {
        let mut st = self.st();
        let c = st.crash.as_mut()?;
        if Instant::now() > c.until {
            return None;
        }
        c.seen += 1;
        (c.seen == c.n).then_some(c.id)
    }

    /// The Nth acknowledgement has been written to the worker: kill it now, then record.
    pub(super) fn crash_now(&self, id: u64, connection: u64) {
        let taken = {
            let mut st = self.st();
            match st.crash.take() {
                Some(c) if c.id == id => Some(c),
                other => {
                    st.crash = other;
                    None
                }
            }
        };
        let Some(c) = taken else { return };
        let killed = crate::procs::registry::kill_group(c.pgid);
        let f = CrashFired { commit: c.n, connection, killed, at_ms: self.timeline.elapsed_ms() };
        self.st().crashes.push((id, f.clone()));
        self.record(
            "crash after commit",
            json!({"commit": c.n, "connection": connection, "pgid": c.pgid.as_raw(), "killed": killed}),
        );
        self.bump();
    }
}

/// Kill the worker the moment the acknowledgement of its Nth durable commit (counted from the
/// injection) has passed to it; healed (disarmed) if it has not fired.
pub struct CommitCrash {
    pub(super) id: u64,
    pub(super) pattern: Regex,
    pub(super) source: String,
    pub(super) n: usize,
    pub(super) pgid: Pid,
    pub(super) within: Duration,
    pub(super) shared: Arc<Shared>,
}

impl CommitCrash {
    /// The crash, if it happened.
    pub fn try_fired(&self) -> Option<CrashFired> {
        self.shared.st().crashes.iter().find(|(id, _)| *id == self.id).map(|(_, f)| f.clone())
    }

    /// Durable commits acknowledged since the injection (while armed).
    pub fn seen(&self) -> usize {
        let st = self.shared.st();
        match st.crash.as_ref().filter(|c| c.id == self.id) {
            Some(c) => c.seen,
            None => self.try_fired().map_or(0, |f| f.commit),
        }
    }

    /// Wait (at most `timeout`) until the crash happened.
    pub async fn fired(&self, timeout: Duration) -> Result<CrashFired> {
        let until = Instant::now() + timeout;
        loop {
            let mut rx = self.shared.changed.subscribe();
            if let Some(f) = self.try_fired() {
                return Ok(f);
            }
            if Instant::now() >= until {
                return Err(HarnessError::Timeout {
                    what: format!("durable commit {} of the worker to be acknowledged", self.n),
                    after_ms: timeout.as_millis(),
                });
            }
            let _ = tokio::time::timeout_at(until.into(), rx.changed()).await;
        }
    }
}

impl Fault for CommitCrash {
    fn name(&self) -> &'static str {
        "crash-after-commit"
    }

    fn target(&self) -> String {
        self.shared.name.clone()
    }

    fn actions(&self) -> (&'static str, &'static str) {
        ("armed: crash after commit", "disarmed: crash after commit")
    }

    fn describe(&self) -> Value {
        json!({"pattern": self.source, "commit": self.n, "pgid": self.pgid.as_raw(), "within_ms": self.within.as_millis()})
    }

    async fn inject(&mut self) -> Result<Value> {
        let arm = CrashArm {
            id: self.id,
            pattern: self.pattern.clone(),
            n: self.n,
            seen: 0,
            pgid: self.pgid,
            until: Instant::now() + self.within,
        };
        self.shared.st().crash = Some(arm);
        Ok(json!({}))
    }

    async fn heal(&mut self) -> Result<()> {
        self.heal_now();
        Ok(())
    }

    fn heal_now(&mut self) {
        let mut st = self.shared.st();
        if st.crash.as_ref().is_some_and(|c| c.id == self.id) {
            st.crash = None;
        }
    }
}
