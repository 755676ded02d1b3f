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
//! - [`report`]: bench.json, bench.md, SVG plots, the terminal summary and the sizing answer.

pub mod dbstats;
pub mod driver;
pub mod neutral;
pub mod pgbench;
pub mod report;
pub mod workloads;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fenceproof_harness::db::native::NativeCluster;
use fenceproof_harness::db::pgbin::PgBin;
use fenceproof_harness::db::{databases, Backend};
use fenceproof_harness::record::run_dir::RunDir;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::write_path::{self, WritePath};
use serde::Serialize;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use uuid::Uuid;

use driver::Sample;
use workloads::HeldLease;

/// Leases per renewal statement in the sustained phases.
const SUSTAIN_BATCH: usize = 500;

/// application_name of the load's connections (so the harness can wait for them to be gone).
const LOAD_APP: &str = "fenceproof-bench-load";

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

struct Bench {
    admin: PgPool,
    admin_url: String,
    worker_url: String,
    phases: Vec<Phase>,
    pgbench: Vec<PgbenchPhase>,
    progress: report::Progress,
}

impl Bench {
    async fn load_pool(&self, url: &str, clients: usize) -> Result<PgPool, HarnessError> {
        let opts: PgConnectOptions = url.parse()?;
        let pool = PgPoolOptions::new()
            .max_connections(clients as u32)
            .test_before_acquire(false)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(opts.application_name(LOAD_APP))
            .await?;
        // Open every connection before the phase starts (not min_connections: its background
        // refill can open one more after close), so no phase pays for connecting.
        let mut warm = Vec::new();
        for _ in 0..clients {
            warm.push(pool.acquire().await?);
        }
        drop(warm);
        Ok(pool)
    }

    /// Run one closed-loop phase and keep what the database says about it.
    #[allow(clippy::too_many_arguments)]
    async fn closed<F, Fut>(
        &mut self,
        group: &str,
        name: &str,
        as_worker: bool,
        clients: usize,
        size: u64,
        duration: Duration,
        max_units: Option<u64>,
        op: F,
    ) -> Result<Phase, HarnessError>
    where
        F: Fn(usize, u64, PgPool) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<driver::Done, String>> + Send + 'static,
    {
        self.progress.step(&format!("{group}: {name} ({clients} clients)"));
        let url = if as_worker { self.worker_url.clone() } else { self.admin_url.clone() };
        let pool = self.load_pool(&url, clients).await?;
        // Every phase starts right after a checkpoint, so none of them pays for one that an
        // earlier phase's WAL started (full-page writes and fsyncs would land on whoever is next).
        sqlx::query("CHECKPOINT").execute(&self.admin).await?;
        let before = dbstats::snapshot(&self.admin).await?;
        let sampler = dbstats::LockSampler::start(self.admin.clone(), Duration::from_millis(10));
        let cpu0 = pgbench::cpu_seconds(nix::sys::resource::UsageWho::RUSAGE_SELF);
        let sample = driver::closed_loop(&pool, clients, duration, max_units, max_units.is_some(), op).await;
        let cpu = pgbench::cpu_seconds(nix::sys::resource::UsageWho::RUSAGE_SELF) - cpu0;
        self.finish(group, name, clients, size, Some(pool), before, Some(sampler), sample, cpu).await
    }

