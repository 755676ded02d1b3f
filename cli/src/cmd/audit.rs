//! `fenceproof audit`: the stale-worker experiments against real job queue libraries (and the
//! reference protocol as the control) on a throwaway native PostgreSQL. Prints the audit table and
//! the findings; writes `audit.json`, `audit.md` and `index.html` into the run folder.
//!
//! Exit status: 0 when every cell reached a verdict and the control passed (a library's FAIL is a
//! finding about that library, not a failure of the run; `--strict` makes it one); 1 when the
//! control failed (or a library failed under `--strict`); 2 for bad input; 3 when a cell ended in
//! ERROR or the server could not be started.

use std::path::{Path, PathBuf};

use fenceproof_audit::cell::{self, Env, Outcome};
use fenceproof_audit::settings::{production_keeps, Settings};
use fenceproof_audit::{experiments, libraries, report, rust_build};
use fenceproof_harness::db::native::NativeCluster;
use fenceproof_harness::db::pgbin::PgBin;
use fenceproof_harness::db::{databases, Backend};
use fenceproof_harness::record::run_dir::RunDir;
use fenceproof_harness::report::exit;
use fenceproof_scenarios::runner;

use crate::fail::usage;

/// Audit real job queues and durable-execution engines (Python and Rust) with the stale-worker faults, beside
/// the reference protocol as the control; prints the audit table (exit 0 unless the control fails
/// or a cell errs; `--strict`: any FAIL is exit 1).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Only these libraries (comma-separated; `fenceproof audit --library x` lists them).
    #[arg(long = "library", value_name = "LIBRARY", value_delimiter = ',')]
    libraries: Option<Vec<String>>,
    /// Only these experiments (comma-separated, e.g. pause-early-success,kill-control).
    #[arg(long, value_delimiter = ',')]
    only: Option<Vec<String>>,
    /// The Python with the pinned libraries (scripts/setup.sh makes .audit/venv).
    #[arg(long, default_value = DEFAULT_PYTHON)]
    python: PathBuf,
    /// The adapters folder.
    #[arg(long, default_value = DEFAULT_ADAPTERS)]
    adapters: PathBuf,
    /// Folder with the PostgreSQL server binaries (initdb, postgres).
    #[arg(long)]
    pg_bin: Option<PathBuf>,
    /// Where run folders are written.
    #[arg(long, default_value = "reports")]
    reports_dir: PathBuf,
    #[command(flatten)]
    out: crate::cmd::output::Output,
    /// Exit 1 when any library fails a check, not only the control.
    #[arg(long)]
    strict: bool,
    /// How many cells run side by side (each in its own database, with its own workers).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=8))]
    jobs: u16,
    /// The stall-recovery settings: `fast` (every library as tight as it allows, a 2 s threshold)
    /// or `production` (each library's documented defaults; without --only, only the cells that
    /// FAIL at fast in --fast-results, each library's kill-control, and the control's plainest pause).
    #[arg(long, default_value = "fast")]
    settings: String,
    /// The fast run's published results a `production` run picks its cells from.
    #[arg(long, default_value = DEFAULT_FAST_RESULTS)]
    fast_results: PathBuf,
    /// Run only the K-th of N deterministic shares of the cells (library × experiment, cell i
    /// when i % N == K - 1), e.g. 2/3; `merge` joins the shards' run folders into one report.
    #[arg(long)]
    shard: Option<String>,
}

/// Where the audit's Python is by default: the project-local environment `scripts/setup.sh` makes.
pub const DEFAULT_PYTHON: &str = ".audit/venv/bin/python";
/// Where the adapters are by default.
pub const DEFAULT_ADAPTERS: &str = "audit/adapters";
/// The published fast results by default.
pub const DEFAULT_FAST_RESULTS: &str = "docs/audit/results.json";

fn check_inputs(a: &Args) -> Result<(), String> {
    if !a.python.is_file() {
        return Err(format!(
            "no Python at {} (run `bash scripts/setup.sh`, which installs the audit's environment, or pass --python)",
            a.python.display()
        ));
    }
    if !a.adapters.join("common.py").is_file() {
        return Err(format!("no audit adapters in {} (pass --adapters audit/adapters)", a.adapters.display()));
    }
    crate::cmd::input::reports_dir(&a.reports_dir)
}

pub async fn run(a: Args) -> u8 {
    a.out.print();
    crate::interrupt::interruptible(checked(a)).await
}

