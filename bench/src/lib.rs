//! `fenceproof bench`: renewal, claim and protected-commit load on a fresh native cluster, each
//! side by side with its raw PostgreSQL equivalent measured in the same run on the same server,
//! plus pgbench on identical SQL to measure our own driver. The numbers that matter are ratios
//! measured moments apart, not absolute rates (the machine is shared and noisy).
//!
//! - [`driver`]: closed and open loops with HDR latency histograms;
//! - [`workloads`]: the data and the SQL of every workload;
//! - [`dbstats`]: WAL, HOT updates, dead tuples, autovacuum and sampled lock waits per phase;
//! - [`pgbench`]: the reference driver;
//! - [`neutral`]: driver-neutral capacity, the `fp_*` calls and their references as pgbench scripts;
//! - `measure`: one phase at a time, with what the database says about it;
//! - `phases`: the phases in the order a run performs them;
//! - [`server`]: the facts the sizing answer names, and a run's own schema in a team's database;
//! - [`report`]: bench.json, bench.md, SVG plots, the terminal summary and the sizing answer.

pub mod dbstats;
pub mod driver;
mod measure;
pub mod merge;
pub mod neutral;
pub mod pgbench;
mod phases;

pub use phases::{over_ceiling, sustained_offered};
pub mod plan;
pub mod report;
pub mod server;
pub mod workloads;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use fenceproof_harness::db::native::NativeCluster;
use fenceproof_harness::db::pgbin::PgBin;
use fenceproof_harness::db::{databases, Backend};
use fenceproof_harness::record::run_dir::RunDir;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::write_path::{self, WritePath};
use serde::Serialize;

use measure::Bench;

#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub pg_bin: Option<PathBuf>,
    pub reports_dir: PathBuf,
    /// How long each main phase lasts; load-curve and growth phases last half of it.
    pub duration: Duration,
    /// Clients of the main phases.
    pub clients: usize,
    /// Worker processes' worth of lease owners (renewal) and dispatchers (claim).
    pub workers: usize,
    pub dispatchers: usize,
    /// Batch sizes: leases per batched renewal, operations per claim.
    pub renew_batch: usize,
    pub claim_batch: i64,
    /// Active leases / prepared backlog of the main phases, and the growth sizes.
    pub size: u64,
    pub growth: Vec<u64>,
    /// Only the driver-overhead phases.
    pub driver_only: bool,
    /// Client counts of the load curves.
    pub load_clients: Vec<usize>,
    /// The contract to size: N active runs at heartbeat H.
    pub active_runs: u64,
    pub heartbeat: Duration,
    /// The contract's renewal timeout: a sustained renewal's p99 must stay under it.
    pub renewal_timeout: Duration,
    /// A team's database (`--database-url`): the bench runs in a schema of its own there, a
    /// subset of the phases (no load curves, growth or fillfactor), and drops it at the end.
    pub database_url: Option<String>,
    /// Ceiling on the statements per second any phase offers (every driver and pgbench `-R`).
    pub max_rate: Option<f64>,
    /// Ceiling on the whole run's measuring time: past it the run stops (and still cleans up).
    pub max_total: Option<Duration>,
}

/// One measured phase, as the report keeps it.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    pub group: String,
    pub name: String,
    pub clients: usize,
    pub size: u64,
    pub units_per_s: f64,
    pub statements_per_s: f64,
    pub units: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub elapsed_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub pool_wait_p99_ms: f64,
    pub commit_p50_ms: Option<f64>,
    pub commit_p99_ms: Option<f64>,
    /// Lock-wait seconds summed over backends (sampled), and per 1,000 units.
    pub lock_wait_s: f64,
    pub wal_bytes_per_unit: f64,
    pub commits: i64,
    pub tables: BTreeMap<String, dbstats::TableStats>,
    /// CPU seconds (user + system) of this process during a closed-loop phase: the client's own
    /// cost (0 for open-loop phases).
    pub client_cpu_s: f64,
}

impl Phase {
    pub fn hot_ratio(&self, table: &str) -> Option<f64> {
        self.tables.get(table).filter(|t| t.n_tup_upd > 0).map(|t| t.n_tup_hot_upd as f64 / t.n_tup_upd as f64)
    }
}