    /// The load generator's own phase on identical SQL to a pgbench script: [`driver::held_threads`]
    /// (pgbench's shape: [`pgbench::threads`] threads, a held connection per client), after a
    /// checkpoint as every phase, and, as pgbench's side of the comparison, with no lock sampler
    /// polling the server (its `lock_wait_s` is not measured and reads 0).
    async fn closed_held(
        &mut self,
        group: &str,
        name: &str,
        clients: usize,
        duration: Duration,
        sql: &'static str,
        id: fn(usize, u64) -> i32,
    ) -> Result<Phase, HarnessError> {
        self.progress.step(&format!("{group}: {name} ({clients} clients)"));
        let connect: PgConnectOptions = self.admin_url.parse()?;
        let connect = connect.application_name(LOAD_APP);
        sqlx::query("CHECKPOINT").execute(&self.admin).await?;
        let before = dbstats::snapshot(&self.admin).await?;
        let cpu0 = pgbench::cpu_seconds(nix::sys::resource::UsageWho::RUSAGE_SELF);
        let threads = pgbench::threads(clients);
        let sample =
            tokio::task::spawn_blocking(move || driver::held_threads(&connect, clients, threads, duration, sql, id))
                .await
                .map_err(|e| HarnessError::Other(format!("{group}/{name}: the load threads failed: {e}")))?
                .map_err(|e| HarnessError::Other(format!("{group}/{name}: {e}")))?;
        let cpu = pgbench::cpu_seconds(nix::sys::resource::UsageWho::RUSAGE_SELF) - cpu0;
        self.finish(group, name, clients, 0, None, before, None, sample, cpu).await
    }

    /// Run one pgbench phase of `script` (after a checkpoint, as every phase), as the worker
    /// login when the script is ours.
    async fn pgbench_phase(
        &mut self,
        pgbench_bin: &std::path::Path,
        dir: &std::path::Path,
        script: neutral::Script,
        clients: usize,
        load: pgbench::Load,
    ) -> Result<(), HarnessError> {
        let phase = self.pgbench_measure(pgbench_bin, dir, &script, clients, load).await?;
        self.pgbench.push(phase);
        Ok(())
    }

    /// Each group's scripts in [`ROUNDS`] alternating rounds (the order rotated every round), so
    /// that drift on a shared machine, and whatever the previous script left in the tables, hit
    /// every side of a ratio alike; each script's rate is the median of its rounds.
    async fn pgbench_alternating(
        &mut self,
        pgbench_bin: &std::path::Path,
        dir: &std::path::Path,
        scripts: Vec<neutral::Script>,
        clients: usize,
        d: Duration,
    ) -> Result<(), HarnessError> {
        let mut groups: Vec<Vec<neutral::Script>> = Vec::new();
        for s in scripts {
            match groups.last_mut() {
                Some(g) if g[0].group == s.group => g.push(s),
                _ => groups.push(vec![s]),
            }
        }
        for g in groups {
            let mut rounds: Vec<Vec<PgbenchPhase>> = g.iter().map(|_| Vec::new()).collect();
            for r in 0..ROUNDS {
                for k in 0..g.len() {
                    let i = (k + r) % g.len();
                    let p = self.pgbench_measure(pgbench_bin, dir, &g[i], clients, pgbench::Load::For(d)).await?;
                    rounds[i].push(p);
                }
            }
            for rs in rounds {
                self.pgbench.push(PgbenchPhase::median_of(rs));
            }
        }
        Ok(())
    }

    async fn pgbench_measure(
        &mut self,
        pgbench_bin: &std::path::Path,
        dir: &std::path::Path,
        script: &neutral::Script,
        clients: usize,
        load: pgbench::Load,
    ) -> Result<PgbenchPhase, HarnessError> {
        self.progress.step(&format!("{}: {} ({clients} clients)", script.group, script.name));
        let file = dir.join(format!("pgbench-{}-{}.sql", script.group, self.pgbench.len()));
        std::fs::write(&file, &script.sql)?;
        if script.carries_revision {
            sqlx::query(neutral::RESET_REVISIONS).execute(&self.admin).await?;
        }
        sqlx::query("CHECKPOINT").execute(&self.admin).await?;
        let before = dbstats::snapshot(&self.admin).await?;
        let url = if script.as_worker { &self.worker_url } else { &self.admin_url };
        let result = pgbench::run(pgbench_bin, url, &file, clients, load).map_err(HarnessError::Other)?;
        if let Some(w) = dbstats::settle(&self.admin, "pgbench", Duration::from_secs(60)).await {
            eprintln!("fenceproof: after {} / {}: {w}", script.group, script.name);
        }
        let after = dbstats::snapshot(&self.admin).await?;
        let rows_updated = dbstats::table_deltas(&before, &after).values().map(|t| t.n_tup_upd).sum();
        Ok(PgbenchPhase {
            group: script.group.into(),
            name: script.name.clone(),
            clients,
            units_per_tx: script.units_per_tx,
            result,
            rows_updated,
            rounds_tps: Vec::new(),
        })
    }

