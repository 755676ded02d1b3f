//! fenceproof-worker: a worker process under test. The harness spawns it, drives it with JSON-line
//! commands on stdin (or lets it run one scripted task alone), and pauses, resumes or kills it with
//! real signals. It connects with `application_name` = its owner id so the database — and the
//! harness's oracle — can tell its writes apart.
//!
//! This library is the whole program; two binaries call [`main`]: `fenceproof-worker` (the
//! reference build) and `fenceproof-worker-mutant` (only with the `mutants` feature, which adds
//! `--mutant NAME`). Both build in the same target folder and share every dependency.

mod adapter;
mod commands;
mod events;
mod paths;
mod script;
mod session;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::io::AsyncBufReadExt;

use crate::commands::{Command, Request};
use crate::events::EventSink;
use crate::session::Session;

#[derive(Parser, Debug)]
#[command(name = "fenceproof-worker", about = "A reference worker process driven by the fenceproof harness")]
struct Args {
    /// PostgreSQL URL of the database under test.
    #[arg(long, required_unless_present = "list_mutants")]
    database_url: Option<String>,
    /// This session's owner id (also its application_name).
    #[arg(long, required_unless_present = "list_mutants")]
    owner: Option<String>,
    /// File to append one JSON event per line to.
    #[arg(long, required_unless_present = "list_mutants")]
    events: Option<PathBuf>,
    /// Print the mutants this build can run, one per line, and exit (non-zero in the reference
    /// build, which has none).
    #[arg(long)]
    list_mutants: bool,
    /// Run as this named broken variant of the protocol (mutants build only).
    #[cfg(feature = "mutants")]
    #[arg(long)]
    mutant: Option<String>,
    /// Run one direct-path statement in a generated mutated form: a JSON file
    /// `{"name": "<statement>", "sql": "<text>"}` (mutants build only; `fenceproof mutants sql`).
    #[cfg(feature = "mutants")]
    #[arg(long)]
    sql_mutant: Option<PathBuf>,
    /// Say on stderr the first time each direct-path statement runs (mutants build only;
    /// `fenceproof mutants sql` learns from the reference which rows reach which statement).
    #[cfg(feature = "mutants")]
    #[arg(long)]
    report_statements: bool,
    /// How writes reach the database: `api` calls only the fenced fp_* functions (what the
    /// fenceproof_worker role is allowed), `direct` runs the statements on the tables. Default: api,
    /// or direct when a mutant is chosen (mutants live on the direct path).
    #[arg(long, value_parser = ["api", "direct"])]
    write_path: Option<String>,
    /// Run one whole task alone instead of reading commands from stdin.
    #[arg(long)]
    script: bool,
    /// Scripted mode: the run to work on.
    #[arg(long)]
    run_id: Option<uuid::Uuid>,
    /// Scripted mode: number of checkpoint steps.
    #[arg(long, default_value_t = 3)]
    steps: u32,
    /// Scripted mode: pause between steps in milliseconds (stands for real work).
    #[arg(long, default_value_t = 0)]
    pace_ms: u64,
    /// Lease TTL in milliseconds (scripted mode).
    #[arg(long, default_value_t = 5000)]
    ttl_ms: i64,
    /// Heartbeat interval in milliseconds (scripted mode).
    #[arg(long, default_value_t = 1000)]
    heartbeat_ms: u64,
    /// Timeout of one renewal in milliseconds (scripted mode).
    #[arg(long, default_value_t = 1000)]
    renew_timeout_ms: u64,
    /// Address of the fake tools (host:port), for dispatch and reconcile commands.
    #[arg(long)]
    tools_addr: Option<std::net::SocketAddr>,
    /// Secret store shared with the dispatchers (a directory): secret fields of planned requests
    /// are kept there, never in the ledger.
    #[arg(long)]
    secrets_dir: Option<PathBuf>,
    /// Trace id put on every log line (the harness passes one per experiment).
    #[arg(long, default_value = "")]
    trace_id: String,
    /// Tenant component of planned operation_ids.
    #[arg(long, default_value = "tenant1")]
    tenant: String,
    /// How long to wait for a database connection from the pool (which keeps reconnecting), in ms.
    #[arg(long, default_value_t = 10_000)]
    acquire_timeout_ms: u64,
    /// Upper bound on any one command, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    command_timeout_ms: u64,
}

