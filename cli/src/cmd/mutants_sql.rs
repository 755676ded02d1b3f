//! `fenceproof mutants sql [--shard K/N] [--list]`: the generated mutants of the fenced fp_*
//! functions (and the direct-path statements), each through the protocol's rows with the
//! reference worker; the kill matrix.

use std::path::PathBuf;

use fenceproof_harness::report::exit;
use fenceproof_mutants::sql::{self, Selection};
use fenceproof_scenarios::runner::{self, VerifyOptions};
use fenceproof_scenarios::Experiment;

use crate::server::{Deployment, RowJobs, ServerArgs};

/// Run the generated mutants of the fenced fp_* functions through the experiments and print
/// which experiments kill which mutant.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The worker to run against the mutated functions (default: the reference worker).
    #[arg(long)]
    worker_bin: Option<PathBuf>,
    /// Only these mutants (comma-separated id prefixes such as fp_claim/).
    #[arg(long, value_delimiter = ',')]
    mutants: Option<Vec<String>>,
    /// Run the K-th of N deterministic shares of the mutants (e.g. 2/4).
    #[arg(long)]
    shard: Option<String>,
    /// List the generated mutants and exit.
    #[arg(long)]
    list: bool,
    #[command(flatten)]
    out: crate::cmd::output::Output,
    /// Stop each mutant at its first FAIL (the probes of the fenced functions run first); the kill
    /// matrix then names that row only. CI runs this.
    #[arg(long)]
    first_kill: bool,
    /// Only these experiments (comma-separated ids).
    #[arg(long, value_delimiter = ',')]
    only: Option<Vec<String>>,
    #[command(flatten)]
    server: ServerArgs,
    #[command(flatten)]
    jobs: RowJobs,
    /// Which judges decide the verdicts: `both` (the rule checks and trace validation against the
    /// protocol's model; the default), `rules` or `trace` (trace validation alone).
    #[arg(long, default_value = "both", value_parser = ["both", "rules", "trace"])]
    judge: String,
}

/// The mutants picked by `--shard`, `--mutants` and `--first-kill`, or the usage exit code.
pub fn selection(shard: Option<&str>, mutants: Option<Vec<String>>, first_kill: bool) -> Result<Selection, u8> {
    let shard = match shard.map(sql::parse_shard) {
        None => (1, 1),
        Some(Ok(s)) => s,
        Some(Err(msg)) => return Err(crate::fail::usage(msg)),
    };
    Ok(Selection { shard, only: mutants, first_kill, mutant_worker_bin: runner::default_mutant_worker_bin() })
}

pub async fn run(a: Args) -> u8 {
    let experiments = match crate::select::only(a.only.as_deref()) {
        Ok(e) => e,
        Err(code) => return code,
    };
    let sel = match selection(a.shard.as_deref(), a.mutants, a.first_kill) {
        Ok(s) => s,
        Err(code) => return code,
    };
    if a.list {
        return list(&sel, a.out.json);
    }
    if let Err(code) = a.server.check() {
        return code;
    }
    let print = a.out.print();
    let experiments = crate::select::for_sql_mutants(experiments, a.only.is_some());
    let worker_bin = a.worker_bin.unwrap_or_else(runner::default_worker_bin);
    let mut opts = a.server.options(worker_bin, Deployment::default(), a.jobs.jobs);
    opts.judging = fenceproof_scenarios::trace_check::Judging::parse(&a.judge).unwrap_or_default();
    matrix(opts, experiments, sel, print).await
}

/// List the generated mutants (id, line, change) without running anything; `json`: as an array.
fn list(sel: &Selection, json: bool) -> u8 {
    match sql::pick(sel) {
        Ok(ms) if json => {
            let rows: Vec<serde_json::Value> = ms
                .iter()
                .map(|m| {
                    serde_json::json!({"id": m.id, "function": m.function, "operator": m.operator,
                        "line": m.line, "before": m.before, "after": m.after})
                })
                .collect();
            outln!("{}", serde_json::to_string_pretty(&rows).expect("json"));
            exit::OK
        }
        Ok(ms) => {
            let w = ms.iter().map(|m| m.id.len()).max().unwrap_or(0);
            for m in &ms {
                outln!("{:<w$}  L{:<4} {}  =>  {}", m.id, m.line, m.before, m.after);
            }
            outln!("{} mutants", ms.len());
            exit::OK
        }
        Err(msg) => crate::fail::usage(msg),
    }
}

/// Run the selection; exit 0 when every non-equivalent mutant is killed by a FAIL.
async fn matrix(opts: VerifyOptions, experiments: Vec<Experiment>, sel: Selection, print: crate::cmd::Print) -> u8 {
    if let Err(msg) = sql::pick(&sel) {
        return crate::fail::usage(msg);
    }
    crate::interrupt::interruptible(async {
        match sql::run(&opts, experiments, &sel).await {
            Ok((km, dir)) => {
                crate::cmd::print_result(&km, &km.table(), &dir, print);
                if km.ok() {
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
