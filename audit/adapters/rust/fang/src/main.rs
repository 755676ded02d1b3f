//! fang 0.11.0 (its async worker on PostgreSQL through sqlx), configured as its documentation says.
//!
//! Schema: fang's PostgreSQL migration (`postgres_migrations/.../create_fang_tasks/up.sql` of the
//! crate: the `fang_task_state` enum and the `fang_tasks` table), written here as SQL because the
//! crate runs its migrations through diesel, which this adapter does not build. A job is one
//! `AsyncRunnable` task; the worker is an `AsyncWorkerPool` of one worker polling every 0.2 s, with
//! `RetentionMode::KeepAll` so the row keeps its final state. fang has no stall recovery: a fetch
//! takes only `new` and `retried` tasks (`fetch_task_type.sql`), so a task left `in_progress` by a
//! paused or dead worker is never fetched again, and `--recover` has nothing to run. Outcomes:
//! success returns Ok (`finished`); fail returns an error with no retries allowed (`failed`);
//! retry returns an error with retries left (`retried`, scheduled after fang's backoff).

use std::sync::OnceLock;
use std::time::Duration;

use common::{body, emit, Args, End};
use fang::asynk::async_queue::{AsyncQueue, AsyncQueueable};
use fang::asynk::async_worker_pool::AsyncWorkerPool;
use fang::typetag;
use fang::{async_trait, AsyncRunnable, FangError, RetentionMode, SleepParams};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::Executor;

/// The worker's arguments, for the task (fang builds it from its stored JSON).
static ARGS: OnceLock<Args> = OnceLock::new();

/// fang's PostgreSQL schema, as its migration creates it.
const SCHEMA: &str = r#"
CREATE EXTENSION IF NOT EXISTS "uuid-ossp";
CREATE TYPE fang_task_state AS ENUM ('new', 'in_progress', 'failed', 'finished', 'retried');
CREATE TABLE fang_tasks (
     id uuid PRIMARY KEY DEFAULT uuid_generate_v4(),
     metadata jsonb NOT NULL,
     error_message TEXT,
     state fang_task_state DEFAULT 'new' NOT NULL,
     task_type TEXT DEFAULT 'common' NOT NULL,
     uniq_hash TEXT,
     retries INTEGER DEFAULT 0 NOT NULL,
     scheduled_at TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT NOW(),
     created_at TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT NOW(),
     updated_at TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT NOW()
);
CREATE INDEX fang_tasks_state_index ON fang_tasks(state);
CREATE INDEX fang_tasks_type_index ON fang_tasks(task_type);
CREATE INDEX fang_tasks_scheduled_at_index ON fang_tasks(scheduled_at);
CREATE INDEX fang_tasks_uniq_hash ON fang_tasks(uniq_hash);
"#;

/// The audited job: how many retries fang may make is fixed at enqueue (3 for the retry outcome).
#[derive(Serialize, Deserialize)]
struct AuditJob {
    retries: i32,
}

#[typetag::serde]
#[async_trait]
impl AsyncRunnable for AuditJob {
    async fn run(&self, _queue: &dyn AsyncQueueable) -> Result<(), FangError> {
        let args = ARGS.get().cloned().ok_or_else(|| FangError { description: "no worker arguments".into() })?;
        // fang does not hand the task's id to the runnable; the adapter names the job by its worker.
        let job = format!("fang-task-{}", args.name);
        let end = tokio::task::spawn_blocking(move || body(&args, &job, || Ok(()), || Ok(())))
            .await
            .map_err(|e| FangError { description: e.to_string() })?;
        match end {
            Ok(End::Success) => Ok(()),
            Ok(End::Fail) => Err(FangError { description: "the audit told this worker to fail".into() }),
            Ok(End::Retry) => Err(FangError { description: "the audit told this worker to retry".into() }),
            Err(e) => Err(FangError { description: e }),
        }
    }

    fn max_retries(&self) -> i32 {
        self.retries
    }

    fn backoff(&self, _attempt: u32) -> u32 {
        0
    }
}

/// The DSN with this process's application_name (fang builds its pool from the URI alone).
fn uri(args: &Args) -> String {
    let sep = if args.dsn.contains('?') { '&' } else { '?' };
    format!("{}{sep}application_name={}", args.dsn, common::app_name())
}

async fn queue(args: &Args) -> anyhow::Result<AsyncQueue> {
    let mut q = AsyncQueue::builder().uri(uri(args)).max_pool_size(4_u32).build();
    q.connect().await?;
    Ok(q)
}

async fn worker(args: Args) -> anyhow::Result<()> {
    let q = queue(&args).await?;
    let _ = ARGS.set(args.clone());
    let poll = Duration::from_millis(200);
    let sleep = SleepParams { sleep_period: poll, max_sleep_period: poll, min_sleep_period: poll, sleep_step: poll };
    let mut pool: AsyncWorkerPool<AsyncQueue> = AsyncWorkerPool::builder()
        .number_of_workers(1_u32)
        .queue(q)
        .sleep_params(sleep)
        .retention_mode(RetentionMode::KeepAll)
        .build();
    pool.start().await;
    emit("ready", json!({"worker": args.name}));
    std::future::pending::<()>().await;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    match args.cmd.as_str() {
        "setup" => {
            let pool = sqlx::PgPool::connect(&uri(&args)).await?;
            pool.execute(SCHEMA).await?;
            emit("setup", json!({}));
        }
        "enqueue" => {
            let q = queue(&args).await?;
            let retries = if args.outcome == "retry" { 3 } else { 0 };
            let task = q.insert_task(&AuditJob { retries }).await?;
            emit("enqueued", json!({"job": task.id.to_string()}));
        }
        _ => worker(args).await?,
    }
    Ok(())
}
