//! `fenceproof verify`: the experiments against a throwaway PostgreSQL (or the user's database, or
//! a deployment contract's), printed as the pass/fail matrix; the exit code says whether
//! everything passed.

use std::path::PathBuf;
use std::sync::Arc;

use fenceproof_harness::report::exit;
use fenceproof_protocol::write_path::WritePath;
use fenceproof_scenarios::ctx::Barriers;
use fenceproof_scenarios::runner::{self, VerifyOptions};
use fenceproof_scenarios::Experiment;

use fenceproof_harness::report::Matrix;

use crate::fail::usage;
use crate::server::{Deployment, RowJobs, ServerArgs};

/// Run the experiments and print the pass/fail matrix.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Run only these experiments (comma-separated ids, e.g. B,C).
    #[arg(long, value_delimiter = ',')]
    only: Option<Vec<String>>,
    #[command(flatten)]
    server: ServerArgs,
    #[command(flatten)]
    jobs: RowJobs,
    /// The worker binary to test (defaults to fenceproof-worker beside this program).
    #[arg(long)]
    worker_bin: Option<PathBuf>,
    /// The folder the worker's fingerprint covers (every file under it; default: the worker's
    /// own file, or for a script every file of its folder).
    #[arg(long)]
    worker_dir: Option<PathBuf>,
    /// Run the rows inside this existing database instead of a throwaway cluster (which rows:
    /// generated from their declarations, see docs/external-database.md).
    #[arg(long, help = crate::cmd::docs::database_url_help())]
    database_url: Option<String>,
    /// A deployment contract (TOML) to verify; see examples/ and the README.
    #[arg(long)]
    contract: Option<PathBuf>,
    /// With a contract naming a team's own Patroni (`failover.rest`): let H-patroni-switchover
    /// switch that cluster over through its REST API (without it, the run says what it would do
    /// and stops).
    #[arg(long)]
    yes_fail_over_this_cluster: bool,
    #[command(flatten)]
    out: crate::cmd::output::Output,
    /// Run the whole selection N times on one server; any verdict that changes is a flake.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    repeat: u32,
    /// How C and D hold a worker's transactions: `worker` (its `faults` field, the default) or
    /// `proxy` (the harness's wire-protocol proxy holds the statements; for a worker that
    /// does not implement `faults`).
    #[arg(long, default_value = "worker", value_parser = ["worker", "proxy"])]
    barriers: String,
    /// Go straight to the matrix with a worker that is not the reference, without running
    /// `conformance` first (by default its deviations stop the run before the matrix).
    #[arg(long)]
    skip_conformance: bool,
    /// How the workers write: `api` (every write a call of a fenced fp_* function, as the worker
    /// login) or `direct` (the worker's own statements on the tables, as a login with only the
    /// table privileges docs/worker-protocol.md lists; the rows that probe the fp_* boundary are
    /// skipped, each said on stderr).
    #[arg(long, default_value = "api", value_parser = ["api", "direct"])]
    write_path: String,
    /// Which judges decide the verdicts: `both` (the rule checks, and trace validation of every
    /// row's committed history against the protocol's model; the default), `rules` or `trace`
    /// (trace validation alone, to see what it catches by itself).
    #[arg(long, default_value = "both", value_parser = ["both", "rules", "trace"])]
    judge: String,
    /// How many times the rows that ended STARVED (the machine too busy for a verdict) run again,
    /// one at a time, once the others ended; 0 leaves them STARVED.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=5))]
    starved_reruns: u32,
}

/// How the matrix is printed.
#[derive(Clone, Copy)]
struct Output {
    print: crate::cmd::Print,
    repeat: u32,
}

impl Args {
    /// Whether it prints nothing but the matrix (`--quiet`, `--json`): then the harness's own
    /// warnings stay in the run folder (`harness-stalls.txt`, the rows' evidence), off stderr.
    pub fn quiet(&self) -> bool {
        self.out.quiet || self.out.json
    }
}

pub async fn run(a: Args) -> u8 {
    let barriers = Barriers::parse(&a.barriers).unwrap_or_default();
    if let Err(msg) = crate::cmd::input::check(a.worker_bin.as_deref(), a.database_url.as_deref())
        .and_then(|()| crate::cmd::input::reports_dir(&a.server.reports_dir))
    {
        return usage(msg);
    }
    if let Some(dir) = a.worker_dir.as_deref().filter(|d| !d.is_dir()) {
        return usage(format!("--worker-dir {}: not a folder", dir.display()));
    }
    let print = a.out.print();
    let contract = match crate::server::load_contract(a.contract.as_deref()) {
        Ok(c) => c.map(Arc::new),
        Err(code) => return code,
    };
    let experiments = match crate::select::only(a.only.as_deref()) {
        Ok(e) => e,
        Err(code) => return code,
    };
    let database_url = a.database_url.or_else(|| contract.as_ref().and_then(|c| c.database.url.clone()));
    let experiments = crate::select::for_verify(experiments, contract.as_deref(), database_url.as_deref());
    let write_path = WritePath::parse(&a.write_path).unwrap_or(WritePath::Api);
    if write_path == WritePath::Api && contract.as_ref().is_some_and(|c| !c.database.migrations.is_empty()) {
        return usage("the contract names the team's own migrations (database.migrations), which have no fp_* functions: run with --write-path direct");
    }
    let team_schema = contract.as_ref().is_some_and(|c| !c.database.migrations.is_empty());
    let experiments = crate::select::for_write_path(experiments, write_path, team_schema);
    let experiments = match crate::select::for_team_functions(experiments, contract.as_deref(), a.only.is_some()) {
        Ok(e) => e,
        Err(msg) => return usage(msg),
    };
    if let Err(code) = crate::consent::fail_over(contract.as_deref(), &experiments, a.yes_fail_over_this_cluster).await
    {
        return code;
    }
    let deployment = Deployment { contract, contract_path: a.contract, database_url };
    let worker_bin = a.worker_bin.unwrap_or_else(runner::default_worker_bin);
    let mut opts = a.server.options(worker_bin, deployment, a.jobs.jobs);
    opts.skip_conformance = a.skip_conformance;
    opts.worker_dir = a.worker_dir;
    opts.write_path = write_path;
    opts.judging = fenceproof_scenarios::trace_check::Judging::parse(&a.judge).unwrap_or_default();
    opts.program = crate::invoked::program();
    opts.starved_reruns = a.starved_reruns;
    let out = Output { print, repeat: a.repeat };
    crate::interrupt::interruptible(matrix(opts, experiments, barriers, out)).await
}

