//! The proxy's faults in the common shape ([`crate::faults::Fault`]): an armed one-shot fault, a
//! latency, a partition and a statement barrier. Each is made by a [`super::Proxy`] method, put in
//! effect by [`crate::faults::inject`] and healed by its guard; all of them only change the
//! proxy's shared state, so every heal is immediate and the heal on drop is the same heal.

use std::sync::Arc;
use std::time::{Duration, Instant};

use regex::Regex;
use serde_json::{json, Value};

use super::{Arm, ArmKind, Fired, HeldStatement, HoldArm, Shared};
use crate::error::{HarnessError, Result};
use crate::faults::Fault;

/// An armed one-shot fault: the next matching transaction's answer or request is lost, or its
/// connection cut. Healing it disarms it if it has not fired.
pub struct Armed {
    pub(super) id: u64,
    pub kind: ArmKind,
    pub(super) pattern: Regex,
    pub(super) source: String,
    pub(super) within: Duration,
    pub(super) shared: Arc<Shared>,
}

impl Armed {
    /// Wait (at most `timeout`) until the fault fired.
    pub async fn fired(&self, timeout: Duration) -> Result<Fired> {
        let until = Instant::now() + timeout;
        loop {
            let mut rx = self.shared.changed.subscribe();
            if let Some((_, f)) = self.shared.st().fired.iter().find(|(id, _)| *id == self.id) {
                return Ok(f.clone());
            }
            if Instant::now() >= until {
                return Err(HarnessError::Timeout {
                    what: format!("the armed {} to fire (no matching statement reached the proxy)", self.kind.as_str()),
                    after_ms: timeout.as_millis(),
                });
            }
            let _ = tokio::time::timeout_at(until.into(), rx.changed()).await;
        }
    }

    /// Disarm, if it has not fired.
    pub fn disarm(&self) {
        let mut st = self.shared.st();
        if st.arm.as_ref().is_some_and(|a| a.id == self.id) {
            st.arm = None;
        }
    }
}

impl Fault for Armed {
    fn name(&self) -> &'static str {
        match self.kind {
            ArmKind::LoseAck => "lost-ack",
            ArmKind::LoseRequest => "lost-request",
            ArmKind::CutInTransaction => "cut-in-transaction",
        }
    }

    fn target(&self) -> String {
        self.shared.name.clone()
    }

    fn actions(&self) -> (&'static str, &'static str) {
        match self.kind {
            ArmKind::LoseAck => ("armed: lost acknowledgement", "disarmed: lost acknowledgement"),
            ArmKind::LoseRequest => ("armed: lost request", "disarmed: lost request"),
            ArmKind::CutInTransaction => ("armed: cut inside a transaction", "disarmed: cut inside a transaction"),
        }
    }

    fn describe(&self) -> Value {
        json!({"pattern": self.source, "within_ms": self.within.as_millis()})
    }

    async fn inject(&mut self) -> Result<Value> {
        let arm =
            Arm { id: self.id, kind: self.kind, pattern: self.pattern.clone(), until: Instant::now() + self.within };
        self.shared.st().arm = Some(arm);
        Ok(json!({}))
    }

    async fn heal(&mut self) -> Result<()> {
        self.heal_now();
        Ok(())
    }

    fn heal_now(&mut self) {
        self.disarm();
    }
}

/// `base` plus up to `jitter` on every reply.
pub struct Latency {
    pub(super) base: Duration,
    pub(super) jitter: Duration,
    pub(super) shared: Arc<Shared>,
}

impl Fault for Latency {
    fn name(&self) -> &'static str {
        "latency"
    }

    fn target(&self) -> String {
        self.shared.name.clone()
    }

    fn actions(&self) -> (&'static str, &'static str) {
        ("latency injected", "latency healed")
    }

    fn describe(&self) -> Value {
        json!({"base_ms": self.base.as_millis(), "jitter_ms": self.jitter.as_millis()})
    }

    async fn inject(&mut self) -> Result<Value> {
        self.shared.st().delay = Some((self.base, self.jitter));
        Ok(json!({}))
    }

    async fn heal(&mut self) -> Result<()> {
        self.heal_now();
        Ok(())
    }

    fn heal_now(&mut self) {
        self.shared.st().delay = None;
    }
}