/// The worker process: parse the command line, run, and say how it ended.
pub fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if args.list_mutants {
        return list_mutants();
    }
    let mutant_chosen = match choose_mutant(&args) {
        Ok(chosen) => chosen,
        Err(code) => return code,
    };
    let path = match (args.write_path.as_deref(), mutant_chosen) {
        (Some("api"), true) => {
            eprintln!("fenceproof-worker: a mutant lives on the direct write path; use --write-path direct");
            return std::process::ExitCode::from(2);
        }
        (Some(p), _) => fenceproof_protocol::write_path::WritePath::parse(p).unwrap_or_default(),
        (None, true) => fenceproof_protocol::write_path::WritePath::Direct,
        (None, false) => fenceproof_protocol::write_path::WritePath::Api,
    };
    fenceproof_protocol::write_path::choose(path);
    init_logging();
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    match rt.block_on(run(args)) {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            eprintln!("fenceproof-worker: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

/// JSON logs on stderr, plus the layer that lets the protocol see server notices (the
/// synchronous-replication cancel trap).
fn init_logging() {
    use fenceproof_protocol::notices::{NoticeLayer, NOTICE_TARGET};
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::prelude::*;
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().json().with_writer(std::io::stderr).with_filter(LevelFilter::INFO))
        .with(NoticeLayer.with_filter(Targets::new().with_target(NOTICE_TARGET, LevelFilter::TRACE)))
        .init();
}

/// Activate `--mutant` and `--sql-mutant`; whether one was chosen, or the exit code of a bad one.
#[cfg(feature = "mutants")]
fn choose_mutant(args: &Args) -> Result<bool, std::process::ExitCode> {
    if let Some(name) = &args.mutant {
        match fenceproof_protocol::mutant::Mutant::parse(name) {
            Some(m) => {
                fenceproof_protocol::mutant::activate(m);
            }
            None => {
                eprintln!("fenceproof-worker: unknown mutant '{name}' (see --list-mutants)");
                return Err(std::process::ExitCode::from(2));
            }
        }
    }
    if args.report_statements {
        fenceproof_protocol::sql::report_statements();
    }
    if let Some(file) = &args.sql_mutant {
        let parsed = std::fs::read_to_string(file)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).map_err(|e| e.to_string()));
        let ok = match &parsed {
            Ok(v) => match (v["name"].as_str(), v["sql"].as_str()) {
                (Some(name), Some(sql)) => fenceproof_protocol::sql::set_override(name, sql),
                _ => false,
            },
            Err(_) => false,
        };
        if !ok {
            eprintln!("fenceproof-worker: --sql-mutant {}: not a statement override ({parsed:?})", file.display());
            return Err(std::process::ExitCode::from(2));
        }
    }
    Ok(args.mutant.is_some() || args.sql_mutant.is_some())
}

/// The reference build has no mutants to choose.
#[cfg(not(feature = "mutants"))]
fn choose_mutant(_args: &Args) -> Result<bool, std::process::ExitCode> {
    Ok(false)
}

#[cfg(feature = "mutants")]
fn list_mutants() -> std::process::ExitCode {
    for m in fenceproof_protocol::mutant::Mutant::ALL {
        println!("{}\t{}", m.name(), m.rule());
    }
    std::process::ExitCode::SUCCESS
}

#[cfg(not(feature = "mutants"))]
fn list_mutants() -> std::process::ExitCode {
    eprintln!(
        "fenceproof-worker: this is the reference build; it has no mutants (build them with `just build-mutants`)"
    );
    std::process::ExitCode::from(3)
}

