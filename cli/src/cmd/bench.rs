//! `fenceproof bench`: renewal, claim and protected-commit load on a fresh native cluster, beside
//! raw PostgreSQL and pgbench, and whether the database holds the contract's load.

use std::path::PathBuf;
use std::time::Duration;

use fenceproof_bench::BenchOptions;
use fenceproof_harness::contract::{BackendKind, Contract};
use fenceproof_harness::report::exit;

use crate::cmd::input;
use crate::fail::usage;

/// Measure renewal, claim and protected-commit load on a fresh cluster (or, with --database-url, a
/// team's database), side by side with raw PostgreSQL and pgbench, and say whether the database
/// holds the contract's load. Load from several hosts: `bench plan` writes plain-pgbench folders
/// for them, `bench merge` joins what they send back into one report.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    sub: Option<crate::cmd::bench_plan::Sub>,
    /// Seconds per main phase (load-curve and growth phases take half).
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    /// Clients of the main phases.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    clients: u32,
    /// Lease owners (worker processes' worth) of the renewal phases.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    workers: u32,
    /// Dispatchers of the claim phases.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    dispatchers: u32,
    /// Leases per batched renewal.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10000))]
    renew_batch: u32,
    /// Operations per claim.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    claim_batch: u32,
    /// Active leases and prepared backlog of the main phases.
    #[arg(long, default_value_t = 10_000)]
    size: u64,
    /// Only the driver-overhead phases (our driver and pgbench on identical SQL), e.g. to profile
    /// the driver under callgrind.
    #[arg(long)]
    driver_only: bool,
    /// Sizes of the growth phases (comma-separated; up to 1000000).
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
    growth: Vec<u64>,
    /// Client counts of the load curves (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,16")]
    load_clients: Vec<usize>,
    /// A deployment contract: its [lease] heartbeat and [load] active_runs are what is sized.
    #[arg(long)]
    contract: Option<PathBuf>,
    /// Active runs to size for (overrides the contract's).
    #[arg(long)]
    runs: Option<u64>,
    /// Heartbeat in milliseconds to size for (overrides the contract's).
    #[arg(long)]
    heartbeat_ms: Option<u64>,
    /// Measure a team's database instead of a throwaway cluster: the bench makes a schema of its
    /// own there (the role needs CREATE on the database, nothing more), runs the renewal, commit,
    /// claim, driver-neutral and sustained phases under --max-rate and --max-seconds, and drops
    /// the schema afterwards (also after Ctrl-C; a killed run's is swept by the next run or by
    /// `fenceproof cleanup`). Needs --yes-load-this-database.
    #[arg(long)]
    database_url: Option<String>,
    /// Consent to write benchmark load to the server of --database-url.
    #[arg(long)]
    yes_load_this_database: bool,
    /// Ceiling on the statements per second any one phase offers (default with --database-url:
    /// 2000; none on the bench's own cluster).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    max_rate: Option<u32>,
    /// Ceiling on the whole run's measuring time, in seconds (default with --database-url: 600).
    #[arg(long, value_parser = clap::value_parser!(u32).range(10..=86_400))]
    max_seconds: Option<u32>,
    #[command(flatten)]
    out: crate::cmd::output::Output,
    /// Folder with the PostgreSQL server binaries (initdb, postgres) of the bench's own cluster.
    #[arg(long)]
    pg_bin: Option<PathBuf>,
    /// Where run folders are written.
    #[arg(long, default_value = "reports")]
    reports_dir: PathBuf,
}

