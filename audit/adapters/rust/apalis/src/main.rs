//! apalis 1.0.0 with apalis-postgres 1.0.0, configured as their documentation says.
//!
//! Schema: `PostgresStorage::setup` (the crate's migrations). The job is a task on queue `audit`;
//! a worker registers under its name (`WorkerBuilder::new(name)`: the name the same-name restart
//! reuses) and beats every `heartbeat_interval` (here 1 s); `missed_heartbeats` 2 makes a worker
//! silent for 2 s (the audit's stall threshold) orphaned, and every worker's heartbeat re-enqueues
//! the tasks of orphaned workers (`reenqueue_orphaned`), so `--recover` changes nothing here. A
//! task's result is written where `lock_by` is the worker's name. Outcomes: success returns `Ok`;
//! fail and retry return an error (apalis-postgres retries a failed task while attempts remain).

use std::str::FromStr;
use std::time::Duration;

use apalis::prelude::*;
use apalis_postgres::PgConnectOptions;
use apalis_postgres::PgPool;
use apalis_postgres::{Config, PostgresStorage};
use common::{app_name, body, emit, Args, End};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::postgres::PgPoolOptions;

const QUEUE: &str = "audit";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct AuditJob {
    job: String,
}

async fn pool(dsn: &str) -> anyhow::Result<PgPool> {
    let opts = PgConnectOptions::from_str(dsn)?.application_name(&app_name());
    Ok(PgPoolOptions::new().max_connections(4).acquire_timeout(Duration::from_secs(10)).connect_with(opts).await?)
}

fn storage(pool: &PgPool, a: &Args) -> PostgresStorage<AuditJob> {
    let stall = a.stall();
    let config = Config::default().queue(QUEUE).heartbeat_interval(stall / 2).missed_heartbeats(2).batch_size(1);
    PostgresStorage::new(pool).with_config(config)
}

async fn handle(job: AuditJob, args: Data<Args>) -> Result<(), BoxDynError> {
    let a: Args = (*args).clone();
    let end = tokio::task::spawn_blocking(move || body(&a, &job.job, || Ok(()), || Ok(()))).await?;
    match end? {
        End::Success => Ok(()),
        End::Fail => Err("the audit told this worker to fail".into()),
        End::Retry => Err("the audit told this worker to retry".into()),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let pool = pool(&args.dsn).await?;
    match args.cmd.as_str() {
        "setup" => {
            PostgresStorage::<()>::setup(&pool).await?;
            emit("setup", json!({}));
        }
        "enqueue" => {
            let mut s = storage(&pool, &args);
            s.push(AuditJob { job: "audit".into() }).await.map_err(|e| anyhow::anyhow!("{e:?}"))?;
            emit("enqueued", json!({"job": "audit"}));
        }
        _ => {
            let s = storage(&pool, &args);
            let worker = WorkerBuilder::new(args.owner.as_str()).backend(s).data(args.clone()).build(handle);
            emit("ready", json!({"worker": args.name}));
            worker.run().await.map_err(|e| anyhow::anyhow!("{e:?}"))?;
        }
    }
    Ok(())
}