    #[allow(clippy::too_many_arguments)]
    async fn finish(
        &mut self,
        group: &str,
        name: &str,
        clients: usize,
        size: u64,
        pool: Option<PgPool>,
        before: dbstats::Snapshot,
        sampler: Option<dbstats::LockSampler>,
        s: Sample,
        client_cpu_s: f64,
    ) -> Result<Phase, HarnessError> {
        let lock_wait_s = match sampler {
            Some(sm) => sm.finish().await.0,
            None => 0.0,
        };
        if let Some(pool) = pool {
            pool.close().await;
        }
        // The load's backends leave on their own (observed, not slept on); on a loaded machine
        // that can take a while. A slow disconnect only makes this phase's table statistics
        // partial: it is said, and never aborts the benchmark.
        if let Some(w) = dbstats::settle(&self.admin, LOAD_APP, Duration::from_secs(60)).await {
            eprintln!("fenceproof: after {group} / {name}: {w}");
        }
        let after = dbstats::snapshot(&self.admin).await?;
        let q = |h: &hdrhistogram::Histogram<u64>, x| Sample::quantile_ms(h, x);
        let phase = Phase {
            group: group.into(),
            name: name.into(),
            clients,
            size,
            units_per_s: s.units_per_s(),
            statements_per_s: s.statements_per_s(),
            units: s.units,
            errors: s.errors,
            first_error: s.first_error.clone(),
            elapsed_s: s.elapsed.as_secs_f64(),
            p50_ms: q(&s.latency_us, 0.5),
            p99_ms: q(&s.latency_us, 0.99),
            p999_ms: q(&s.latency_us, 0.999),
            max_ms: s.latency_us.max() as f64 / 1000.0,
            pool_wait_p99_ms: q(&s.pool_wait_us, 0.99),
            commit_p50_ms: (!s.commit_us.is_empty()).then(|| q(&s.commit_us, 0.5)),
            commit_p99_ms: (!s.commit_us.is_empty()).then(|| q(&s.commit_us, 0.99)),
            lock_wait_s,
            wal_bytes_per_unit: (after.wal_bytes - before.wal_bytes) as f64 / s.units.max(1) as f64,
            commits: after.xact_commit - before.xact_commit,
            tables: dbstats::table_deltas(&before, &after),
            client_cpu_s,
        };
        if let Some(e) = &phase.first_error {
            eprintln!("\r\x1b[2Kfenceproof bench: {group}/{name}: {} errors, first: {e}", phase.errors);
        }
        self.phases.push(phase.clone());
        Ok(phase)
    }
}

/// The number of phases a run with `o` performs (for the progress bar).
fn phase_count(o: &BenchOptions) -> usize {
    3 * DRIVER_ROUNDS + 2 + 2 + 1 + 4 + 2 + 9 + 3 * o.load_clients.len() + 3 * o.growth.len() + 2
}

