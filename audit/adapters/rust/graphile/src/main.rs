//! graphile_worker 0.14.1 (the Rust port of Graphile Worker), configured as its documentation says.
//!
//! Schema: `WorkerOptions::init` runs the migrations (schema `graphile_worker`). The job is a task
//! `audit_job`; workers claim with `SKIP LOCKED`, record `locked_by` = their worker id (random per
//! worker instance: the library gives no way to choose it) and `locked_at`. Stall recovery: the
//! optional dead-worker recovery, enabled: heartbeat every --heartbeat-s, sweep every --sweep-s, a
//! worker silent --stall-s is dead (fast: 0.5 s, 0.5 s, 2 s, and its jobs released at once with
//! `recovery_delay` 0; production: the library's defaults, 30 s, 60 s, 5 min, and its own
//! `recovery_delay`); every worker sweeps, so `--recover` changes nothing.
//! Outcomes: success returns `Ok`; fail and retry return an error (the job has 2 attempts for
//! success and fail, the recovery possibly taking one, and 5 for retry).

use std::str::FromStr;
use std::sync::OnceLock;
use std::time::Duration;

use common::{app_name, body, emit, Args, End};
use graphile_worker::{IntoTaskHandlerResult, JobSpec, TaskHandler, WorkerContext, WorkerOptions};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

static ARGS: OnceLock<Args> = OnceLock::new();

#[derive(Debug, Clone, Serialize, Deserialize)]
struct AuditJob {
    job: String,
}

impl TaskHandler for AuditJob {
    const IDENTIFIER: &'static str = "audit_job";

    async fn run(self, _ctx: WorkerContext) -> impl IntoTaskHandlerResult {
        let Some(a) = ARGS.get().cloned() else { return Err("no arguments".to_string()) };
        let end = tokio::task::spawn_blocking(move || body(&a, &self.job, || Ok(()), || Ok(())))
            .await
            .map_err(|e| e.to_string())?;
        match end? {
            End::Success => Ok(()),
            End::Fail => Err("the audit told this worker to fail".to_string()),
            End::Retry => Err("the audit told this worker to retry".to_string()),
        }
    }
}

async fn worker_options(a: &Args) -> anyhow::Result<WorkerOptions> {
    let opts = PgConnectOptions::from_str(&a.dsn)?.application_name(&app_name());
    let pool =
        PgPoolOptions::new().max_connections(4).acquire_timeout(Duration::from_secs(10)).connect_with(opts).await?;
    let options = WorkerOptions::default()
        .pg_pool(pool)
        .schema("graphile_worker")
        .concurrency(1)
        .poll_interval(Duration::from_millis(200))
        .define_job::<AuditJob>()
        .heartbeat_interval(a.heartbeat().unwrap_or(common::TICK))
        .sweep_interval(a.sweep())
        .sweep_threshold(a.stall());
    // Fast settings release a dead worker's jobs at once; production keeps the library's own
    // recovery_delay (WorkerRecoveryConfig::default).
    Ok(if a.settings == "production" { options } else { options.recovery_delay(Duration::ZERO) })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _ = ARGS.set(args.clone());
    let worker = worker_options(&args).await?.init().await?;
    match args.cmd.as_str() {
        "setup" => emit("setup", json!({})),
        "enqueue" => {
            let attempts = if args.outcome == "retry" { 5 } else { 2 };
            let spec = JobSpec { max_attempts: Some(attempts), ..Default::default() };
            let job = worker.create_utils().add_job(AuditJob { job: "audit".into() }, spec).await?;
            emit("enqueued", json!({"job": job.id().to_string()}));
        }
        _ => {
            emit("ready", json!({"worker": args.name}));
            worker.run().await?;
        }
    }
    Ok(())
}
