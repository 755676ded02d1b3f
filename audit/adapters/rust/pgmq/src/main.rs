//! pgmq 0.33.7 (the Rust crate), used as its documentation says, on PostgreSQL alone.
//!
//! Schema: the crate installs pgmq's own SQL (version 1.11.1, embedded in the crate) without the
//! extension (`PGMQueueExt::install_sql_from_embedded`); the queue `audit` is the table
//! `pgmq.q_audit`. pgmq is a message queue with a visibility timeout, not a job runner: the worker
//! is the consumer loop its documentation describes. `read` takes a visible message (`vt` passed)
//! and makes it invisible for the audit's stall threshold (whole seconds), counting `read_ct`; while
//! the job runs the consumer pushes the timeout on with `set_vt` every 0.5 s (a heartbeat); once
//! the message is visible again any consumer's `read` takes it, so stall recovery is built in and
//! `--recover` changes nothing. Outcomes: success deletes the message (`delete`); fail archives it
//! (`archive`: out of the queue, kept in `pgmq.a_audit`); retry makes it visible at once
//! (`set_vt` 0). Every one of these names the message by its id only.

use std::str::FromStr;
use std::time::Duration;

use common::{app_name, body, emit, Args, End};
use pgmq::PGMQueueExt;
use serde_json::{json, Value};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

const QUEUE: &str = "audit";
/// How often an idle consumer reads.
const POLL: Duration = Duration::from_millis(200);

async fn queue(dsn: &str) -> anyhow::Result<PGMQueueExt> {
    let opts = PgConnectOptions::from_str(dsn)?.application_name(&app_name());
    let pool =
        PgPoolOptions::new().max_connections(4).acquire_timeout(Duration::from_secs(10)).connect_with(opts).await?;
    Ok(PGMQueueExt::new_with_pool(pool).await)
}

/// The visibility timeout in whole seconds (pgmq's unit), at least 1.
fn vt(args: &Args) -> i32 {
    (args.stall_s.round() as i32).max(1)
}

/// Run one message: the body (heartbeat = `set_vt`), then its outcome by message id.
async fn run(args: &Args, q: &PGMQueueExt, msg_id: i64) {
    let (a, id) = (args.clone(), msg_id.to_string());
    let handle = tokio::runtime::Handle::current();
    let hq = q.clone();
    let secs = vt(args);
    let tick = move || {
        handle.block_on(hq.set_vt::<Value>(QUEUE, msg_id, secs)).map(|_| ()).map_err(|e| format!("set_vt refused: {e}"))
    };
    let end = tokio::task::spawn_blocking(move || body(&a, &id, tick, || Ok(()))).await;
    let (write, r) = match end {
        Ok(Ok(End::Success)) => ("delete", q.delete(QUEUE, msg_id).await.map(|found| found.to_string())),
        Ok(Ok(End::Fail)) => ("archive", q.archive(QUEUE, msg_id).await.map(|found| found.to_string())),
        Ok(Ok(End::Retry)) => ("set_vt 0", q.set_vt::<Value>(QUEUE, msg_id, 0).await.map(|_| "ok".into())),
        Ok(Err(e)) => return emit("aborted", json!({"job": msg_id.to_string(), "reason": e})),
        Err(e) => return emit("aborted", json!({"job": msg_id.to_string(), "reason": e.to_string()})),
    };
    let outcome = r.unwrap_or_else(|e| e.to_string());
    emit("written", json!({"job": msg_id.to_string(), "write": write, "outcome": outcome}));
}

/// The consumer loop: read one message at a time, run it, read again.
async fn worker(args: Args) -> anyhow::Result<()> {
    let q = queue(&args.dsn).await?;
    emit("ready", json!({"worker": args.name}));
    loop {
        match q.read::<Value>(QUEUE, vt(&args)).await {
            Ok(Some(m)) => run(&args, &q, m.msg_id).await,
            Ok(None) => tokio::time::sleep(POLL).await,
            Err(e) => {
                eprintln!("read failed: {e}");
                tokio::time::sleep(POLL).await;
            }
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    match args.cmd.as_str() {
        "setup" => {
            let q = queue(&args.dsn).await?;
            q.install_sql_from_embedded().await?;
            q.create(QUEUE).await?;
            emit("setup", json!({}));
        }
        "enqueue" => {
            let q = queue(&args.dsn).await?;
            let id = q.send(QUEUE, &json!({"outcome": args.outcome})).await?;
            emit("enqueued", json!({"job": id.to_string()}));
        }
        _ => worker(args).await?,
    }
    Ok(())
}
