//! The worker's own account of what it did: one JSON event per line, appended to the file the harness
//! names and echoed on stdout (where the harness waits for replies). This is the worker's word only;
//! the harness's checkers judge by the database and its oracle, never by these lines.

use std::fs::File;
use std::io::Write;
use std::sync::Mutex;

use serde::Serialize;
use uuid::Uuid;

#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// Wall-clock time of the event (the worker's clock; informational).
    pub time: chrono::DateTime<chrono::Utc>,
    pub owner: String,
    pub run_id: Option<Uuid>,
    pub epoch: Option<i64>,
    pub revision: Option<i64>,
    pub event: String,
    /// The command id this event answers, when it is an answer.
    pub id: Option<u64>,
    /// "ok" or an error kind (lease_lost, conflict, invalid_state, outcome_unknown, timeout, ...).
    pub outcome: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Structured output of the command (operation ids, dispatch and reconcile reports).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
}

pub struct EventSink {
    file: Mutex<File>,
}

impl EventSink {
    pub fn create(path: &std::path::Path) -> std::io::Result<EventSink> {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        Ok(EventSink { file: Mutex::new(file) })
    }

    pub fn emit(&self, ev: &Event) {
        let mut line = serde_json::to_string(ev).expect("events serialize");
        line.push('\n');
        {
            let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
            let _ = f.write_all(line.as_bytes());
        }
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(line.as_bytes());
        let _ = out.flush();
    }
}
