//! `fenceproof mutants named`: the experiments against every named broken variant of the worker (a
//! mutants build, `just build-mutants`), and which experiments kill which mutant.

use std::path::PathBuf;

use fenceproof_harness::report::exit;

use crate::server::{Deployment, RowJobs, ServerArgs};

/// Run the experiments against every named broken variant of the worker and print which
/// experiments kill which mutant.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A worker built with the mutants feature (`just build-mutants`).
    #[arg(long)]
    worker_bin: Option<PathBuf>,
    /// Only these mutants (comma-separated names).
    #[arg(long, value_delimiter = ',')]
    mutants: Option<Vec<String>>,
    /// Stop each mutant at the first row that kills it; the kill matrix then names that row only.
    /// CI runs this.
    #[arg(long)]
    first_kill: bool,
    /// Only these experiments (comma-separated ids).
    #[arg(long, value_delimiter = ',')]
    only: Option<Vec<String>>,
    #[command(flatten)]
    out: crate::cmd::output::Output,
    #[command(flatten)]
    server: ServerArgs,
    #[command(flatten)]
    jobs: RowJobs,
    /// Which judges decide the verdicts: `both` (the rule checks and trace validation against the
    /// protocol's model; the default), `rules` or `trace` (trace validation alone).
    #[arg(long, default_value = "both", value_parser = ["both", "rules", "trace"])]
    judge: String,
}

/// Where the mutants build is when `--worker-bin` is not given.
pub const DEFAULT_MUTANT_WORKER: &str = "target/debug/fenceproof-worker-mutant";

pub async fn run(a: Args) -> u8 {
    let experiments = match crate::select::only(a.only.as_deref()) {
        Ok(e) => e,
        Err(code) => return code,
    };
    let experiments = crate::select::for_named_mutants(experiments, a.only.is_some());
    if let Err(code) = a.server.check() {
        return code;
    }
    let print = a.out.print();
    let worker_bin = a.worker_bin.unwrap_or_else(|| PathBuf::from(DEFAULT_MUTANT_WORKER));
    let mut opts = a.server.options(worker_bin, Deployment::default(), a.jobs.jobs);
    opts.judging = fenceproof_scenarios::trace_check::Judging::parse(&a.judge).unwrap_or_default();
    crate::interrupt::interruptible(async {
        match fenceproof_mutants::named::run(&opts, experiments, a.mutants.as_deref(), a.first_kill).await {
            Ok((km, dir)) => {
                crate::cmd::print_result(&km, &km.table(), &dir, print);
                if km.all_killed() {
                    exit::OK
                } else {
                    exit::FAILED
                }
            }
            Err(e) => crate::fail::harness_failed(e),
        }
    })
    .await
}