async fn checked(a: Args) -> u8 {
    let (libs, exps) = match (libraries::select(a.libraries.as_deref()), experiments::select(a.only.as_deref())) {
        (Ok(l), Ok(e)) => (l, e),
        (Err(m), _) | (_, Err(m)) => return usage(m),
    };
    let settings = match Settings::parse(&a.settings) {
        Ok(s) => s,
        Err(m) => return usage(m),
    };
    let shard = match a.shard.as_deref().map(fenceproof_mutants::sql::parse_shard) {
        None => (1, 1),
        Some(Ok(s)) => s,
        Some(Err(m)) => return usage(m),
    };
    if let Err(m) = check_inputs(&a) {
        return usage(m);
    }
    for l in libs.iter().filter(|l| l.runtime == libraries::Runtime::Python) {
        if !a.adapters.join(l.adapter).is_file() {
            return usage(format!("adapter {} of {} not found", a.adapters.join(l.adapter).display(), l.name));
        }
    }
    let mut plan = Plan::new(&libs, &exps, shard);
    if settings == Settings::Production && a.only.is_none() {
        match fast_results(&a.fast_results) {
            Ok(fast) => plan.retain(|l, e| production_keeps(&fast, l.name, l.control, e.id)),
            Err(m) => return usage(m),
        }
    }
    match audit(&a, &plan, settings).await {
        Ok(code) => code,
        Err(e) => crate::fail::harness_failed(e),
    }
}

/// The cells of an audit: every library against every experiment, numbered in that order, and
/// which of them this shard runs.
pub struct Plan {
    /// Every cell, as (number from 1, library, experiment).
    pub all: Vec<(usize, libraries::Library, experiments::AuditExperiment)>,
    pub shard: (usize, usize),
}

impl Plan {
    fn new(libs: &[libraries::Library], exps: &[experiments::AuditExperiment], shard: (usize, usize)) -> Plan {
        let all = libs.iter().flat_map(|l| exps.iter().map(move |e| (*l, *e))).enumerate();
        Plan { all: all.map(|(i, (l, e))| (i + 1, l, e)).collect(), shard }
    }

    /// Keep only the cells `keep` takes, numbered again from 1.
    fn retain(&mut self, keep: impl Fn(&libraries::Library, &experiments::AuditExperiment) -> bool) {
        let kept = self.all.drain(..).filter(|(_, l, e)| keep(l, e)).map(|(_, l, e)| (l, e));
        self.all = kept.enumerate().map(|(i, (l, e))| (i + 1, l, e)).collect();
    }

    /// The cells of this shard.
    fn mine(&self) -> Vec<(usize, libraries::Library, experiments::AuditExperiment)> {
        let (k, n) = self.shard;
        self.all.iter().filter(|c| fenceproof_mutants::shard::takes(k, n, c.0 - 1)).copied().collect()
    }

    /// The libraries this shard's cells audit, in order, each once.
    fn libs(&self) -> Vec<libraries::Library> {
        let mut libs: Vec<libraries::Library> = Vec::new();
        for (_, l, _) in self.mine() {
            if !libs.iter().any(|x| x.name == l.name) {
                libs.push(l);
            }
        }
        libs
    }

    /// What `audit-shard.json` holds: this shard, and every cell of the whole audit by name.
    fn describe(&self) -> serde_json::Value {
        let cells: Vec<String> = self.all.iter().map(|(_, l, e)| format!("{}/{}", l.name, e.id)).collect();
        serde_json::json!({"shard": format!("{}/{}", self.shard.0, self.shard.1), "cells": cells})
    }
}

/// The published fast results a production run picks its cells from, or one line saying why not.
fn fast_results(path: &Path) -> Result<serde_json::Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--fast-results {}: {e} (a fast run's summary.json)", path.display()))?;
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(v) if v.is_array() => Ok(v),
        _ => Err(format!("--fast-results {}: not a summary.json (a JSON array of cells)", path.display())),
    }
}

async fn audit(a: &Args, plan: &Plan, settings: Settings) -> Result<u8, fenceproof_harness::HarnessError> {
    let started = std::time::Instant::now();
    let libs = plan.libs();
    let run = RunDir::create(&a.reports_dir)?;
    let bin = PgBin::locate(a.pg_bin.as_deref())?;
    let mut cluster = NativeCluster::start(bin, &run.path.join("postgres.log")).await?;
    if libs.iter().any(|l| l.protocol_schema) {
        databases::create_template(&cluster).await?;
    }
    // Absolute but not resolved: a venv's python is a symlink whose target is not the venv.
    let python = std::path::absolute(&a.python)?;
    let adapters = std::fs::canonicalize(&a.adapters)?;
    let tools_bin = runner::default_tools_bin();
    let print = crate::cmd::Print { json: a.out.json, quiet: a.out.quiet };
    if libs.iter().any(|l| l.runtime == libraries::Runtime::Rust) && !a.out.json && !a.out.quiet {
        eprintln!("audit: building the Rust adapters (audit/adapters/rust; the first build takes minutes)");
    }
    let rust_bin = rust_build::build(&adapters, &libs, rust_build::BUILD_BOUND).await;
    let env = Env {
        backend: &cluster as &dyn Backend,
        python: &python,
        adapters: &adapters,
        tools_bin: &tools_bin,
        rust_bin: &rust_bin,
        settings,
    };
    let results = cells(&env, &run, &plan.mine(), a.out.json || a.out.quiet, a.jobs.into()).await?;
    cluster.stop();
    let names: Vec<&str> = libs.iter().map(|l| l.name).collect();
    let title = format!("fenceproof audit {} ({} settings)", run.run_id, settings.name());
    write(&run.path, &results, &names, &title)?;
    run.mark_latest()?;
    std::fs::write(run.path.join("audit-shard.json"), serde_json::to_string_pretty(&plan.describe()).expect("json"))?;
    print_results(&results, &run.path, started.elapsed().as_secs_f64(), print);
    Ok(verdict(&results, a.strict))
}

