//! `fenceproof`: the command line. `fenceproof verify` starts a throwaway PostgreSQL, runs the
//! experiments and prints the matrix; the exit code says whether everything passed.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fenceproof_harness::procs::registry;
use fenceproof_harness::report::exit;
use fenceproof_scenarios::runner::{self, VerifyOptions};

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

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run the experiments and print the pass/fail matrix.
    Verify {
        /// Run only these experiments (comma-separated ids, e.g. B,C).
        #[arg(long, value_delimiter = ',')]
        only: Option<Vec<String>>,
        /// Folder with the PostgreSQL server binaries (initdb, postgres).
        #[arg(long)]
        pg_bin: Option<PathBuf>,
        /// Where run folders are written.
        #[arg(long, default_value = "reports")]
        reports_dir: PathBuf,
        /// The worker binary to test (defaults to fenceproof-worker beside this program).
        #[arg(long)]
        worker_bin: Option<PathBuf>,
    },
    /// List the experiments.
    List,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { exit::USAGE } else { exit::OK };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FENCEPROOF_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    registry::install_panic_cleanup();
    // One thread: children get their parent-death signal tied to a thread that lives as long as
    // the harness does.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let code = rt.block_on(run(cli));
    registry::kill_all();
    ExitCode::from(code)
}

async fn run(cli: Cli) -> u8 {
    match cli.cmd {
        Cmd::List => {
            for e in fenceproof_scenarios::all() {
                println!("{:<4} {}", e.id, e.title);
            }
            exit::OK
        }
        Cmd::Verify { only, pg_bin, reports_dir, worker_bin } => {
            let experiments = match fenceproof_scenarios::select(only.as_deref()) {
                Ok(e) => e,
                Err(msg) => {
                    eprintln!("fenceproof: {msg}");
                    return exit::USAGE;
                }
            };
            let opts = VerifyOptions {
                pg_bin,
                reports_dir,
                worker_bin: worker_bin.unwrap_or_else(runner::default_worker_bin),
                tools_bin: runner::default_tools_bin(),
            };
            let mut sigint =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).expect("SIGINT handler");
            let mut sigterm =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
            tokio::select! {
                res = runner::verify(&opts, experiments) => match res {
                    Ok((matrix, dir)) => {
                        print!("{}", matrix.table());
                        println!("report: {}", dir.display());
                        matrix.exit_code()
                    }
                    Err(e) => {
                        eprintln!("fenceproof: {e}");
                        exit::HARNESS
                    }
                },
                _ = sigint.recv() => interrupted("SIGINT", 130),
                _ = sigterm.recv() => interrupted("SIGTERM", 143),
            }
        }
    }
}

/// The verify future has been dropped (its guards stopped the cluster and the workers); make sure.
fn interrupted(sig: &str, code: u8) -> u8 {
    registry::kill_all();
    eprintln!("fenceproof: interrupted by {sig}; every process it started has been stopped");
    code
}
