//! The command language the harness speaks to a worker: one JSON object per line on stdin.
//!
//! Each command carries an `id`; the worker answers with exactly one event carrying the same id.
//! Commands run concurrently, so two saves sent back to back really are in flight together.

use fenceproof_protocol::FaultPoints;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Request {
    pub id: u64,
    #[serde(flatten)]
    pub cmd: Command,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Command {
    /// Acquire (or take over) the run's lease and start the heartbeat.
    Acquire { run_id: Uuid, ttl_ms: i64, heartbeat_ms: u64, renew_timeout_ms: u64 },
    /// pending -> running under the held lease.
    Start {
        #[serde(default)]
        expected_revision: Option<i64>,
    },
    /// Save a checkpoint under the held lease (expected_revision defaults to the last one known).
    Save {
        checkpoint: serde_json::Value,
        #[serde(default)]
        expected_revision: Option<i64>,
        #[serde(default)]
        faults: FaultPoints,
    },
    /// running -> succeeded.
    Succeed {
        #[serde(default)]
        expected_revision: Option<i64>,
    },
    /// running -> failed (a business failure).
    Fail {
        #[serde(default)]
        expected_revision: Option<i64>,
    },
    /// One renewal now, outside the heartbeat.
    Renew,
    /// Stop the heartbeat and release the lease.
    Release,
    /// Answer and exit.
    Exit,
}

impl Command {
    pub fn name(&self) -> &'static str {
        match self {
            Command::Acquire { .. } => "acquire",
            Command::Start { .. } => "start",
            Command::Save { .. } => "save",
            Command::Succeed { .. } => "succeed",
            Command::Fail { .. } => "fail",
            Command::Renew => "renew",
            Command::Release => "release",
            Command::Exit => "exit",
        }
    }
}
