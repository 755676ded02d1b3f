//! sqlxmq 0.6.0, configured as its documentation says.
//!
//! Schema: the crate's own migrations, copied into `migrations/` as its README asks. A job is a
//! message (`mq_msgs`, payload in `mq_payloads`) on channel `audit`; polling it sets `attempt_at` to
//! now + `retry_backoff` (a visibility timeout, here the audit's stall threshold; it doubles per
//! attempt) and the runner's automatic keep-alive pushes it on while the job runs. Stall recovery is
//! built in: any runner's poll takes a message whose `attempt_at` passed, so `--recover` changes
//! nothing here. Outcomes: success completes the job (`mq_delete` by id); fail and retry return an
//! error without completing it, which the library retries while attempts remain (sqlxmq has no
//! failed state); checkpoint calls `CurrentJob::checkpoint` with a new payload (`mq_checkpoint`).

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use common::{app_name, body, emit, Args, End};
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use sqlxmq::{Checkpoint, CurrentJob, JobBuilder, JobRunnerOptions};

const CHANNEL: &str = "audit";
const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/20210316025847_setup.up.sql"),
    include_str!("../migrations/20210921115907_clear.up.sql"),
    include_str!("../migrations/20211013151757_fix_mq_latest_message.up.sql"),
    include_str!("../migrations/20220208120856_fix_concurrent_poll.up.sql"),
    include_str!("../migrations/20220713122907_fix-clear_all-keep-nil-message.up.sql"),
];

async fn pool(dsn: &str) -> anyhow::Result<PgPool> {
    let opts = PgConnectOptions::from_str(dsn)?.application_name(&app_name());
    Ok(PgPoolOptions::new().max_connections(4).acquire_timeout(Duration::from_secs(10)).connect_with(opts).await?)
}

async fn run_job(args: Args, mut job: CurrentJob) {
    let id = job.id().to_string();
    let (a, jid) = (args.clone(), id.clone());
    // The body's own checkpoint hook does nothing here: the checkpoint is the library's async
    // call, made below once the body came back past its gate.
    let end = tokio::task::spawn_blocking(move || body(&a, &jid, || Ok(()), || Ok(()))).await;
    if args.outcome == "checkpoint" && matches!(end, Ok(Ok(_))) {
        let payload = json!({"progress": args.name}).to_string();
        let mut cp = Checkpoint::new();
        cp.set_raw_json(&payload);
        let r = job.checkpoint(&cp).await;
        emit(
            "written",
            json!({"job": id, "write": "checkpoint", "outcome": r.err().map(|e| e.to_string()).unwrap_or("ok".into())}),
        );
    }
    match end {
        Ok(Ok(End::Success)) => {
            let r = job.complete().await;
            emit(
                "written",
                json!({"job": id, "write": "complete", "outcome": r.err().map(|e| e.to_string()).unwrap_or("ok".into())}),
            );
        }
        Ok(Ok(_)) => {
            emit("written", json!({"job": id, "write": "not completed (retried by the library)", "outcome": "ok"}))
        }
        Ok(Err(e)) => emit("aborted", json!({"job": id, "reason": e})),
        Err(e) => emit("aborted", json!({"job": id, "reason": e.to_string()})),
    }
}

async fn worker(args: Args) -> anyhow::Result<()> {
    let pool = pool(&args.dsn).await?;
    let a = args.clone();
    let mut opts = JobRunnerOptions::new(&pool, move |job| {
        tokio::spawn(run_job(a.clone(), job));
    });
    opts.set_concurrency(1, 1).set_channel_names(&[CHANNEL]);
    let _runner = opts.run().await?;
    emit("ready", json!({"worker": args.name}));
    std::future::pending::<()>().await;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    match args.cmd.as_str() {
        "setup" => {
            let pool = pool(&args.dsn).await?;
            for m in MIGRATIONS {
                sqlx::raw_sql(m).execute(&pool).await.context("sqlxmq migration")?;
            }
            emit("setup", json!({}));
        }
        "enqueue" => {
            let pool = pool(&args.dsn).await?;
            let retries = if args.outcome == "retry" { 4 } else { 1 };
            let id = JobBuilder::new("audit_job")
                .set_channel_name(CHANNEL)
                .set_retries(retries)
                .set_retry_backoff(args.stall())
                .set_json(&json!({"outcome": args.outcome}))?
                .spawn(&pool)
                .await?;
            emit("enqueued", json!({"job": id.to_string()}));
        }
        _ => worker(args).await?,
    }
    Ok(())
}