/// The conformance gate for a worker that is not the reference, then the matrix.
async fn matrix(mut opts: VerifyOptions, experiments: Vec<Experiment>, barriers: Barriers, out: Output) -> u8 {
    let mut gate = None;
    if opts.worker_bin != runner::default_worker_bin() && !opts.skip_conformance {
        match crate::cmd::conformance::gate(&opts).await {
            Ok((report, dir)) if report.deviations().next().is_some() => return stopped(&report, &dir, &opts, out),
            Ok((report, dir)) => {
                opts.conformance_report = Some(dir.join("conformance.txt"));
                gate = Some(report);
            }
            Err(e) => return crate::fail::harness_error(&e),
        }
    }
    let opts = &opts;
    match runner::verify_with(opts, experiments, out.repeat, barriers).await {
        Ok((matrix, flakes, dir)) => {
            let coverage = opts.judging.trace().then(|| fenceproof_scenarios::coverage::of(&dir, &matrix));
            if out.print.json {
                let mut doc = document(&matrix, &dir, &flakes, gate.as_ref(), None, out);
                doc["model_coverage"] = serde_json::json!(coverage);
                outln!("{}", serde_json::to_string_pretty(&doc).expect("json"));
            } else {
                out!("{}", if out.print.quiet { matrix.summary() } else { matrix.table() });
                if out.repeat > 1 && flakes.is_empty() {
                    outln!("{} repetitions: no verdict changed", out.repeat);
                } else if out.repeat > 1 {
                    outln!("{} repetitions: FLAKY {}", out.repeat, flakes.join("; "));
                }
                if let (Some(c), false) = (&coverage, out.print.quiet) {
                    outln!("{}", fenceproof_scenarios::coverage::line(c));
                }
                outln!("report: {}", dir.display());
            }
            if flakes.is_empty() {
                matrix.exit_code()
            } else {
                exit::FAILED
            }
        }
        Err(e) => crate::fail::harness_error(&e),
    }
}

/// verify's one JSON document, the same keys whether or not the gate stopped the run: the matrix's
/// fields, "report" (the run folder), "repeat", "flakes", "conformance" (the gate's report, or
/// null when no gate ran) and "stopped" (why the matrix did not run, or null).
fn document(
    matrix: &Matrix,
    dir: &std::path::Path,
    flakes: &[String],
    gate: Option<&fenceproof_conformance::Report>,
    stopped: Option<&str>,
    out: Output,
) -> serde_json::Value {
    let mut v = crate::cmd::with_report(matrix, dir);
    v["repeat"] = serde_json::json!(out.repeat);
    v["flakes"] = serde_json::json!(flakes);
    v["conformance"] = serde_json::json!(gate);
    v["stopped"] = serde_json::json!(stopped);
    v["model_coverage"] = serde_json::Value::Null;
    v
}

/// The worker deviates from the contract: its report (as verify's JSON document with `--json`,
/// with no rows), and the conformance exit code; the matrix does not run.
fn stopped(report: &fenceproof_conformance::Report, dir: &std::path::Path, opts: &VerifyOptions, out: Output) -> u8 {
    let why = "the worker deviates from the worker contract; the matrix did not run";
    if out.print.json {
        let matrix = Matrix {
            run_id: dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            backend: opts.backend.label().into(),
            server_version: report.server.clone(),
            started_at: chrono::Utc::now() - chrono::Duration::milliseconds(report.duration_ms as i64),
            duration_ms: report.duration_ms,
            worker: fenceproof_harness::report::WorkerUnderTest::of_in(
                &opts.worker_bin,
                false,
                opts.worker_dir.as_deref(),
            ),
            conformance_report: Some(dir.join("conformance.txt").display().to_string()),
            results: Vec::new(),
            interrupted: None,
        };
        outln!(
            "{}",
            serde_json::to_string_pretty(&document(&matrix, dir, &[], Some(report), Some(why), out)).expect("json")
        );
    } else {
        out!("{}report: {}\n", out.print.text(&report.render(false)), dir.display());
    }
    eprintln!(
        "fenceproof: the worker deviates from the worker contract (exit {}); fix it before the matrix, or run verify with --skip-conformance",
        exit::CONFORMANCE
    );
    exit::CONFORMANCE
}