/// A pgbench phase.
#[derive(Debug, Clone, Serialize)]
pub struct PgbenchPhase {
    /// `driver` (identical SQL, against our driver) or `neutral-*` (see [`neutral`]).
    pub group: String,
    pub name: String,
    pub clients: usize,
    /// Units (renewed leases, claimed operations) per pgbench transaction.
    pub units_per_tx: u64,
    pub result: pgbench::PgbenchResult,
    /// Rows the phase updated, from the server's table statistics (pgbench does not look at what a
    /// statement returned: this is the evidence that the fenced calls really wrote).
    pub rows_updated: i64,
    /// With alternating rounds, each round's transactions per second (the phase's `tps` is their
    /// median; its transactions, rows and CPU are their sums).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rounds_tps: Vec<f64>,
}

/// Alternating rounds of each driver-neutral script (see `pgbench_alternating`).
pub const ROUNDS: usize = 3;

/// Paired rounds of the driver-overhead comparison (ours and pgbench on identical SQL): five, as
/// its goal sits nearest its threshold and a round costs only a few seconds.
pub const DRIVER_ROUNDS: usize = 5;

impl PgbenchPhase {
    pub fn units_per_s(&self) -> f64 {
        self.result.tps * self.units_per_tx as f64
    }

    /// One phase from the rounds of one script: the median rate; the sums of the work done.
    pub fn median_of(rounds: Vec<PgbenchPhase>) -> PgbenchPhase {
        let mut tps: Vec<f64> = rounds.iter().map(|p| p.result.tps).collect();
        let median = report::median(tps.iter().copied());
        let n = rounds.len().max(1) as f64;
        let mut it = rounds.into_iter();
        let mut out = it.next().expect("at least one round");
        for p in it {
            out.result.transactions += p.result.transactions;
            out.result.client_cpu_s += p.result.client_cpu_s;
            out.result.latency_avg_ms += p.result.latency_avg_ms;
            out.rows_updated += p.rows_updated;
        }
        out.result.latency_avg_ms /= n;
        out.result.tps = median;
        out.rounds_tps = std::mem::take(&mut tps);
        out
    }
}

/// Everything one `fenceproof bench` measured.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRun {
    pub run_id: String,
    pub server_version: String,
    pub settings: BTreeMap<String, String>,
    pub options: serde_json::Value,
    pub phases: Vec<Phase>,
    pub pgbench: Vec<PgbenchPhase>,
    /// Wall time spent growing the data to each growth size.
    pub growth_setup: Vec<GrowthSetup>,
    pub duration_s: f64,
    /// The server sized, as the sizing answer names it.
    pub server: server::ServerFacts,
}

/// The wall time one growth step took to prepare: growing the active leases (tasks, runs and
/// leases inserted, then vacuumed) and making the prepared backlog (twice: one per index variant).
#[derive(Debug, Clone, Serialize)]
pub struct GrowthSetup {
    pub size: u64,
    pub leases_s: f64,
    pub backlog_s: f64,
}