async fn run(args: Args) -> anyhow::Result<u8> {
    let session = connect(&args).await?;
    session.emit("ready", None, session::Outcome::note("ok", format!("pid {}", std::process::id())));
    if args.script {
        return run_script(&session, &args).await;
    }
    serve(session, Duration::from_millis(args.command_timeout_ms)).await
}

/// Connect with `application_name` = the owner id, open the events file and the secret store.
async fn connect(args: &Args) -> anyhow::Result<Arc<Session>> {
    let (Some(database_url), Some(owner), Some(events)) =
        (args.database_url.clone(), args.owner.clone(), args.events.clone())
    else {
        anyhow::bail!("--database-url, --owner and --events are required");
    };
    let opts: PgConnectOptions = database_url.parse().context("bad --database-url")?;
    let pool = PgPoolOptions::new()
        .max_connections(6)
        .acquire_timeout(Duration::from_millis(args.acquire_timeout_ms))
        .connect_with(opts.application_name(&owner))
        .await
        .context("connecting to the database")?;
    let sink = Arc::new(EventSink::create(&events).with_context(|| format!("opening {}", events.display()))?);
    let secrets = match &args.secrets_dir {
        Some(dir) => Some(fenceproof_protocol::secrets::SecretStore::new(dir)?),
        None => None,
    };
    Ok(Session::new(owner, args.trace_id.clone(), args.tenant.clone(), args.tools_addr, secrets, pool, sink))
}

/// Scripted mode: one whole task alone; 0 when it finished, 4 when it stopped.
async fn run_script(session: &Arc<Session>, args: &Args) -> anyhow::Result<u8> {
    let run_id = args.run_id.context("--script needs --run-id")?;
    let done = script::run(
        session,
        script::Script {
            run_id,
            steps: args.steps,
            pace_ms: args.pace_ms,
            ttl_ms: args.ttl_ms,
            heartbeat_ms: args.heartbeat_ms,
            renew_timeout_ms: args.renew_timeout_ms,
        },
    )
    .await;
    session.emit(
        "script_end",
        None,
        session::Outcome::note(if done { "ok" } else { "stopped" }, "scripted task ended"),
    );
    Ok(if done { 0 } else { 4 })
}

/// Commanded mode: one JSON command a line on stdin, each handled concurrently and bounded by
/// `timeout`, until `exit` or the end of stdin.
///
/// `play_paths` gets [`PLAY_PATHS_TIMEOUT`] instead.
/// The longest the model's paths may take together.
const PLAY_PATHS_TIMEOUT: Duration = Duration::from_secs(600);

async fn serve(session: Arc<Session>, timeout: Duration) -> anyhow::Result<u8> {
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut inflight = tokio::task::JoinSet::new();
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        let req: Request = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                // Answer under the request's id when it has one, so the sender is not left waiting.
                let id = serde_json::from_str::<serde_json::Value>(&line).ok().and_then(|v| v["id"].as_u64());
                session.emit("bad_command", id, session::Outcome::note("error", format!("{e}: {line}")));
                continue;
            }
        };
        if matches!(req.cmd, Command::Exit) {
            while inflight.join_next().await.is_some() {}
            session.handle(req.id, req.cmd).await;
            return Ok(0);
        }
        let s = session.clone();
        // The model's paths are bounded by their own steps' timeouts, not by one command's.
        let timeout = if matches!(req.cmd, Command::PlayPaths { .. }) { PLAY_PATHS_TIMEOUT } else { timeout };
        inflight.spawn(async move {
            let name = req.cmd.name();
            if tokio::time::timeout(timeout, s.handle(req.id, req.cmd)).await.is_err() {
                s.emit(
                    name,
                    Some(req.id),
                    session::Outcome::note("timeout", format!("no answer within {timeout:?}; outcome unknown")),
                );
            }
        });
        while inflight.try_join_next().is_some() {}
    }
    // stdin closed: the harness is gone or done with us.
    Ok(0)
}