/// The audit's table and findings (or its cells as JSON).
pub fn print_results(results: &[cell::CellResult], folder: &Path, seconds: f64, print: crate::cmd::Print) {
    if print.json {
        outln!("{}", serde_json::to_string_pretty(results).unwrap_or_default());
    } else {
        let f = report::findings(results);
        let text = format!(
            "{}{}audit: {} cell(s) in {:.1} s; report: {}\n",
            report::markdown(results),
            if f.is_empty() { String::new() } else { format!("\n{f}\n") },
            results.len(),
            seconds,
            show(folder)
        );
        out!("{}", print.text(&text));
    }
}

/// The cells of `plan`, `jobs` at a time (default 3), each in its own database with its own tools
/// and workers: most of a cell is waiting (a library's stall recovery, the settle windows), so a
/// few side by side fit two cores. Each cell's verdict is said on stderr as it ends (not when `silent`).
async fn cells(
    env: &Env<'_>,
    run: &RunDir,
    plan: &[(usize, libraries::Library, experiments::AuditExperiment)],
    silent: bool,
    jobs: usize,
) -> Result<Vec<cell::CellResult>, fenceproof_harness::HarnessError> {
    let mut dirs = Vec::new();
    for (_, l, e) in plan {
        dirs.push(run.experiment(&format!("{}-{}", l.name, e.id))?);
    }
    // A pool of `jobs` permits: a cell starts as soon as one ends (not in batches waiting for the
    // slowest); the results keep the plan's order.
    let permits = tokio::sync::Semaphore::new(jobs.max(1));
    let results = join_all(
        plan.iter()
            .zip(&dirs)
            .map(|(x, dir)| async {
                let _permit = permits.acquire().await;
                let r = cell::run(env, &x.1, &x.2, dir, x.0).await;
                if !silent {
                    eprintln!(
                        "audit: {:<15} {:<24} {:<11} ({:.1} s)",
                        r.library,
                        r.experiment,
                        r.verdict.label(),
                        r.duration_ms as f64 / 1000.0
                    );
                }
                r
            })
            .collect(),
    )
    .await;
    Ok(results)
}

/// Drive every future of `futs` (borrowing, so not spawned) to its end; their outputs in order.
async fn join_all<F: std::future::Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut futs: Vec<std::pin::Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                if let std::task::Poll::Ready(v) = f.as_mut().poll(cx) {
                    *o = Some(v);
                }
            }
        }
        if out.iter().all(Option::is_some) {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

/// `audit.md`, `audit.json`, `summary.json` and `index.html` (titled `title`) into `dir`.
pub fn write(
    dir: &Path,
    results: &[cell::CellResult],
    names: &[&str],
    title: &str,
) -> Result<(), fenceproof_harness::HarnessError> {
    let settings = results.first().and_then(|r| Settings::parse(&r.settings).ok()).unwrap_or_default();
    let md = format!(
        "# fenceproof audit\n\n{}\n{}\n## Findings\n\n```\n{}```\n",
        report::markdown(results),
        report::settings_markdown(names, settings),
        report::findings(results)
    );
    std::fs::write(dir.join("audit.md"), &md)?;
    std::fs::write(dir.join("audit.json"), serde_json::to_string_pretty(results).unwrap_or_default())?;
    // The compact results: copied to docs/audit/results.json, they make the docs' results matrix.
    std::fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(&report::summary(results)).unwrap_or_default() + "\n",
    )?;
    std::fs::write(dir.join("index.html"), report::html(results, title))?;
    Ok(())
}

/// An ERROR is the harness's; a failed control (or, with `strict`, any FAIL) is a FAIL.
pub fn verdict(results: &[cell::CellResult], strict: bool) -> u8 {
    let errored = results.iter().any(|r| r.verdict == Outcome::Error);
    let control_failed = results.iter().any(|r| r.control && r.verdict == Outcome::Fail);
    let any_failed = results.iter().any(|r| r.verdict == Outcome::Fail);
    if errored {
        exit::HARNESS
    } else if control_failed || (strict && any_failed) {
        exit::FAILED
    } else {
        exit::OK
    }
}

fn show(p: &Path) -> String {
    p.join("index.html").display().to_string()
}