/// The server settings a benchmark runs with: durable commits, as production would.
fn server_settings() -> Vec<(String, String)> {
    [("fsync", "on"), ("full_page_writes", "on"), ("synchronous_commit", "on"), ("shared_buffers", "256MB")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The number of phases a run with `o` performs (for the progress bar).
fn phase_count(o: &BenchOptions) -> usize {
    // Fillfactor (1), the load curves and growth run only on the bench's own cluster.
    let own = match o.database_url {
        None => 1 + 3 * o.load_clients.len() + 3 * o.growth.len(),
        Some(_) => 0,
    };
    3 * DRIVER_ROUNDS + 2 + 2 + 4 + 2 + 9 + own + 2
}

/// Run the whole benchmark; returns the run and its folder.
pub async fn run(opts: BenchOptions) -> Result<(BenchRun, PathBuf), HarnessError> {
    let t0 = Instant::now();
    let mut s = start(&opts).await?;
    let measured = match opts.max_total {
        Some(limit) => tokio::time::timeout(limit, measure_all(&mut s.bench, &opts)).await.unwrap_or_else(|_| {
            Err(HarnessError::Other(format!("the bench reached its bound of {} s and stopped", limit.as_secs())))
        }),
        None => measure_all(&mut s.bench, &opts).await,
    };
    if opts.database_url.is_some() {
        // The run's schema goes whatever happened (Ctrl-C drops it in the command's handler).
        s.bench.admin.close().await;
        let (_, failed) = fenceproof_harness::db::external::drop_created().await?;
        failed.iter().for_each(|f| eprintln!("fenceproof: could not drop {f}"));
    }
    let growth_setup = measured?;
    finish_run(&opts, s, t0, growth_setup).await
}

/// Every phase the run performs, in order; the growth steps' setup times.
async fn measure_all(b: &mut Bench, opts: &BenchOptions) -> Result<Vec<GrowthSetup>, HarnessError> {
    // Ours runs as the reference worker does: the worker login, through the fp_* functions.
    write_path::choose(WritePath::Api);
    driver::set_rate_ceiling(opts.max_rate);
    phases::driver_overhead(b, opts).await?;
    if opts.driver_only {
        return Ok(Vec::new());
    }
    let own_server = opts.database_url.is_none();
    let leases = phases::renewal(b, opts).await?;
    if own_server {
        phases::fillfactor(b, &leases, opts).await?;
    }
    let runs = phases::commit(b, opts).await?;
    phases::claim(b, opts).await?;
    phases::driver_neutral(b, &runs, opts).await?;
    let mut growth_setup = Vec::new();
    if own_server {
        phases::load_curves(b, &leases, &runs, opts).await?;
        growth_setup = phases::growth(b, opts).await?;
    }
    phases::sustained(b, opts).await?;
    Ok(growth_setup)
}

/// A run's server and folder, and the measuring context on them.
struct Started {
    run_dir: RunDir,
    server_version: String,
    settings: BTreeMap<String, String>,
    /// The bench's own cluster; `None` against a team's database.
    cluster: Option<NativeCluster>,
    bench: Bench,
    server: server::ServerFacts,
}

/// The settings a run reports, read back from the server.
const SETTINGS_SQL: &str = "SELECT name, setting FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit',
    'full_page_writes', 'shared_buffers', 'max_connections', 'autovacuum', 'wal_level', 'checkpoint_timeout',
    'max_wal_size')";

/// Start a native cluster with durable settings (or, with `--database-url`, make the run's own
/// schema in the team's database), migrate the bench database with the worker login and the raw
/// table, and read back the settings and facts the run reports.
async fn start(opts: &BenchOptions) -> Result<Started, HarnessError> {
    let run_dir = RunDir::create(&opts.reports_dir)?;
    let bin = PgBin::locate(opts.pg_bin.as_deref()).ok();
    let pgbench_bin = pgbench::locate(bin.as_ref().map(|b| b.dir.as_path())).ok_or_else(|| {
        HarnessError::Other(
            "pgbench not found beside the server binaries or on PATH (Debian: postgresql-contrib)".into(),
        )
    })?;
    let (cluster, admin_url, worker_url, name) = match &opts.database_url {
        Some(url) => {
            let own = server::own_schema(url, &run_dir.run_id).await?;
            eprintln!("fenceproof: bench runs in schema {} of {}", own.schema, server::display_name(url));
            // Without a role of its own in a team's database the bench calls the fp_* functions
            // as the URL's role, which owns them (the same calls; no role boundary).
            (None, own.url.clone(), own.url, server::display_name(url))
        }
        None => {
            let bin =
                bin.ok_or_else(|| HarnessError::Other("no PostgreSQL server binaries found (--pg-bin)".into()))?;
            let (cluster, admin_url) = own_cluster(bin, &run_dir).await?;
            let worker_url = databases::url_as(&admin_url, databases::WORKER_LOGIN)?;
            (Some(cluster), admin_url, worker_url, "a throwaway cluster the bench started on this host".into())
        }
    };
    let admin = databases::pool(&admin_url, "fenceproof-bench", 4).await?;
    workloads::create_raw_table(&admin).await?;
    let settings: BTreeMap<String, String> =
        sqlx::query_as::<_, (String, String)>(SETTINGS_SQL).fetch_all(&admin).await?.into_iter().collect();
    let facts = server::facts(&admin, &name, opts.database_url.is_some()).await?;
    let bench = Bench {
        progress: report::Progress::new(phase_count(opts)),
        admin,
        admin_url,
        worker_url,
        pgbench_bin,
        dir: run_dir.path.clone(),
        phases: Vec::new(),
        pgbench: Vec::new(),
        external: opts.database_url.is_some(),
    };
    Ok(Started { run_dir, server_version: facts.version.clone(), settings, cluster, bench, server: facts })
}

/// The bench's own native cluster with durable settings and its migrated `fenceproof_bench`
/// database with the worker login; the database's URL.
async fn own_cluster(bin: PgBin, run_dir: &RunDir) -> Result<(NativeCluster, String), HarnessError> {
    let cluster = NativeCluster::start_with(bin, &run_dir.path.join("postgres.log"), server_settings()).await?;
    let admin0 = databases::pool(&cluster.url_for("postgres"), "fenceproof-bench", 2).await?;
    sqlx::query("CREATE DATABASE fenceproof_bench").execute(&admin0).await?;
    admin0.close().await;
    let admin_url = cluster.url_for("fenceproof_bench");
    let admin = databases::pool(&admin_url, "fenceproof-bench", 1).await?;
    databases::migrate(&admin).await?;
    databases::create_worker_login(&admin).await?;
    admin.close().await;
    Ok((cluster, admin_url))
}

/// Stop the load, the server, and save the report.
async fn finish_run(
    opts: &BenchOptions,
    s: Started,
    t0: Instant,
    growth_setup: Vec<GrowthSetup>,
) -> Result<(BenchRun, PathBuf), HarnessError> {
    let Started { run_dir, server_version, settings, cluster, bench: mut b, server } = s;
    b.progress.done();
    write_path::choose(WritePath::Direct);
    b.admin.close().await;
    drop(cluster);

    let run = BenchRun {
        run_id: run_dir.run_id.clone(),
        server_version,
        settings,
        options: serde_json::json!({
            "duration_s": opts.duration.as_secs_f64(), "clients": opts.clients, "workers": opts.workers,
            "dispatchers": opts.dispatchers, "renew_batch": opts.renew_batch, "claim_batch": opts.claim_batch,
            "size": opts.size, "growth": opts.growth, "load_clients": opts.load_clients,
            "active_runs": opts.active_runs, "heartbeat_ms": opts.heartbeat.as_millis() as u64,
            "renewal_timeout_ms": opts.renewal_timeout.as_millis() as u64,
            "max_rate": opts.max_rate,
        }),
        phases: b.phases,
        pgbench: b.pgbench,
        growth_setup,
        duration_s: t0.elapsed().as_secs_f64(),
        server,
    };
    report::save(&run, &run_dir.path)?;
    let _ = run_dir.mark_latest();
    Ok((run, run_dir.path.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(tps: f64, tx: u64) -> PgbenchPhase {
        PgbenchPhase {
            group: "neutral-commit".into(),
            name: "x".into(),
            clients: 8,
            units_per_tx: 1,
            result: pgbench::PgbenchResult { tps, latency_avg_ms: 2.0, transactions: tx, client_cpu_s: 0.5 },
            rows_updated: tx as i64,
            rounds_tps: Vec::new(),
        }
    }

    #[test]
    fn rounds_give_the_median_rate_and_the_summed_work() {
        let p = PgbenchPhase::median_of(vec![round(3000.0, 6000), round(900.0, 1800), round(3300.0, 6600)]);
        assert_eq!(p.result.tps, 3000.0, "one slow round does not drag the rate down");
        assert_eq!(p.result.transactions, 14400);
        assert_eq!(p.rows_updated, 14400);
        assert!((p.result.client_cpu_s - 1.5).abs() < 1e-9);
        assert_eq!(p.rounds_tps, vec![3000.0, 900.0, 3300.0]);
        assert_eq!(PgbenchPhase::median_of(vec![round(1.0, 1), round(3.0, 1)]).result.tps, 2.0);
    }
}