/// Run the whole benchmark; returns the run and its folder.
pub async fn run(opts: BenchOptions) -> Result<(BenchRun, PathBuf), HarnessError> {
    let t0 = Instant::now();
    let run_dir = RunDir::create(&opts.reports_dir)?;
    let bin = PgBin::locate(opts.pg_bin.as_deref())?;
    let pgbench_bin = pgbench::locate(Some(&bin.dir)).ok_or_else(|| {
        HarnessError::Other(format!(
            "pgbench not found in {} or on PATH (Debian: postgresql-contrib)",
            bin.dir.display()
        ))
    })?;
    let cluster = NativeCluster::start_with(bin.clone(), &run_dir.path.join("postgres.log"), server_settings()).await?;
    let admin0 = databases::pool(&cluster.url_for("postgres"), "fenceproof-bench", 2).await?;
    sqlx::query("CREATE DATABASE fenceproof_bench").execute(&admin0).await?;
    admin0.close().await;
    let admin_url = cluster.url_for("fenceproof_bench");
    let admin = databases::pool(&admin_url, "fenceproof-bench", 4).await?;
    databases::migrate(&admin).await?;
    databases::create_worker_login(&admin).await?;
    workloads::create_raw_table(&admin).await?;
    let settings: BTreeMap<String, String> = sqlx::query_as::<_, (String, String)>(
        "SELECT name, setting FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes',
                'shared_buffers', 'max_connections', 'autovacuum', 'wal_level', 'checkpoint_timeout', 'max_wal_size')",
    )
    .fetch_all(&admin)
    .await?
    .into_iter()
    .collect();
    let worker_url = databases::url_as(&admin_url, databases::WORKER_LOGIN)?;
    let mut b = Bench {
        progress: report::Progress::new(phase_count(&opts)),
        admin: admin.clone(),
        admin_url: admin_url.clone(),
        worker_url,
        phases: Vec::new(),
        pgbench: Vec::new(),
    };
    // Ours runs as the reference worker does: the worker login, through the fp_* functions.
    write_path::choose(WritePath::Api);
    let (d, half, c) = (opts.duration, opts.duration / 2, opts.clients);

    // 1. The driver's own overhead: identical SQL, same clients, ours and pgbench in
    //    [`DRIVER_ROUNDS`] paired rounds (whole seconds, as pgbench counts them; which side goes
    //    first alternates), so drift on a shared machine hits both sides of each round; the goal
    //    is the median of the rounds' ratios. A round is a whole main phase long: in one-second
    //    rounds a single stall of the shared machine decides a round.
    let slice = Duration::from_secs(d.as_secs_f64().round().max(1.0) as u64);
    let raw_script = neutral::Script {
        group: "driver",
        name: "pgbench: UPDATE bench_raw by primary key".into(),
        sql: workloads::RAW_UPDATE_PGBENCH.into(),
        units_per_tx: 1,
        as_worker: false,
        transactions_per_client: None,
        carries_revision: false,
    };
    for round in 0..DRIVER_ROUNDS {
        if round % 2 == 1 {
            let p = b.pgbench_measure(&pgbench_bin, &run_dir.path, &raw_script, c, pgbench::Load::For(slice)).await?;
            b.pgbench.push(p);
        }
        // The load generator holds one connection per client on pgbench's threads (see
        // `driver::held_threads`); the same statement through a pool acquire per statement, as
        // the protocol crate's calls go, is measured beside it.
        b.closed_held(
            "driver",
            "our driver: UPDATE bench_raw by primary key, one held connection per client",
            c,
            slice,
            workloads::RAW_UPDATE,
            |cl, seq| 1 + workloads::pick(cl, seq, workloads::RAW_ROWS as usize) as i32,
        )
        .await?;
        if round % 2 == 0 {
            let p = b.pgbench_measure(&pgbench_bin, &run_dir.path, &raw_script, c, pgbench::Load::For(slice)).await?;
            b.pgbench.push(p);
        }
        b.closed(
            "driver-pool",
            "our driver: UPDATE bench_raw by primary key, a pool acquire per statement",
            false,
            c,
            workloads::RAW_ROWS as u64,
            slice,
            None,
            |cl, seq, pool| {
                workloads::raw_update(pool, 1 + workloads::pick(cl, seq, workloads::RAW_ROWS as usize) as i32)
            },
        )
        .await?;
    }

    if opts.driver_only {
        return finish_run(&opts, b, run_dir, settings, bin.version(), t0, Vec::new(), admin, cluster).await;
    }

    // 2. Renewal, per lease and batched, at the main size.
    let leases = Arc::new(workloads::leases_up_to(&admin, opts.size, opts.workers).await?);
    workloads::vacuum(&admin, "VACUUM (FULL, ANALYZE) worker_leases").await?;
    renewal_pair(&mut b, &leases, c, opts.size, d, "renewal").await?;
    let by_owner = Arc::new(group_by_owner(&leases));
    let k = opts.renew_batch;
    {
        let by_owner = by_owner.clone();
        b.closed(
            "renewal-batched",
            &format!("ours: fenced batch of {k} (fp_lease_renew_many)"),
            true,
            c,
            opts.size,
            d,
            None,
            move |cl, seq, pool| {
                let (owner, mine) = &by_owner[cl % by_owner.len()];
                let batch =
                    (0..k).map(|j| mine[workloads::pick(cl, seq * 7919 + j as u64, mine.len())]).collect::<Vec<_>>();
                let batch = dedup(batch);
                workloads::renew_many_ours(pool, owner.clone(), batch)
            },
        )
        .await?;
    }
    {
        let by_owner = by_owner.clone();
        b.closed(
            "renewal-batched",
            &format!("raw: UPDATE … WHERE run_id = ANY(batch of {k})"),
            false,
            c,
            opts.size,
            d,
            None,
            move |cl, seq, pool| {
                let (_, mine) = &by_owner[cl % by_owner.len()];
                let batch =
                    (0..k).map(|j| mine[workloads::pick(cl, seq * 7919 + j as u64, mine.len())]).collect::<Vec<_>>();
                workloads::renew_many_raw(pool, dedup(batch).into_iter().map(|(r, _)| r).collect())
            },
        )
        .await?;
    }

    // 3. Fillfactor: the same per-lease renewal with room for HOT updates on every page.
    workloads::vacuum(&admin, "ALTER TABLE worker_leases SET (fillfactor = 70)").await?;
    workloads::vacuum(&admin, "VACUUM (FULL, ANALYZE) worker_leases").await?;
    {
        let leases = leases.clone();
        b.closed(
            "fillfactor",
            "ours per lease, worker_leases fillfactor 70",
            true,
            c,
            opts.size,
            d,
            None,
            move |cl, seq, pool| workloads::renew_ours(pool, leases[workloads::pick(cl, seq, leases.len())].clone()),
        )
        .await?;
    }
    workloads::vacuum(&admin, "ALTER TABLE worker_leases RESET (fillfactor)").await?;
    workloads::vacuum(&admin, "VACUUM (FULL, ANALYZE) worker_leases").await?;

    // 4. Protected commit: ours through the functions, ours with direct statements, the spec's
    //    five round trips, and a raw single-row UPDATE of the same run.
    let runs = workloads::commit_runs(&admin, c.max(*opts.load_clients.iter().max().unwrap_or(&c))).await?;
    commit_ours_phase(&mut b, &runs, c, d, "commit", "ours: protected transition (fp_run_transition)", true).await?;
    write_path::choose(WritePath::Direct);
    commit_ours_phase(&mut b, &runs, c, d, "commit", "ours: protected transition, direct statements", false).await?;
    write_path::choose(WritePath::Api);
    commit_spec_phase(&mut b, &runs, c, d).await?;
    {
        let runs: Arc<Vec<Uuid>> = Arc::new(runs.iter().map(|(l, _)| l.run_id).collect());
        b.closed("commit", "raw: UPDATE agent_runs by primary key", false, c, 0, d, None, move |cl, seq, pool| {
            workloads::commit_raw(pool, runs[cl], seq)
        })
        .await?;
    }

    // 5. Claim: ours and a bare SKIP LOCKED claim, each from a fresh backlog of the same size, in
    //    [`ROUNDS`] alternating rounds (the order swapped every round); the goal compares medians.
    let kc = opts.claim_batch;
    let order = |r: usize| if r.is_multiple_of(2) { [false, true] } else { [true, false] };
    for bare in (0..ROUNDS).flat_map(order) {
        workloads::prepared_backlog(&admin, opts.size).await?;
        let name = if bare {
            format!("raw: bare FOR UPDATE SKIP LOCKED, {kc} per claim")
        } else {
            format!("ours: protected claim (fp_claim), {kc} per claim")
        };
        b.closed("claim", &name, !bare, opts.dispatchers, opts.size, d, Some(opts.size / 2), move |cl, _, pool| {
            let owner = format!("bench-d{cl}");
            async move {
                if bare {
                    workloads::claim_bare(pool, owner, kc).await
                } else {
                    workloads::claim_ours(pool, owner, kc).await
                }
            }
        })
        .await?;
    }

    // 5b. Driver-neutral capacity: the same fp_* calls, their raw rows and the physical reference,
    //     driven by pgbench (see `neutral`); the sizing answer is computed from these.
    let commit_ids: Vec<Uuid> = runs.iter().map(|(l, _)| l.run_id).collect();
    neutral::prepare_ids(&admin, &commit_ids).await?;
    let mut scripts = neutral::renewal(opts.size, opts.workers, opts.renew_batch);
    scripts.extend(neutral::commit());
    b.pgbench_alternating(&pgbench_bin, &run_dir.path, scripts, c, d).await?;
    for s in neutral::claim(kc, opts.size, opts.dispatchers) {
        workloads::prepared_backlog(&admin, opts.size).await?;
        let load = pgbench::Load::Transactions(s.transactions_per_client.unwrap_or(1));
        b.pgbench_phase(&pgbench_bin, &run_dir.path, s, opts.dispatchers, load).await?;
    }

    // 6. Load curves: throughput and latency against the number of clients.
    for &n in &opts.load_clients {
        renewal_pair(&mut b, &leases, n, opts.size, half, "load-renewal").await?;
        commit_ours_phase(
            &mut b,
            &runs,
            n,
            half,
            "load-commit",
            "ours: protected transition (fp_run_transition)",
            true,
        )
        .await?;
    }

    // 7. Growth: renewal over more active leases, claim over a larger backlog, with our schema
    //    and with only the spec's index.
    let mut growth_setup = Vec::new();
    for &size in &opts.growth {
        let t = Instant::now();
        let all = Arc::new(workloads::leases_up_to(&admin, size, opts.workers).await?);
        let leases_s = t.elapsed().as_secs_f64();
        let mut backlog_s = 0.0;
        let sized: Arc<Vec<HeldLease>> = Arc::new(all[..(size as usize).min(all.len())].to_vec());
        b.closed("growth-renewal", "ours per lease", true, c, size, half, None, move |cl, seq, pool| {
            workloads::renew_ours(pool, sized[workloads::pick(cl, seq, sized.len())].clone())
        })
        .await?;
        for spec_only in [false, true] {
            if spec_only {
                sqlx::query("DROP INDEX tool_operations_prepared_idx").execute(&admin).await?;
            }
            let t = Instant::now();
            workloads::prepared_backlog(&admin, size).await?;
            backlog_s += t.elapsed().as_secs_f64();
            let group = if spec_only { "growth-claim-spec-index" } else { "growth-claim" };
            let name = if spec_only { "ours, only the spec's index" } else { "ours, default schema" };
            b.closed(group, name, true, opts.dispatchers, size, half, Some(size / 2), move |cl, _, pool| {
                workloads::claim_ours(pool, format!("bench-d{cl}"), kc)
            })
            .await?;
            if spec_only {
                sqlx::query(
                    "CREATE INDEX tool_operations_prepared_idx ON tool_operations (updated_at) WHERE status = 'prepared'",
                )
                .execute(&admin)
                .await?;
            }
        }
        growth_setup.push(GrowthSetup { size, leases_s, backlog_s });
    }

    // 8. Sustained renewal: M workers renew all their leases every heartbeat, in one statement
    //    each: the contract's N/H, and 30,000 leases every second.
    let contract = (opts.active_runs, opts.heartbeat);
    for (n, every, label) in
        [(contract.0, contract.1, "sustain-contract"), (30_000, Duration::from_secs(1), "sustain-30k")]
    {
        let all = workloads::leases_up_to(&admin, n, opts.workers).await?;
        let held: Vec<HeldLease> = all.into_iter().take(n as usize).collect();
        let groups = group_by_owner(&held);
        // A worker holding many leases staggers them over its heartbeat in batches of at most
        // SUSTAIN_BATCH, each fenced by owner + epoch; every batch is one beat of the open loop.
        let beats: Arc<Vec<OwnedBatch>> = Arc::new(
            groups
                .iter()
                .flat_map(|(owner, mine)| mine.chunks(SUSTAIN_BATCH).map(|c| (owner.clone(), c.to_vec())))
                .collect(),
        );
        let name = format!(
            "{n} leases, {} workers, batches of <= {SUSTAIN_BATCH} staggered over a {} ms heartbeat",
            groups.len(),
            every.as_millis()
        );
        b.progress.step(&format!("{label}: {name}"));
        let pool = b.load_pool(&b.worker_url.clone(), groups.len()).await?;
        // One unmeasured heartbeat first: each connection compiles the function and plans it once.
        let g = beats.clone();
        driver::open_loop(&pool, beats.len(), every, every, move |w, pool| {
            let (owner, batch) = g[w].clone();
            workloads::renew_many_ours(pool, owner, batch)
        })
        .await;
        sqlx::query("CHECKPOINT").execute(&admin).await?;
        let before = dbstats::snapshot(&admin).await?;
        let sampler = dbstats::LockSampler::start(admin.clone(), Duration::from_millis(10));
        let g = beats.clone();
        let sample = driver::open_loop(&pool, beats.len(), every, d.max(every * 2), move |w, pool| {
            let (owner, batch) = g[w].clone();
            workloads::renew_many_ours(pool, owner, batch)
        })
        .await;
        b.finish(label, &name, groups.len(), n, Some(pool), before, Some(sampler), sample, 0.0).await?;
    }
    finish_run(&opts, b, run_dir, settings, bin.version(), t0, growth_setup, admin, cluster).await
}