pub async fn run(mut a: Args) -> u8 {
    if let Some(sub) = a.sub.take() {
        return crate::cmd::bench_plan::run(sub, a.out).await;
    }
    let contract = match crate::server::load_contract(a.contract.as_deref()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Err(msg) =
        check(&a, contract.as_ref()).map_err(String::from).and_then(|()| input::reports_dir(&a.reports_dir))
    {
        return usage(msg);
    }
    if let Some(url) = &a.database_url {
        if !a.yes_load_this_database {
            return usage(format!(
                "bench --database-url writes load to {} (a schema of its own, up to {} statements/s per phase for \
                 up to {} s, dropped afterwards); add --yes-load-this-database to go ahead",
                fenceproof_bench::server::display_name(url),
                a.max_rate.unwrap_or(EXTERNAL_MAX_RATE),
                a.max_seconds.unwrap_or(EXTERNAL_MAX_SECONDS)
            ));
        }
    }
    let print = a.out.print();
    let opts = options(a, contract.as_ref());
    // What a ceiling would refuse after minutes of measuring is refused now, before any load.
    if let Some(msg) = fenceproof_bench::over_ceiling(&opts) {
        return usage(msg);
    }
    crate::interrupt::interruptible(async move {
        match fenceproof_bench::run(opts).await {
            Ok((run, dir)) if print.json => {
                let mut v = crate::cmd::with_report(&run, &dir);
                v["goals"] = serde_json::to_value(fenceproof_bench::report::goals(&run)).expect("json");
                v["sizing"] = serde_json::Value::String(fenceproof_bench::report::sizing(&run));
                outln!("{}", serde_json::to_string_pretty(&v).expect("json"));
                exit::OK
            }
            Ok((run, dir)) => {
                out!("{}", print.text(&fenceproof_bench::report::summary(&run, &dir)));
                exit::OK
            }
            Err(e) => crate::fail::harness_failed(e),
        }
    })
    .await
}

/// The flags' combinations clap cannot check: the contract's backend, the duration, the growth and load sizes.
fn check(a: &Args, contract: Option<&Contract>) -> Result<(), &'static str> {
    if contract.is_some_and(|c| c.database.backend == BackendKind::Container) {
        return Err("bench starts a native cluster with its own durable settings; the container backend is for verify");
    }
    if !(0.1..=3600.0).contains(&a.duration) {
        return Err("--duration must be between 0.1 and 3600 seconds");
    }
    if a.database_url.is_some() && a.duration > 60.0 {
        return Err("--duration must be at most 60 seconds with --database-url");
    }
    if a.database_url.is_none() && a.yes_load_this_database {
        return Err("--yes-load-this-database goes with --database-url");
    }
    if a.growth.iter().any(|&g| !(100..=1_000_000).contains(&g))
        || a.load_clients.iter().any(|&c| !(1..=64).contains(&c))
    {
        return Err("--growth sizes must be 100..=1000000 and --load-clients 1..=64");
    }
    Ok(())
}

/// The offered-rate ceiling against a team's database, unless --max-rate says otherwise.
const EXTERNAL_MAX_RATE: u32 = 2000;
/// The measuring-time ceiling against a team's database, unless --max-seconds says otherwise.
const EXTERNAL_MAX_SECONDS: u32 = 600;

/// The bench's options: the flags, else the contract's load and lease, else the defaults.
fn options(a: Args, contract: Option<&Contract>) -> BenchOptions {
    let lease = contract.map(|c| c.lease.clone()).unwrap_or_default();
    let external = a.database_url.is_some();
    BenchOptions {
        pg_bin: a.pg_bin,
        reports_dir: a.reports_dir,
        duration: Duration::from_secs_f64(a.duration),
        clients: a.clients as usize,
        workers: a.workers as usize,
        dispatchers: a.dispatchers as usize,
        renew_batch: a.renew_batch as usize,
        claim_batch: a.claim_batch as i64,
        size: a.size.clamp(100, 1_000_000),
        growth: a.growth,
        driver_only: a.driver_only,
        load_clients: a.load_clients,
        active_runs: a.runs.or(contract.map(|c| c.load.active_runs)).unwrap_or(30_000),
        heartbeat: Duration::from_millis(a.heartbeat_ms.unwrap_or(lease.heartbeat_ms as u64).max(1)),
        renewal_timeout: Duration::from_millis(lease.renewal_timeout_ms as u64),
        max_rate: a.max_rate.or(external.then_some(EXTERNAL_MAX_RATE)).map(f64::from),
        max_total: a.max_seconds.or(external.then_some(EXTERNAL_MAX_SECONDS)).map(|s| Duration::from_secs(s.into())),
        database_url: a.database_url,
    }
}
