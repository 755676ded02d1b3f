//! The harness's own timeline: what it did (spawn, command, SIGSTOP, barrier, ...) and when, by its
//! own monotonic clock. Checkers may order events by it; it never depends on what a worker says.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    /// Milliseconds since the experiment's timeline started (monotonic).
    pub at_ms: f64,
    pub wall: chrono::DateTime<chrono::Utc>,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub detail: Value,
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
        let e = Entry {
            at_ms: self.start.elapsed().as_secs_f64() * 1000.0,
            wall: chrono::Utc::now(),
            actor: actor.into(),
            action: action.into(),
            target: target.into(),
            detail,
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