/// Stop the load, the server, and save the report.
#[allow(clippy::too_many_arguments)]
async fn finish_run(
    opts: &BenchOptions,
    b: Bench,
    run_dir: RunDir,
    settings: BTreeMap<String, String>,
    server_version: String,
    t0: Instant,
    growth_setup: Vec<GrowthSetup>,
    admin: PgPool,
    cluster: NativeCluster,
) -> Result<(BenchRun, PathBuf), HarnessError> {
    let mut b = b;
    b.progress.done();
    write_path::choose(WritePath::Direct);
    admin.close().await;
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
        }),
        phases: b.phases,
        pgbench: b.pgbench,
        growth_setup,
        duration_s: t0.elapsed().as_secs_f64(),
    };
    report::save(&run, &run_dir.path)?;
    let _ = run_dir.mark_latest();
    Ok((run, run_dir.path.clone()))
}

async fn renewal_pair(
    b: &mut Bench,
    leases: &Arc<Vec<HeldLease>>,
    clients: usize,
    size: u64,
    d: Duration,
    group: &str,
) -> Result<(), HarnessError> {
    let l = leases.clone();
    b.closed(group, "ours per lease (fp_lease_renew)", true, clients, size, d, None, move |cl, seq, pool| {
        workloads::renew_ours(pool, l[workloads::pick(cl, seq, l.len())].clone())
    })
    .await?;
    let l = leases.clone();
    b.closed(group, "raw: UPDATE worker_leases by primary key", false, clients, size, d, None, move |cl, seq, pool| {
        workloads::renew_raw(pool, l[workloads::pick(cl, seq, l.len())].clone())
    })
    .await?;
    Ok(())
}

