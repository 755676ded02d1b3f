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
        /// Run the whole selection N times on one server; any verdict that changes is a flake.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
        repeat: u32,
    },
    /// Run the experiments against every named broken variant of the worker and print which
    /// experiments kill which mutant.
    Mutants {
        /// A worker built with the mutants feature (`just build-mutants`).
        #[arg(long, default_value = "target/mutants/debug/fenceproof-worker")]
        worker_bin: PathBuf,
        /// Only these mutants (comma-separated names).
        #[arg(long, value_delimiter = ',')]
        mutants: Option<Vec<String>>,
        /// Only these experiments (comma-separated ids).
        #[arg(long, value_delimiter = ',')]
        only: Option<Vec<String>>,
        #[arg(long)]
        pg_bin: Option<PathBuf>,
        #[arg(long, default_value = "reports")]
        reports_dir: PathBuf,
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
        Cmd::Mutants { worker_bin, mutants, only, pg_bin, reports_dir } => {
            let experiments = match fenceproof_scenarios::select(only.as_deref()) {
                Ok(e) => e,
                Err(msg) => {
                    eprintln!("fenceproof: {msg}");
                    return exit::USAGE;
                }
            };
            let opts = VerifyOptions { pg_bin, reports_dir, worker_bin, tools_bin: runner::default_tools_bin() };
            interruptible(async {
                match fenceproof_scenarios::mutants::run(&opts, experiments, mutants.as_deref()).await {
                    Ok((km, dir)) => {
                        print!("{}", km.table());
                        println!("report: {}", dir.display());
                        if km.all_killed() {
                            exit::OK
                        } else {
                            exit::FAILED
                        }
                    }
                    Err(e) => {
                        eprintln!("fenceproof: {e}");
                        exit::HARNESS
                    }
                }
            })
            .await
        }
        Cmd::Verify { only, pg_bin, reports_dir, worker_bin, repeat } => {
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
            interruptible(async {
                match runner::verify(&opts, experiments, repeat).await {
                    Ok((matrix, flakes, dir)) => {
                        print!("{}", matrix.table());
                        if repeat > 1 {
                            if flakes.is_empty() {
                                println!("{repeat} repetitions: no verdict changed");
                            } else {
                                println!("{repeat} repetitions: FLAKY {}", flakes.join("; "));
                            }
                        }
                        println!("report: {}", dir.display());
                        if flakes.is_empty() {
                            matrix.exit_code()
                        } else {
                            exit::FAILED
                        }
                    }
                    Err(e) => {
                        eprintln!("fenceproof: {e}");
                        exit::HARNESS
                    }
                }
            })
            .await
        }
    }
}

/// Run `work`, or stop at SIGINT / SIGTERM (dropping `work`, whose guards stop every process).
async fn interruptible(work: impl std::future::Future<Output = u8>) -> u8 {
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).expect("SIGINT handler");
    let mut sigterm =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        code = work => code,
        _ = sigint.recv() => interrupted("SIGINT", 130),
        _ = sigterm.recv() => interrupted("SIGTERM", 143),
    }
}

/// The verify future has been dropped (its guards stopped the cluster and the workers); make sure.
fn interrupted(sig: &str, code: u8) -> u8 {
    registry::kill_all();
    eprintln!("fenceproof: interrupted by {sig}; every process it started has been stopped");
    code
}
