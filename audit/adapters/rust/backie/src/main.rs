//! backie 0.9.0 (its async PostgreSQL store on diesel-async), configured as its README says.
//!
//! Schema: backie's diesel migration (`migrations/2023-03-06-151907_create_backie_tasks/up.sql` of
//! the crate: the `uuid-ossp` extension and the `backie_tasks` table), written here as SQL because
//! the crate ships it for the diesel CLI. A task row has no status column: it is ready while
//! `running_at` is null, running once set, finished once `done_at` is set or the row is deleted.
//! The worker is a `WorkerPool` with one worker on the `default` queue, polling every --sweep-s,
//! `RetentionMode::RemoveAll` (a finished task's row is deleted whatever its outcome: backie's
//! default, `RemoveDone`, keeps failures), and `execution_timeout` = --stall-s: a pull also takes a
//! task whose `running_at` is older than it (`Task::fetch_next_pending`). backie's default sets no
//! execution timeout, so at the production settings the adapter sets none (nothing is recovered).
//! Every worker recovers as it pulls, so `--recover` changes nothing. Outcomes: success returns Ok;
//! fail returns an error from a task type with `MAX_RETRIES` 0; retry returns an error from one
//! with 3 (`BackoffMode::NoBackoff`: `running_at` cleared, due at once).

use std::sync::OnceLock;

use async_trait::async_trait;
use backie::{
    BackgroundTask, BackgroundTaskExt, BackoffMode, CurrentTask, PgTaskStore, QueueConfig, RetentionMode, WorkerPool,
};
use common::{body, emit, Args, End};
use diesel_async::pooled_connection::bb8::Pool;
use diesel_async::pooled_connection::AsyncDieselConnectionManager;
use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The queue every audit task goes to (backie's default).
const QUEUE: &str = "default";

/// backie's table, as its migration creates it.
const SCHEMA: &str = r#"
CREATE EXTENSION IF NOT EXISTS "uuid-ossp";
CREATE TABLE backie_tasks (
    id uuid PRIMARY KEY DEFAULT uuid_generate_v4(),
    task_name VARCHAR NOT NULL,
    queue_name VARCHAR DEFAULT 'common' NOT NULL,
    uniq_hash CHAR(64) DEFAULT NULL,
    payload jsonb NOT NULL,
    timeout_msecs INT8 NOT NULL,
    created_at TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT NOW(),
    scheduled_at TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT NOW(),
    running_at TIMESTAMP WITH TIME ZONE DEFAULT NULL,
    done_at TIMESTAMP WITH TIME ZONE DEFAULT NULL,
    error_info jsonb DEFAULT NULL,
    retries INTEGER DEFAULT 0 NOT NULL,
    max_retries INTEGER DEFAULT 0 NOT NULL,
    backoff_mode jsonb NOT NULL
);
CREATE UNIQUE INDEX backie_tasks_uniq_hash_index ON backie_tasks(uniq_hash) WHERE uniq_hash IS NOT NULL;
"#;

/// The worker's arguments, for the task (backie builds it from its stored JSON).
static ARGS: OnceLock<Args> = OnceLock::new();

/// The job body, as the worker was told to end it.
async fn run_body(task: CurrentTask) -> Result<(), String> {
    let args = ARGS.get().cloned().ok_or("no worker arguments")?;
    let job = format!("backie-task-{:?}", task.id());
    match tokio::task::spawn_blocking(move || body(&args, &job, || Ok(()), || Ok(()))).await {
        Ok(Ok(End::Success)) => Ok(()),
        Ok(Ok(End::Fail)) => Err("the audit told this worker to fail".into()),
        Ok(Ok(End::Retry)) => Err("the audit told this worker to retry".into()),
        Ok(Err(e)) => Err(e),
        Err(e) => Err(e.to_string()),
    }
}

/// One task type per retry budget: `MAX_RETRIES` is a constant of the type, written into the row.
macro_rules! audit_task {
    ($ty:ident, $name:literal, $retries:literal) => {
        #[derive(Serialize, Deserialize)]
        struct $ty;

        #[async_trait]
        impl BackgroundTask for $ty {
            const TASK_NAME: &'static str = $name;
            const QUEUE: &'static str = QUEUE;
            const MAX_RETRIES: i32 = $retries;
            const BACKOFF_MODE: BackoffMode = BackoffMode::NoBackoff;
            type AppData = ();
            type Error = String;

            async fn run(&self, task: CurrentTask, _context: ()) -> Result<(), String> {
                run_body(task).await
            }
        }
    };
}

audit_task!(FinalTask, "audit_final", 0);
audit_task!(RetryingTask, "audit_retrying", 3);

/// The DSN with this process's application_name (diesel-async connects with the URL alone).
fn url(args: &Args) -> anyhow::Result<String> {
    let mut u = url::Url::parse(&args.dsn)?;
    u.query_pairs_mut().append_pair("application_name", &common::app_name());
    Ok(u.to_string())
}

/// The queue's configuration at the cell's settings.
fn queue_config(args: &Args) -> QueueConfig {
    let config =
        QueueConfig::new(QUEUE).num_workers(1).retention_mode(RetentionMode::RemoveAll).pull_interval(args.sweep());
    match args.settings.as_str() {
        // backie's default: no execution timeout, so no task is ever taken back.
        "production" => config,
        _ => config.execution_timeout(args.stall()),
    }
}

async fn worker(args: Args, pool: Pool<AsyncPgConnection>) -> anyhow::Result<()> {
    let _ = ARGS.set(args.clone());
    let _pool = WorkerPool::new(PgTaskStore::new(pool), || ())
        .register_task_type::<FinalTask>()
        .register_task_type::<RetryingTask>()
        .configure_queue(queue_config(&args))
        .start(std::future::pending::<()>())
        .await
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    emit("ready", json!({"worker": args.name}));
    std::future::pending::<()>().await;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let url = url(&args)?;
    match args.cmd.as_str() {
        "setup" => {
            let mut conn = AsyncPgConnection::establish(&url).await?;
            conn.batch_execute(SCHEMA).await?;
            emit("setup", json!({}));
        }
        "enqueue" => {
            let mut conn = AsyncPgConnection::establish(&url).await?;
            let pushed = match args.outcome.as_str() {
                "retry" => RetryingTask.enqueue::<PgTaskStore>(&mut conn).await,
                _ => FinalTask.enqueue::<PgTaskStore>(&mut conn).await,
            };
            pushed.map_err(|e| anyhow::anyhow!("{e:?}"))?;
            emit("enqueued", json!({"job": "backie-task"}));
        }
        _ => {
            let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new(url);
            let pool = Pool::builder().max_size(4).build(manager).await?;
            worker(args, pool).await?;
        }
    }
    Ok(())
}