/// Per-client revision counters for the commit phases (each client owns one run).
fn revisions(runs: &[(fenceproof_protocol::Lease, i64)]) -> Arc<Vec<AtomicI64>> {
    Arc::new(runs.iter().map(|(_, r)| AtomicI64::new(*r)).collect())
}

async fn current_revisions(
    admin: &PgPool,
    runs: &[(fenceproof_protocol::Lease, i64)],
) -> Result<Vec<(fenceproof_protocol::Lease, i64)>, HarnessError> {
    let mut out = Vec::new();
    for (l, _) in runs {
        let rev: i64 = sqlx::query_scalar("SELECT revision FROM agent_runs WHERE run_id = $1")
            .bind(l.run_id)
            .fetch_one(admin)
            .await?;
        out.push((l.clone(), rev));
    }
    Ok(out)
}

async fn commit_ours_phase(
    b: &mut Bench,
    runs: &[(fenceproof_protocol::Lease, i64)],
    clients: usize,
    d: Duration,
    group: &str,
    name: &str,
    as_worker: bool,
) -> Result<(), HarnessError> {
    let runs = current_revisions(&b.admin, runs).await?;
    let revs = revisions(&runs);
    let leases: Arc<Vec<fenceproof_protocol::Lease>> = Arc::new(runs.into_iter().map(|(l, _)| l).collect());
    b.closed(group, name, as_worker, clients, 0, d, None, move |cl, seq, pool| {
        let (revs, lease) = (revs.clone(), leases[cl].clone());
        async move {
            let (rev, done) = workloads::commit_ours(pool, lease, revs[cl].load(Ordering::Relaxed), seq).await?;
            revs[cl].store(rev, Ordering::Relaxed);
            Ok(done)
        }
    })
    .await?;
    Ok(())
}

