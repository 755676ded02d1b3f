//! The harness's own timeline: what it did (spawn, command, SIGSTOP, barrier, ...) and when, by its
//! own monotonic clock. Checkers may order events by it; it never depends on what a worker says.
//!
//! A fault's steps (see [`crate::faults`]) are entries like any other, with one more field,
//! `fault`: the fault's name, the step (inject, change, heal, ...) and when the step began, so a
//! reader finds every injection and its heal without knowing each fault's own verbs.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    /// Milliseconds since the experiment's timeline started (monotonic).
    pub at_ms: f64,
    pub wall: chrono::DateTime<chrono::Utc>,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub detail: Value,
    /// Set on a fault's steps only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault: Option<FaultMark>,
}

/// Which step of a fault an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultStep {
    /// The fault is in effect (recorded once it is confirmed).
    Inject,
    /// The injection failed; the fault is not in effect.
    InjectFailed,
    /// An injected fault moved (a frozen clock set to another instant).
    Change,
    /// The fault is healed (recorded once the heal is done).
    Heal,
    /// The heal failed.
    HealFailed,
    /// Healed because its guard was dropped without a heal (an error path, an early return).
    HealOnDrop,
}

/// The `fault` field of a fault's entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultMark {
    /// The fault's name (`sigstop`, `server-freeze`, `db-barrier`, ...).
    pub name: String,
    pub step: FaultStep,
    /// When the step began (the entry's `at_ms` is when it was done).
    pub began_ms: f64,
}

#[derive(Clone)]
pub struct Timeline {
    start: Instant,
    entries: Arc<Mutex<Vec<Entry>>>,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline::new()
    }
}

impl Timeline {
    pub fn new() -> Timeline {
        Timeline { start: Instant::now(), entries: Arc::new(Mutex::new(Vec::new())) }
    }

    pub fn record(&self, actor: &str, action: &str, target: &str, detail: Value) {
        self.push(actor, action, target, detail, None);
    }

    /// Record a step of a fault (see [`crate::faults::Injected`], which is what calls it).
    pub fn record_fault(&self, mark: FaultMark, action: &str, target: &str, detail: Value) {
        self.push("harness", action, target, detail, Some(mark));
    }

    fn push(&self, actor: &str, action: &str, target: &str, detail: Value, fault: Option<FaultMark>) {
        let e = Entry {
            at_ms: self.elapsed_ms(),
            wall: chrono::Utc::now(),
            actor: actor.into(),
            action: action.into(),
            target: target.into(),
            detail,
            fault,
        };
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).push(e);
    }

    /// Milliseconds since the timeline started.
    pub fn elapsed_ms(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * 1000.0
    }

    pub fn entries(&self) -> Vec<Entry> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Write the timeline as JSON lines.
    pub fn save(&self, path: &std::path::Path) -> std::io::Result<()> {
        let mut out = String::new();
        for e in self.entries() {
            out.push_str(&serde_json::to_string(&e).expect("json"));
            out.push('\n');
        }
        std::fs::write(path, out)
    }
}
