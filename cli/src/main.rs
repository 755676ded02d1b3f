//! `fenceproof`: the command line. `fenceproof verify` starts a throwaway PostgreSQL, runs the
//! experiments and prints the matrix; the exit code says whether everything passed. This file
//! declares the subcommands, sets up logging, the runtime and the panic cleanup, and dispatches;
//! each subcommand's flags and work are in its own file under `cmd/`.

use std::process::ExitCode;

#[macro_use]
mod out;
mod cmd;
mod consent;
mod fail;
mod help;
mod interrupt;
mod invoked;
mod legacy;
mod seed;
mod select;
mod server;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use fenceproof_harness::procs::registry;
use fenceproof_harness::report::exit;

#[derive(Parser, Debug)]
#[command(
    name = "fenceproof",
    version,
    about = "Fault-injection verification of the lease + fencing + outbox protocol on PostgreSQL"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// Each subcommand's help text is its `Args`' doc comment, in its file.
#[derive(Subcommand, Debug)]
enum Cmd {
    Verify(cmd::verify::Args),
    Conformance(cmd::conformance::Args),
    /// Which experiments kill which broken variant: `named` (the worker's named mutants) or
    /// `sql` (generated mutants of the fenced fp_* functions).
    #[command(subcommand)]
    Mutants(cmd::groups::Mutants),
    /// Randomized operation schedules: `run` (against one worker) or `against-mutants` (the
    /// search alone against every mutant).
    #[command(subcommand)]
    Schedules(cmd::groups::Schedules),
    VerifyVersions(cmd::verify_versions::Args),
    Bench(cmd::bench::Args),
    Cleanup(cmd::cleanup::Args),
    List(cmd::list::Args),
    Rules(cmd::rules::Args),
    Writers(cmd::writers::Args),
    Audit(cmd::audit::Args),
    Merge(cmd::merge::Args),
    Docs(cmd::docs::Args),
    Model(cmd::model::Args),
}

/// The command line, or the exit code of a `--help` / `--version` (0) or a usage error (2). An
/// old spelling of a command is read as its new one, after one line on stderr naming it.
fn parse() -> Result<Cli, u8> {
    let (args, line) = legacy::respell(std::env::args_os().collect());
    if let Some(line) = line {
        eprintln!("{line}");
    }
    help::with_exit_codes(Cli::command(), "")
        .try_get_matches_from(args)
        .and_then(|m| Cli::from_arg_matches(&m))
        .map_err(|e| {
            let code = if e.use_stderr() { exit::USAGE } else { exit::OK };
            let _ = e.print();
            code
        })
}

fn main() -> ExitCode {
    let cli = match parse() {
        Ok(c) => c,
        Err(code) => return ExitCode::from(code),
    };
    // `verify --quiet` prints nothing but the matrix: the harness's warnings are left out
    // (FENCEPROOF_LOG still asks for them).
    let level = if matches!(&cli.cmd, Cmd::Verify(a) if a.quiet()) { "error" } else { "warn" };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("FENCEPROOF_LOG").unwrap_or_else(|_| {
            format!("{level},sqlx::query=error,sqlx::postgres::notice=error,sqlx::pool::acquire=error").into()
        }))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    registry::install_panic_cleanup();
    // Children get their parent-death signal tied to the thread that spawned them: every child is
    // spawned from the main thread (the block_on future). Experiments need one thread; the
    // benchmark's load driver gets two worker threads, as pgbench gets two.
    let rt = if matches!(cli.cmd, Cmd::Bench(_)) {
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()
    } else {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    }
    .expect("tokio runtime");
    let code = rt.block_on(run(cli.cmd));
    registry::kill_all();
    ExitCode::from(code)
}

async fn run(cmd: Cmd) -> u8 {
    match cmd {
        Cmd::Verify(a) => cmd::verify::run(a).await,
        Cmd::Conformance(a) => cmd::conformance::run(a).await,
        Cmd::Mutants(m) => m.run().await,
        Cmd::Schedules(s) => s.run().await,
        Cmd::VerifyVersions(a) => cmd::verify_versions::run(a).await,
        Cmd::Bench(a) => cmd::bench::run(a).await,
        Cmd::Cleanup(a) => cmd::cleanup::run(a).await,
        Cmd::List(a) => cmd::list::run(a),
        Cmd::Rules(a) => cmd::rules::run(a),
        Cmd::Writers(a) => cmd::writers::run(a).await,
        Cmd::Audit(a) => cmd::audit::run(a).await,
        Cmd::Merge(a) => cmd::merge::run(a),
        Cmd::Docs(a) => cmd::docs::run(&a),
        Cmd::Model(a) => cmd::model::run(a),
    }
}
