//! What an experiment gets: a fresh database with the oracle, a control-plane pool, the harness's
//! timeline, its own folder in the run's report, and a way to spawn worker processes.

use std::path::PathBuf;
use std::time::Duration;

use fenceproof_harness::check::Check;
use fenceproof_harness::procs::worker::{WorkerProc, WorkerSpec};
use fenceproof_harness::record::timeline::Timeline;
use fenceproof_harness::HarnessError;
use sqlx::PgPool;

/// The application_name of the harness's control-plane session (setup, cancel, observation).
pub const CONTROL: &str = "fenceproof-control";

/// Default bound on any single wait inside an experiment.
pub const STEP: Duration = Duration::from_secs(15);

pub struct Ctx {
    pub id: String,
    pub dir: PathBuf,
    pub db_url: String,
    /// Control-plane / observer pool (application_name = CONTROL).
    pub pool: PgPool,
    pub timeline: Timeline,
    pub worker_bin: PathBuf,
    /// Checks accumulated by the experiment.
    pub checks: Vec<Check>,
    /// Key observations for the matrix row.
    pub notes: Vec<String>,
}

impl Ctx {
    /// Start a worker process named `name` with a fresh owner id.
    pub async fn spawn_worker(&self, name: &str, extra_args: Vec<String>) -> Result<WorkerProc, HarnessError> {
        let owner = format!("worker-{name}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        WorkerProc::spawn(
            WorkerSpec {
                name: name.into(),
                owner,
                binary: self.worker_bin.clone(),
                database_url: self.db_url.clone(),
                dir: self.dir.clone(),
                extra_args,
            },
            self.timeline.clone(),
        )
        .await
    }

    pub fn check(&mut self, c: Check) {
        self.checks.push(c);
    }

    pub fn note(&mut self, s: impl Into<String>) {
        self.notes.push(s.into());
    }

    /// The oracle's highest commit sequence number so far (0 when none).
    pub async fn oracle_mark(&self) -> Result<i64, HarnessError> {
        Ok(sqlx::query_scalar("SELECT coalesce(max(seq), 0) FROM fenceproof_oracle.commits")
            .fetch_one(&self.pool)
            .await?)
    }
}

/// The outcome field of a worker's answer.
pub fn outcome(ev: &serde_json::Value) -> &str {
    ev["outcome"].as_str().unwrap_or("?")
}

/// Fail the experiment (as an error, not a verdict) when a setup step did not succeed.
pub fn require_ok(ev: &serde_json::Value, step: &str) -> Result<(), HarnessError> {
    if outcome(ev) == "ok" {
        Ok(())
    } else {
        Err(HarnessError::Other(format!("setup step {step} did not succeed: {ev}")))
    }
}
