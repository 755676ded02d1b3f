//! Running a selection of experiments against one server and assembling the matrix.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fenceproof_harness::db::native::NativeCluster;
use fenceproof_harness::db::pgbin::PgBin;
use fenceproof_harness::db::{databases, Backend};
use fenceproof_harness::record::oracle;
use fenceproof_harness::record::run_dir::RunDir;
use fenceproof_harness::record::timeline::Timeline;
use fenceproof_harness::report::{ExperimentResult, Matrix, Outcome};
use fenceproof_harness::HarnessError;

use crate::ctx::{Ctx, CONTROL};
use crate::Experiment;

/// Upper bound on one whole experiment.
pub const EXPERIMENT_TIMEOUT: Duration = Duration::from_secs(90);

pub struct VerifyOptions {
    pub pg_bin: Option<PathBuf>,
    pub reports_dir: PathBuf,
    pub worker_bin: PathBuf,
    pub tools_bin: PathBuf,
}

/// Start a native cluster, run `experiments`, save the matrix; returns it with the run folder.
pub async fn verify(opts: &VerifyOptions, experiments: Vec<Experiment>) -> Result<(Matrix, PathBuf), HarnessError> {
    let started_at = chrono::Utc::now();
    let t0 = Instant::now();
    let bin = PgBin::locate(opts.pg_bin.as_deref())?;
    if !opts.worker_bin.is_file() {
        return Err(HarnessError::Other(format!(
            "worker binary {} not found; build it with `cargo build --workspace` or pass --worker-bin",
            opts.worker_bin.display()
        )));
    }
    let run = RunDir::create(&opts.reports_dir)?;
    let cluster = NativeCluster::start(bin, &run.path.join("postgres.log")).await?;
    databases::create_template(&cluster).await?;

    let mut results = Vec::new();
    for exp in experiments {
        results.push(run_one(&cluster, &run, opts, &exp).await?);
    }
    let matrix = Matrix {
        run_id: run.run_id.clone(),
        backend: cluster.kind().into(),
        server_version: cluster.version(),
        started_at,
        duration_ms: t0.elapsed().as_millis(),
        results,
    };
    drop(cluster);
    matrix.save(&run.path)?;
    run.mark_latest()?;
    Ok((matrix, run.path))
}

async fn run_one(
    backend: &dyn Backend,
    run: &RunDir,
    opts: &VerifyOptions,
    exp: &Experiment,
) -> Result<ExperimentResult, HarnessError> {
    let t0 = Instant::now();
    let dir = run.experiment(exp.id)?;
    let dbname = format!("fp_{}", exp.id.to_lowercase().replace('-', "_"));
    let db_url = databases::create_from_template(backend, &dbname).await?;
    let pool = databases::pool(&db_url, CONTROL, 4).await?;
    let mut ctx = Ctx {
        id: exp.id.into(),
        dir: dir.clone(),
        db_url,
        pool: pool.clone(),
        timeline: Timeline::new(),
        worker_bin: opts.worker_bin.clone(),
        tools_bin: opts.tools_bin.clone(),
        checks: Vec::new(),
        notes: Vec::new(),
    };
    let res = tokio::time::timeout(EXPERIMENT_TIMEOUT, (exp.run)(&mut ctx)).await;
    let error = match res {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some(format!("experiment did not finish within {EXPERIMENT_TIMEOUT:?}")),
    };
    // Evidence, whatever happened.
    ctx.timeline.save(&dir.join("timeline.jsonl"))?;
    if let Ok(rows) = oracle::commits(&pool).await {
        std::fs::write(dir.join("oracle.json"), serde_json::to_string_pretty(&rows).expect("json"))?;
    }
    std::fs::write(dir.join("checks.json"), serde_json::to_string_pretty(&ctx.checks).expect("json"))?;
    pool.close().await;

    let outcome = if ctx.checks.iter().any(|c| !c.passed()) {
        Outcome::Fail
    } else if error.is_some() || ctx.checks.is_empty() {
        Outcome::Error
    } else {
        Outcome::Pass
    };
    let mut observations = ctx.notes.join("; ");
    if observations.is_empty() {
        observations = error.clone().unwrap_or_default();
    }
    Ok(ExperimentResult {
        id: exp.id.into(),
        title: exp.title.into(),
        outcome,
        duration_ms: t0.elapsed().as_millis(),
        observations,
        checks: ctx.checks,
        error,
        reproduce: format!("fenceproof verify --only {}   (evidence: {})", exp.id, dir.display()),
    })
}

/// Where the worker binary is: `FENCEPROOF_WORKER_BIN`, else beside this executable (or one level
/// up, for test binaries in target/*/deps).
pub fn default_worker_bin() -> PathBuf {
    sibling_binary("FENCEPROOF_WORKER_BIN", "fenceproof-worker")
}

/// Where the fake-tools binary is: `FENCEPROOF_TOOLS_BIN`, else found like the worker.
pub fn default_tools_bin() -> PathBuf {
    sibling_binary("FENCEPROOF_TOOLS_BIN", "fenceproof-fake-tools")
}

fn sibling_binary(env: &str, name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let here = dir.join(name);
    if here.is_file() {
        return here;
    }
    dir.parent().map(|p| p.join(name)).filter(|p| p.is_file()).unwrap_or(here)
}
