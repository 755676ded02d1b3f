//! underway 0.2.0, configured as its documentation says.
//!
//! Schema: `underway::run_migrations`. The job is a task on queue `audit`; a worker runs it inside a
//! transaction that first takes a transaction-level advisory lock on the task id, and records a
//! heartbeat every `Task::heartbeat()` (here the audit's stall threshold) from a side task. Stall
//! recovery is built into dequeue: an in-progress task whose last heartbeat is older than its
//! heartbeat interval is dequeued again while attempts remain (retry policy: 5 attempts, 0.1 s
//! apart), found by a poll every 250 ms (`run_every`), so `--recover` changes nothing here. Outcomes: success returns `Ok`, fail returns
//! `Error::Fatal` (no retry), retry returns `Error::Retryable`.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use common::{app_name, body, emit, Args, End};
use serde_json::{json, Value};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres, Transaction};
use underway::task::{Error as TaskError, Result as TaskResult, RetryPolicy};
use underway::{Queue, Task, Worker};

const QUEUE: &str = "audit";

struct AuditTask {
    args: Args,
}

impl Task for AuditTask {
    type Input = Value;
    type Output = ();

    async fn execute(&self, _tx: Transaction<'_, Postgres>, input: Value) -> TaskResult<()> {
        let a = self.args.clone();
        let job = input["job"].as_str().unwrap_or("audit").to_string();
        let end = tokio::task::spawn_blocking(move || body(&a, &job, || Ok(()), || Ok(())))
            .await
            .map_err(|e| TaskError::Retryable(e.to_string()))?;
        match end {
            Ok(End::Success) => Ok(()),
            Ok(End::Fail) => Err(TaskError::Fatal("the audit told this worker to fail".into())),
            Ok(End::Retry) => Err(TaskError::Retryable("the audit told this worker to retry".into())),
            Err(e) => Err(TaskError::Retryable(e)),
        }
    }

    fn heartbeat(&self) -> jiff::Span {
        jiff::Span::new().milliseconds((self.args.stall_s * 1000.0) as i64)
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::builder().max_attempts(5).initial_interval_ms(100).build()
    }
}

async fn pool(dsn: &str) -> anyhow::Result<PgPool> {
    let opts = PgConnectOptions::from_str(dsn)?.application_name(&app_name());
    Ok(PgPoolOptions::new().max_connections(4).acquire_timeout(Duration::from_secs(10)).connect_with(opts).await?)
}

async fn queue(pool: &PgPool) -> anyhow::Result<Queue<AuditTask>> {
    Ok(Queue::builder().name(QUEUE).pool(pool.clone()).build().await?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let pool = pool(&args.dsn).await?;
    match args.cmd.as_str() {
        "setup" => {
            underway::run_migrations(&pool).await?;
            emit("setup", json!({}));
        }
        "enqueue" => {
            let q = queue(&pool).await?;
            let task = AuditTask { args: args.clone() };
            let id = q.enqueue(&pool, &task, &json!({"job": "audit"})).await?;
            emit("enqueued", json!({"job": id.to_string()}));
        }
        _ => {
            let q = queue(&pool).await?;
            let worker = Worker::new(Arc::new(q), AuditTask { args: args.clone() });
            emit("ready", json!({"worker": args.name}));
            // `run()` polls once a minute (new tasks also arrive by NOTIFY); a stalled task is only
            // found by polling, so the tightest documented setting: `run_every` 250 ms.
            worker.run_every(jiff::Span::new().milliseconds(250)).await?;
        }
    }
    Ok(())
}
