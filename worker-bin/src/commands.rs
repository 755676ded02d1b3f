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
    Acquire {
        run_id: Uuid,
        ttl_ms: i64,
        heartbeat_ms: u64,
        renew_timeout_ms: u64,
        #[serde(default)]
        faults: FaultPoints,
    },
    /// pending -> running under the held lease.
    Start {
        #[serde(default)]
        expected_revision: Option<i64>,
        #[serde(default)]
        faults: FaultPoints,
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
        #[serde(default)]
        faults: FaultPoints,
    },
    /// running -> failed (a business failure).
    Fail {
        #[serde(default)]
        expected_revision: Option<i64>,
        #[serde(default)]
        faults: FaultPoints,
    },
    /// Save a "step planned" checkpoint and register the step's intent in the same transaction.
    Plan {
        step_id: String,
        tool: String,
        request: serde_json::Value,
        #[serde(default = "one")]
        effect_version: i32,
        #[serde(default)]
        expected_revision: Option<i64>,
        #[serde(default)]
        faults: FaultPoints,
    },
    /// One dispatcher pass: claim up to `limit` prepared operations and call their tools.
    Dispatch {
        #[serde(default = "default_claim_ttl")]
        claim_ttl_ms: i64,
        #[serde(default = "default_call_timeout")]
        call_timeout_ms: u64,
        #[serde(default = "one_i64")]
        limit: i64,
        #[serde(default)]
        faults: FaultPoints,
    },
    /// One reconciler pass.
    Reconcile {
        #[serde(default = "default_call_timeout")]
        call_timeout_ms: u64,
    },
    /// Advance the run (as its lease holder) on the verified result of `operation_id`.
    Advance {
        operation_id: String,
        #[serde(default)]
        expected_revision: Option<i64>,
    },
    /// Control plane: create a run of `task_id` (a retry when the task already had one).
    CreateRun { task_id: String },
    /// Control plane: cancel a run.
    Cancel { run_id: Uuid },
    /// This process's metrics, in Prometheus text format (answered in `data.text`).
    Metrics,
    /// One renewal now, outside the heartbeat.
    Renew,
    /// Stop the heartbeat and release the lease.
    Release,
    /// Play the model's paths (`model/paths.json`) on this worker's database, one run per path,
    /// with the protocol's own statements; the control plane's steps go through `control_url`.
    PlayPaths {
        control_url: SecretArg,
        #[serde(default = "default_grant_ms")]
        grant_ms: i64,
        #[serde(default = "default_call_timeout")]
        call_timeout_ms: u64,
        /// Only the paths to these transitions (all when absent).
        #[serde(default)]
        only: Option<Vec<String>>,
        /// The direct login's URL, for the paths with a step only the spec's own statements take
        /// (when the worker writes through the fp_* functions; without it those are skipped).
        #[serde(default)]
        direct_url: Option<SecretArg>,
        /// The owner's URL of a database standing for the restored server, and the fake tools'
        /// ledger (the remote history its recovery reads), for the paths with a restore (without
        /// them those are skipped).
        #[serde(default)]
        restored_url: Option<SecretArg>,
        #[serde(default)]
        tools_ledger: Option<String>,
    },
    /// Answer and exit.
    Exit,
}

/// A value the harness marks secret, `{"$secret": {"name": N, "value": V}}`: the timeline keeps
/// its name only.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct SecretArg {
    #[serde(rename = "$secret")]
    pub secret: NamedSecret,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct NamedSecret {
    pub name: String,
    pub value: String,
}

fn default_grant_ms() -> i64 {
    300
}

fn one() -> i32 {
    1
}
fn one_i64() -> i64 {
    1
}
fn default_claim_ttl() -> i64 {
    5000
}
fn default_call_timeout() -> u64 {
    5000
}

impl Command {
    pub fn name(&self) -> &'static str {
        match self {
            Command::Acquire { .. } => "acquire",
            Command::Start { .. } => "start",
            Command::Save { .. } => "save",
            Command::Succeed { .. } => "succeed",
            Command::Fail { .. } => "fail",
            Command::Plan { .. } => "plan",
            Command::Dispatch { .. } => "dispatch",
            Command::Reconcile { .. } => "reconcile",
            Command::Advance { .. } => "advance",
            Command::CreateRun { .. } => "create_run",
            Command::Cancel { .. } => "cancel",
            Command::Metrics => "metrics",
            Command::Renew => "renew",
            Command::Release => "release",
            Command::PlayPaths { .. } => "play_paths",
            Command::Exit => "exit",
        }
    }
}
