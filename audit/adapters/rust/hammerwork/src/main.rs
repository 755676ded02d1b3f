//! hammerwork 3.0.0 on PostgreSQL (feature `postgres`, no optional extras), configured as its
//! crate documentation shows.
//!
//! Schema: the crate's own migrations (`MigrationManager` with `PostgresMigrationRunner`: the
//! `hammerwork_jobs` table and the rest, through `015_add_job_leases` and on). A job is claimed
//! with a lease (`lease_expires_at`) that the worker renews with heartbeats every third of the lease
//! while the handler runs; the pool's stale job reaper (`requeue_stale_jobs`) puts a `Running` job
//! whose lease expired back to `Pending` (or `Dead` with no attempts left). The worker writes a
//! run's outcome and heartbeats only while the row is still that run (id, `Running`, the same
//! `attempts` and `started_at`). The fast settings: a 2 s lease (heartbeat every 0.67 s), the reaper
//! every --sweep-s, a 0.1 s poll; production: the crate's defaults (5 min lease, reaper every 60
//! s, 1 s poll). Every worker's pool runs the reaper, so `--recover` changes nothing. Outcomes:
//! success returns Ok (`Completed`; the job keeps the default `max_attempts`, 3); fail returns an
//! error from a job of `max_attempts` 2 (final at B's run, the second attempt); retry returns an
//! error from a job of `max_attempts` 4, with no retry delay.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use common::{body, emit, Args, End};
use hammerwork::migrations::postgres::PostgresMigrationRunner;
use hammerwork::migrations::MigrationManager;
use hammerwork::queue::DatabaseQueue;
use hammerwork::worker::JobHandler;
use hammerwork::{HammerworkError, Job, JobQueue, Worker, WorkerPool};
use serde_json::json;

/// The queue every audit job goes to.
const QUEUE: &str = "audit";

/// The worker's arguments, for the handler.
static ARGS: OnceLock<Args> = OnceLock::new();

/// The job body, as the worker was told to end it.
async fn run_body(job: Job) -> hammerwork::Result<()> {
    let worker_error = |message: String| HammerworkError::Worker { message };
    let args = ARGS.get().cloned().ok_or_else(|| worker_error("no worker arguments".into()))?;
    let id = job.id.to_string();
    let end = tokio::task::spawn_blocking(move || body(&args, &id, || Ok(()), || Ok(())))
        .await
        .map_err(|e| worker_error(e.to_string()))?;
    match end {
        Ok(End::Success) => Ok(()),
        Ok(End::Fail) => Err(worker_error("the audit told this worker to fail".into())),
        Ok(End::Retry) => Err(worker_error("the audit told this worker to retry".into())),
        Err(e) => Err(worker_error(e)),
    }
}

/// The DSN with this process's application_name.
fn url(args: &Args) -> String {
    let sep = if args.dsn.contains('?') { '&' } else { '?' };
    format!("{}{sep}application_name={}", args.dsn, common::app_name())
}

/// One worker on the audit's queue and its pool (with the reaper), at the cell's settings.
async fn worker(args: Args, queue: Arc<JobQueue<sqlx::Postgres>>) -> anyhow::Result<()> {
    let _ = ARGS.set(args.clone());
    let handler: JobHandler = Arc::new(|job: Job| Box::pin(run_body(job)));
    let mut w = Worker::new(queue, QUEUE.to_string(), handler).with_retry_delay(Duration::ZERO);
    let mut pool = WorkerPool::new();
    if args.settings != "production" {
        w = w.with_lease_duration(args.stall()).with_poll_interval(Duration::from_millis(100));
        pool = pool.with_stale_job_reaper(args.sweep());
    }
    pool.add_worker(w);
    emit("ready", json!({"worker": args.name}));
    pool.start().await?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let pool = sqlx::PgPool::connect(&url(&args)).await?;
    match args.cmd.as_str() {
        "setup" => {
            let manager = MigrationManager::new(Box::new(PostgresMigrationRunner::new(pool)));
            manager.run_migrations().await?;
            emit("setup", json!({}));
        }
        "enqueue" => {
            let queue = JobQueue::new(pool);
            // A's run is attempt 1 and B's, after the reaper, attempt 2: a failure of B's is final
            // at 2 attempts; a retry needs more; a success keeps the crate's default (3).
            let job = Job::new(QUEUE.to_string(), json!({}));
            let job = match args.outcome.as_str() {
                "fail" => job.with_max_attempts(2),
                "retry" => job.with_max_attempts(4),
                _ => job,
            };
            let id = queue.enqueue(job).await?;
            emit("enqueued", json!({"job": id.to_string()}));
        }
        _ => worker(args, Arc::new(JobQueue::new(pool))).await?,
    }
    Ok(())
}
