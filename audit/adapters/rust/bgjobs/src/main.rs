//! background-jobs 0.20.0 (its tokio runtime, background-jobs-tokio) on its PostgreSQL storage,
//! background-jobs-postgres 0.20.0, configured as its documentation shows.
//!
//! Schema: the storage's own migrations, run by `Storage::connect` (refinery: pgcrypto, the
//! `job_status` enum, the `job_queue` table and its NOTIFY trigger). A job row is `new` or
//! `running`; a worker's `pop` first resets every row whose `heartbeat` is older than five times
//! the job's `heartbeat_interval` (`running` -> `new`, runner and heartbeat cleared), then claims
//! one `new` row. While a job runs its worker writes `heartbeat` (and its `runner_id`) by job id
//! every interval; `complete` deletes the row by id, and a failure with retries left inserts it
//! again. The stall threshold is the job type's `HEARTBEAT_INTERVAL` times five: 400 ms (2 s) at
//! the fast settings, the crate's default 5 s (25 s) at production. Every worker recovers (the
//! reset is part of `pop`), so `--recover` changes nothing. Outcomes: success returns Ok (the row
//! deleted); fail returns an error with no retries (`MaxRetries::Count(0)`: deleted as dead);
//! retry returns an error with retries left (`Count(3)`, `Backoff::Linear(0)`: inserted again,
//! due at once).

use std::sync::OnceLock;

use background_jobs::postgres::Storage;
use background_jobs::{Backoff, BoxError, Job, MaxRetries};
use background_jobs_tokio::WorkerConfig;
use common::{body, emit, Args, End};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The queue every audit job goes to.
const QUEUE: &str = "audit";

/// The worker's arguments, for the job (background-jobs builds it from its stored JSON).
static ARGS: OnceLock<Args> = OnceLock::new();

/// Why the job body did not succeed (background-jobs stores no error text in the row).
#[derive(Debug)]
struct BodyError(String);

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BodyError {}

/// The job body, as the worker was told to end it.
async fn run_body() -> Result<(), BoxError> {
    let args = ARGS.get().cloned().ok_or_else(|| BodyError("no worker arguments".into()))?;
    // background-jobs does not hand the job's id to `run`: the job is named by its worker.
    let job = format!("bgjobs-job-{}", args.name);
    match tokio::task::spawn_blocking(move || body(&args, &job, || Ok(()), || Ok(()))).await? {
        Ok(End::Success) => Ok(()),
        Ok(End::Fail) => Err(BodyError("the audit told this worker to fail".into()).into()),
        Ok(End::Retry) => Err(BodyError("the audit told this worker to retry".into()).into()),
        Err(e) => Err(BodyError(e).into()),
    }
}

/// One job type per (heartbeat interval, retries): both are constants of a job type, written
/// into the row at enqueue.
macro_rules! audit_job {
    ($ty:ident, $name:literal, $heartbeat_ms:literal, $retries:literal) => {
        #[derive(Clone, Debug, Serialize, Deserialize)]
        struct $ty;

        impl Job for $ty {
            type State = ();
            type Error = BoxError;
            const NAME: &'static str = $name;
            const QUEUE: &'static str = QUEUE;
            const MAX_RETRIES: MaxRetries = MaxRetries::Count($retries);
            const BACKOFF: Backoff = Backoff::Linear(0);
            const HEARTBEAT_INTERVAL: u64 = $heartbeat_ms;

            fn run(self, _state: ()) -> impl std::future::Future<Output = Result<(), BoxError>> + Send {
                run_body()
            }
        }
    };
}

audit_job!(FastFinal, "audit_fast_final", 400, 0);
audit_job!(FastRetrying, "audit_fast_retrying", 400, 3);
audit_job!(DefaultFinal, "audit_default_final", 5000, 0);
audit_job!(DefaultRetrying, "audit_default_retrying", 5000, 3);

/// The DSN with this process's application_name (the storage builds its sessions from the URL).
fn url(args: &Args) -> anyhow::Result<url::Url> {
    let mut u = url::Url::parse(&args.dsn)?;
    u.query_pairs_mut().append_pair("application_name", &common::app_name());
    Ok(u)
}

/// The worker: one worker of the audit's queue, every job type registered.
fn worker(storage: Storage) -> anyhow::Result<background_jobs_tokio::JobQueue> {
    let config = WorkerConfig::new(storage, |_| ())
        .register::<FastFinal>()
        .register::<FastRetrying>()
        .register::<DefaultFinal>()
        .register::<DefaultRetrying>()
        .set_worker_count(QUEUE, 1);
    Ok(config.start()?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let storage = Storage::connect(url(&args)?, None).await?;
    match args.cmd.as_str() {
        "setup" => emit("setup", json!({})),
        "enqueue" => {
            // The queue handle without workers: pushing only inserts the row.
            let queue = WorkerConfig::new(storage, |_| ()).start()?;
            let retrying = args.outcome == "retry";
            match (args.settings.as_str(), retrying) {
                ("production", false) => queue.push(DefaultFinal).await,
                ("production", true) => queue.push(DefaultRetrying).await,
                (_, false) => queue.push(FastFinal).await,
                (_, true) => queue.push(FastRetrying).await,
            }
            .map_err(|e| anyhow::anyhow!("{e}"))?;
            emit("enqueued", json!({"job": "bgjobs-job"}));
        }
        _ => {
            let _ = ARGS.set(args.clone());
            let _queue = worker(storage)?;
            emit("ready", json!({"worker": args.name}));
            std::future::pending::<()>().await;
        }
    }
    Ok(())
}
