//! rexecutor 0.1.1 with its PostgreSQL backend, rexecutor-sqlx 0.1.1, configured as its README says.
//!
//! Schema: the backend's own migration (`RexecutorPgBackend::run_migrations`: the
//! `rexecutor_job_state` enum, the `rexecutor_jobs` table and its NOTIFY triggers). A job is one
//! `Executor`; the worker is `Rexecutor::new(backend).with_executor::<AuditJob>()`, whose runner
//! claims a job with one UPDATE (`load_job_mark_as_executing_for_executor`: `scheduled` or
//! `retryable` -> `executing`, `FOR UPDATE SKIP LOCKED`) and writes the outcome by job id. Nothing
//! in either crate moves an `executing` job back: no heartbeat, no lease, no recovery, so
//! `--recover` has nothing to run and the stall settings are not used. Outcomes: success returns
//! `Done` (`complete`); fail returns `Cancel` (`cancelled`, never retried); retry returns `Error`
//! with attempts left (`retryable`, at once: the backoff is zero).

use std::sync::OnceLock;

use async_trait::async_trait;
use chrono::TimeDelta;
use common::{body, emit, Args, End};
use rexecutor::prelude::*;
use rexecutor_sqlx::RexecutorPgBackend;
use serde_json::json;

/// The worker's arguments, for the executor (rexecutor calls it by its type).
static ARGS: OnceLock<Args> = OnceLock::new();

/// The retry outcome's error (rexecutor stores its type and text in the job's `errors`).
#[derive(Debug)]
struct RetryRequested;

impl std::fmt::Display for RetryRequested {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the audit told this worker to retry")
    }
}

impl std::error::Error for RetryRequested {}

impl ExecutionError for RetryRequested {
    fn error_type(&self) -> &'static str {
        "audit_retry"
    }
}

/// The audited job.
struct AuditJob;

#[async_trait]
impl Executor for AuditJob {
    type Data = ();
    type Metadata = ();
    const NAME: &'static str = "audit_job";
    const MAX_ATTEMPTS: u16 = 4;

    async fn execute(job: Job<Self::Data, Self::Metadata>) -> ExecutionResult {
        let Some(args) = ARGS.get().cloned() else {
            return ExecutionResult::Cancel { reason: Box::new("no arguments") };
        };
        let id = format!("rexecutor-job-{}", i32::from(job.id));
        let end = tokio::task::spawn_blocking(move || body(&args, &id, || Ok(()), || Ok(()))).await;
        match end {
            Ok(Ok(End::Success)) => ExecutionResult::Done,
            Ok(Ok(End::Fail)) => ExecutionResult::Cancel { reason: Box::new("the audit told this worker to fail") },
            Ok(Ok(End::Retry)) => RetryRequested.into(),
            Ok(Err(e)) => ExecutionResult::Cancel { reason: Box::new(e) },
            Err(e) => ExecutionResult::Cancel { reason: Box::new(e.to_string()) },
        }
    }

    fn backoff(_job: &Job<Self::Data, Self::Metadata>) -> TimeDelta {
        TimeDelta::zero()
    }
}

/// The DSN with this process's application_name (the backend builds its pool from the URL alone).
fn url(args: &Args) -> String {
    let sep = if args.dsn.contains('?') { '&' } else { '?' };
    format!("{}{sep}application_name={}", args.dsn, common::app_name())
}

async fn backend(args: &Args) -> anyhow::Result<RexecutorPgBackend> {
    RexecutorPgBackend::from_db_url(&url(args)).await.map_err(|e| anyhow::anyhow!("{e:?}"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let backend = backend(&args).await?;
    match args.cmd.as_str() {
        "setup" => {
            backend.run_migrations().await.map_err(|e| anyhow::anyhow!("{e:?}"))?;
            emit("setup", json!({}));
        }
        "enqueue" => {
            let id = AuditJob::builder().with_data(()).enqueue_to_backend(&backend).await?;
            emit("enqueued", json!({"job": i32::from(id).to_string()}));
        }
        _ => {
            let _ = ARGS.set(args.clone());
            let _guard = Rexecutor::new(backend).with_executor::<AuditJob>().drop_guard();
            emit("ready", json!({"worker": args.name}));
            std::future::pending::<()>().await;
        }
    }
    Ok(())
}
