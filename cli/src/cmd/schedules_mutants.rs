//! `fenceproof schedules against-mutants [--sql]`: the randomized schedules alone against every named
//! mutant (or a selection of the generated SQL mutants), each with the same seed and a budget
//! of seconds or cases, up to `--jobs` of them at once; the kill matrix beside the experiments'.

use std::path::PathBuf;
use std::time::Duration;

use fenceproof_harness::report::exit;
use fenceproof_mutants::schedules::mutants::{search, search_sql};
use fenceproof_mutants::schedules::Limit;
use fenceproof_scenarios::runner::{self, VerifyOptions};

use crate::server::{Deployment, ServerArgs};

/// Run the randomized schedules alone against each named mutant (or, with --sql, each generated
/// SQL mutant), with a time budget per mutant, --jobs mutants at once (each on a server of its
/// own; every mutant plays the same cases from a seed as alone), and print which mutants the
/// search kills.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A worker built with the mutants feature (`just build-mutants`); with --sql, the worker to
    /// run against the mutated functions (default: the reference worker).
    #[arg(long)]
    worker_bin: Option<PathBuf>,
    /// Only these mutants (comma-separated names; with --sql, id prefixes such as fp_claim/).
    #[arg(long, value_delimiter = ',')]
    mutants: Option<Vec<String>>,
    /// Search the generated mutants of the fenced fp_* functions instead of the named mutants.
    #[arg(long)]
    sql: bool,
    /// With --sql: search the K-th of N deterministic shares of the mutants (e.g. 2/4).
    #[arg(long, requires = "sql")]
    shard: Option<String>,
    /// Seconds of searching per mutant (a loaded machine fits fewer cases in them).
    #[arg(long, default_value_t = 180)]
    budget_s: u64,
    /// Cases per mutant instead of seconds: the same cases on any machine, however loaded (a
    /// case's own waits are bounded; the search takes as long as they take).
    #[arg(long, conflicts_with = "budget_s")]
    cases: Option<u32>,
    /// The seed (decimal or 0x-hex); random when absent. Printed either way.
    #[arg(long)]
    seed: Option<String>,
    /// Exit 1 when a selected mutant survives its budget (by default the search reports
    /// survivors and exits 0: it is bounded, the experiments are the gate).
    #[arg(long)]
    require_kills: bool,
    #[command(flatten)]
    out: crate::cmd::output::Output,
    /// How many mutants are searched at once, each on a server of its own (default: as many
    /// as the machine's cores allow, at most 8).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    jobs: Option<u32>,
    #[command(flatten)]
    server: ServerArgs,
}

/// What the search runs against: the named mutants (some of them), or a selection of the
/// generated SQL mutants.
enum Target {
    Named(Option<Vec<String>>),
    Sql(fenceproof_mutants::sql::Selection),
}

pub async fn run(a: Args) -> u8 {
    let seed = match crate::seed::or_random(a.seed.as_deref()) {
        Ok(s) => s,
        Err(code) => return code,
    };
    if let Err(code) = a.server.check() {
        return code;
    }
    let print = a.out.print();
    if a.out.json || a.out.quiet {
        eprintln!("seed {seed:#x} (rerun with --seed {seed:#x})");
    } else {
        outln!("seed {seed:#x} (rerun with --seed {seed:#x})");
    }
    let budget = match a.cases {
        Some(n) => Limit::Cases(n.max(1)),
        None => Limit::Seconds(Duration::from_secs(a.budget_s.max(1))),
    };
    let (target, worker_bin) = if a.sql {
        match crate::cmd::mutants_sql::selection(a.shard.as_deref(), a.mutants, false) {
            Ok(sel) => (Target::Sql(sel), a.worker_bin.unwrap_or_else(runner::default_worker_bin)),
            Err(code) => return code,
        }
    } else {
        let bin = a.worker_bin.unwrap_or_else(|| PathBuf::from(crate::cmd::mutants::DEFAULT_MUTANT_WORKER));
        (Target::Named(a.mutants), bin)
    };
    let opts = a.server.options(worker_bin, Deployment::default(), a.jobs);
    crate::interrupt::interruptible(kill_matrix(&opts, target, seed, budget, a.require_kills, print)).await
}

/// Exit 0 when the search ran (survivors are reported, not failed: the search is bounded; the
/// experiments' kill matrix is the gate), unless `require_kills`; printed as `print` says.
async fn kill_matrix(
    opts: &VerifyOptions,
    target: Target,
    seed: u64,
    budget: Limit,
    require_kills: bool,
    print: crate::cmd::Print,
) -> u8 {
    let searched = match &target {
        Target::Named(only) => search(opts, only.as_deref(), seed, budget).await,
        Target::Sql(sel) => search_sql(opts, sel, seed, budget).await,
    };
    match searched {
        Ok((km, dir)) => {
            crate::cmd::print_result(&km, &km.table(), &dir, print);
            if require_kills && km.killed() < km.rows.len() {
                exit::FAILED
            } else {
                exit::OK
            }
        }
        Err(e) => crate::fail::harness_failed(e),
    }
}