/// A partition of the worker from the server, for at most `max`.
pub struct Partition {
    pub(super) max: Duration,
    pub(super) shared: Arc<Shared>,
    pub(super) on: bool,
}

impl Fault for Partition {
    fn name(&self) -> &'static str {
        "partition"
    }

    fn target(&self) -> String {
        self.shared.name.clone()
    }

    fn actions(&self) -> (&'static str, &'static str) {
        ("partition injected", "partition healed")
    }

    fn describe(&self) -> Value {
        json!({"max_ms": self.max.as_millis()})
    }

    async fn inject(&mut self) -> Result<Value> {
        self.on = true;
        self.shared.st().partition_until = Some(Instant::now() + self.max);
        self.shared.bump();
        Ok(json!({}))
    }

    async fn heal(&mut self) -> Result<()> {
        self.heal_now();
        Ok(())
    }

    fn heal_now(&mut self) {
        if std::mem::take(&mut self.on) {
            self.shared.st().partition_until = None;
            self.shared.bump();
        }
    }
}

/// A statement barrier: the first `limit` statements matching the pattern are held before they
/// reach the server, for at most `max`; healed by releasing them.
pub struct Hold {
    pub(super) id: u64,
    pub(super) pattern: Regex,
    pub(super) source: String,
    pub(super) limit: usize,
    pub(super) max: Duration,
    pub(super) shared: Arc<Shared>,
}

impl Hold {
    /// Wait (at most `timeout`) until a matching statement is held; returns its connection and SQL.
    pub async fn held(&self, timeout: Duration) -> Result<(u64, String)> {
        let h = self.held_n(1, timeout).await?.remove(0);
        Ok((h.connection, h.sql))
    }

    /// The statements held so far.
    pub fn holding(&self) -> Vec<HeldStatement> {
        self.shared.st().hold.as_ref().filter(|h| h.id == self.id).map(|h| h.held.clone()).unwrap_or_default()
    }

    /// Wait (at most `timeout`) until `n` matching statements are held.
    pub async fn held_n(&self, n: usize, timeout: Duration) -> Result<Vec<HeldStatement>> {
        let until = Instant::now() + timeout;
        loop {
            let mut rx = self.shared.changed.subscribe();
            let now = self.holding();
            if now.len() >= n {
                return Ok(now);
            }
            if Instant::now() >= until {
                return Err(HarnessError::Timeout {
                    what: "a statement matching the barrier's pattern to reach the proxy".into(),
                    after_ms: timeout.as_millis(),
                });
            }
            let _ = tokio::time::timeout_at(until.into(), rx.changed()).await;
        }
    }
}

impl Fault for Hold {
    fn name(&self) -> &'static str {
        "proxy-barrier"
    }

    fn target(&self) -> String {
        self.shared.name.clone()
    }

    fn actions(&self) -> (&'static str, &'static str) {
        ("barrier armed", "barrier released")
    }

    fn describe(&self) -> Value {
        json!({"pattern": self.source, "limit": self.limit, "max_ms": self.max.as_millis()})
    }

    async fn inject(&mut self) -> Result<Value> {
        let until = Instant::now() + self.max;
        let (id, pattern, limit) = (self.id, self.pattern.clone(), self.limit);
        self.shared.st().hold = Some(HoldArm { id, pattern, until, limit, held: Vec::new(), released: false });
        Ok(json!({}))
    }

    async fn heal(&mut self) -> Result<()> {
        self.heal_now();
        Ok(())
    }

    fn heal_now(&mut self) {
        let released = match self.shared.st().hold.as_mut().filter(|h| h.id == self.id && !h.released) {
            Some(h) => {
                h.released = true;
                true
            }
            None => false,
        };
        if released {
            self.shared.bump();
        }
    }
}