async fn commit_spec_phase(
    b: &mut Bench,
    runs: &[(fenceproof_protocol::Lease, i64)],
    clients: usize,
    d: Duration,
) -> Result<(), HarnessError> {
    let runs = current_revisions(&b.admin, runs).await?;
    let revs = revisions(&runs);
    let leases: Arc<Vec<fenceproof_protocol::Lease>> = Arc::new(runs.into_iter().map(|(l, _)| l).collect());
    // The spec's transaction takes a row lock, which the worker role may only do inside fp_*: it
    // runs with table privileges, as the spec's example does.
    b.closed(
        "commit",
        "spec §06: BEGIN, lock, validate, CAS, COMMIT (5 round trips)",
        false,
        clients,
        0,
        d,
        None,
        move |cl, seq, pool| {
            let (revs, lease) = (revs.clone(), leases[cl].clone());
            async move {
                let (rev, done) = workloads::commit_spec(pool, lease, revs[cl].load(Ordering::Relaxed), seq).await?;
                revs[cl].store(rev, Ordering::Relaxed);
                Ok(done)
            }
        },
    )
    .await?;
    Ok(())
}

/// An owner and leases it holds (run_id, epoch).
type OwnedBatch = (String, Vec<(Uuid, i64)>);

/// The held leases grouped by owner (one group per worker), with their epochs.
fn group_by_owner(leases: &[HeldLease]) -> Vec<OwnedBatch> {
    let mut m: BTreeMap<String, Vec<(Uuid, i64)>> = BTreeMap::new();
    for l in leases {
        m.entry(l.owner.clone()).or_default().push((l.run_id, l.epoch));
    }
    m.into_iter().collect()
}

fn dedup(mut v: Vec<(Uuid, i64)>) -> Vec<(Uuid, i64)> {
    v.sort();
    v.dedup();
    v
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
