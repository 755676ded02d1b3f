//! The measuring context of one run: a phase at a time, each after a checkpoint, with what the
//! database says about it (WAL, commits, table statistics, sampled lock waits) kept beside the
//! load's own numbers. Closed loops of ours, our driver on pgbench's shape, and pgbench itself.

use std::path::PathBuf;
use std::time::Duration;

use fenceproof_harness::HarnessError;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

use crate::driver::{self, Sample};
use crate::{dbstats, neutral, pgbench, report, PgbenchPhase, Phase, ROUNDS};

/// application_name of the load's connections (so the harness can wait for them to be gone).
const LOAD_APP: &str = "fenceproof-bench-load";

/// What every phase needs: the admin pool and URLs, pgbench and the run folder, and what was
/// measured so far.
pub(crate) struct Bench {
    pub(crate) admin: PgPool,
    pub(crate) admin_url: String,
    pub(crate) worker_url: String,
    /// The pgbench next to the server's binaries, and the folder its scripts are written to.
    pub(crate) pgbench_bin: PathBuf,
    pub(crate) dir: PathBuf,
    pub(crate) phases: Vec<Phase>,
    pub(crate) pgbench: Vec<PgbenchPhase>,
    pub(crate) progress: report::Progress,
    /// A team's database (`--database-url`): no CHECKPOINT is forced on a shared server (nor may
    /// a role without superuser or pg_checkpoint force one).
    pub(crate) external: bool,
}

impl Bench {
    /// Start the next phase after a checkpoint, on a server of the bench's own.
    pub(crate) async fn checkpoint(&self) -> Result<(), HarnessError> {
        if !self.external {
            sqlx::query("CHECKPOINT").execute(&self.admin).await?;
        }
        Ok(())
    }

    pub(crate) async fn load_pool(&self, url: &str, clients: usize) -> Result<PgPool, HarnessError> {
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
    pub(crate) async fn closed<F, Fut>(
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
        self.checkpoint().await?;
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
    pub(crate) async fn closed_held(
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
        self.checkpoint().await?;
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
    pub(crate) async fn pgbench_phase(
        &mut self,
        script: neutral::Script,
        clients: usize,
        load: pgbench::Load,
    ) -> Result<(), HarnessError> {
        let phase = self.pgbench_measure(&script, clients, load).await?;
        self.pgbench.push(phase);
        Ok(())
    }

    /// Each group's scripts in [`ROUNDS`] alternating rounds (the order rotated every round), so
    /// that drift on a shared machine, and whatever the previous script left in the tables, hit
    /// every side of a ratio alike; each script's rate is the median of its rounds.
    pub(crate) async fn pgbench_alternating(
        &mut self,
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
                    let p = self.pgbench_measure(&g[i], clients, pgbench::Load::For(d)).await?;
                    rounds[i].push(p);
                }
            }
            for rs in rounds {
                self.pgbench.push(PgbenchPhase::median_of(rs));
            }
        }
        Ok(())
    }

    /// One pgbench run of `script`, after a checkpoint, with the rows it updated.
    pub(crate) async fn pgbench_measure(
        &mut self,
        script: &neutral::Script,
        clients: usize,
        load: pgbench::Load,
    ) -> Result<PgbenchPhase, HarnessError> {
        self.progress.step(&format!("{}: {} ({clients} clients)", script.group, script.name));
        let file = self.dir.join(format!("pgbench-{}-{}.sql", script.group, self.pgbench.len()));
        std::fs::write(&file, &script.sql)?;
        if script.carries_revision {
            sqlx::query(neutral::RESET_REVISIONS).execute(&self.admin).await?;
        }
        self.checkpoint().await?;
        let before = dbstats::snapshot(&self.admin).await?;
        let url = if script.as_worker { &self.worker_url } else { &self.admin_url };
        let result = pgbench::run(&self.pgbench_bin, url, &file, clients, load).await.map_err(HarnessError::Other)?;
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
    pub(crate) async fn finish(
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
