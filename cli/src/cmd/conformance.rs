//! `fenceproof conformance --worker-bin PATH`: the worker contract, command by command and role by
//! role, on a fresh database, in seconds; each deviation said precisely. `verify` runs it first for
//! a worker that is not the reference (see [`gate`]).

use std::path::PathBuf;

use fenceproof_conformance::{Report, PROBES};
use fenceproof_harness::report::exit;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::write_path::WritePath;
use fenceproof_scenarios::runner::{self, Session, VerifyOptions};

use crate::server::{Deployment, ServerArgs};

/// Exercise each command and role of the worker contract once on a fresh database and report
/// every deviation precisely (seconds; run it before the matrix on a new worker).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The worker program to check (defaults to fenceproof-worker beside this program).
    #[arg(long)]
    worker_bin: Option<PathBuf>,
    /// Only these probes (comma-separated: flags, lease, barriers, outbox, control, script, sync_rep).
    #[arg(long, value_delimiter = ',')]
    only: Option<Vec<String>>,
    /// Print every point checked, not only the deviations (--json always holds every point).
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    out: crate::cmd::output::Output,
    /// How the worker writes: `api` (the fenced fp_* functions, as the worker login) or `direct`
    /// (its own statements, as a login with only the table privileges of docs/direct-path.md).
    /// `verify --write-path direct` runs its conformance gate on the direct path too.
    #[arg(long, default_value = "api", value_parser = ["api", "direct"])]
    write_path: String,
    /// A deployment contract (TOML): its `[database] migrations` (a team's own schema, direct path
    /// only), backend and image. Its database URL and failover settings are not used here.
    #[arg(long)]
    contract: Option<PathBuf>,
    #[command(flatten)]
    server: ServerArgs,
}

pub async fn run(a: Args) -> u8 {
    if let Err(msg) = crate::cmd::input::check(a.worker_bin.as_deref(), None)
        .and_then(|()| crate::cmd::input::reports_dir(&a.server.reports_dir))
    {
        return crate::fail::usage(msg);
    }
    let print = a.out.print();
    let contract = match crate::server::load_contract(a.contract.as_deref()) {
        Ok(c) => c.map(std::sync::Arc::new),
        Err(code) => return code,
    };
    let write_path = WritePath::parse(&a.write_path).unwrap_or(WritePath::Api);
    if write_path == WritePath::Api && contract.as_ref().is_some_and(|c| !c.database.migrations.is_empty()) {
        return crate::fail::usage("the contract names the team's own migrations (database.migrations), which have no fp_* functions: run with --write-path direct");
    }
    let deployment = Deployment { contract, contract_path: a.contract, database_url: None };
    let mut opts = a.server.options(a.worker_bin.unwrap_or_else(runner::default_worker_bin), deployment, None);
    opts.write_path = write_path;
    crate::interrupt::interruptible(probes(&opts, a.only.as_deref(), a.all, print)).await
}

/// Run the probes (all, or those in `only`) and print the report; `all` prints kept points too,
/// `print` says how (JSON: the whole report).
async fn probes(opts: &VerifyOptions, only: Option<&[String]>, all: bool, print: crate::cmd::Print) -> u8 {
    if let Some(bad) = only.and_then(|o| o.iter().find(|n| !PROBES.iter().any(|(p, _)| p == n))) {
        let names: Vec<&str> = PROBES.iter().map(|(p, _)| *p).collect();
        eprintln!("fenceproof: no probe named '{bad}' (probes: {})", names.join(", "));
        return exit::USAGE;
    }
    match probe(opts, only).await {
        Ok((report, dir)) => {
            crate::cmd::print_result(&report, &report.render(all), &dir, print);
            if report.deviations().next().is_some() {
                exit::CONFORMANCE
            } else {
                exit::OK
            }
        }
        Err(e) => crate::fail::harness_error(&e),
    }
}

async fn probe(opts: &VerifyOptions, only: Option<&[String]>) -> Result<(Report, std::path::PathBuf), HarnessError> {
    let mut session = Session::start(opts).await?;
    // A worker that cannot even answer its first command gets the preflight's one line (exit 3).
    if let Err(e) = runner::preflight(&session, opts).await {
        session.finish().await?;
        return Err(e);
    }
    let report = fenceproof_conformance::run(&mut session, only).await;
    let dir = session.run.path.clone();
    session.finish().await?;
    Ok((report?, dir))
}

/// Before `verify` spends time on the matrix with a worker that is not the reference: the
/// conformance report and the folder it was written to (`conformance.txt`, `conformance.json`).
pub async fn gate(opts: &VerifyOptions) -> Result<(Report, PathBuf), HarnessError> {
    let (report, dir) = probe(opts, None).await?;
    if report.deviations().next().is_none() {
        eprintln!(
            "fenceproof: conformance: {} contract points kept ({:.1}s; {})",
            report.points.len(),
            report.duration_ms as f64 / 1000.0,
            dir.display()
        );
    }
    Ok((report, dir))
}
