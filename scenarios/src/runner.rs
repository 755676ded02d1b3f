//! Running experiments against one server and assembling matrices.
//!
//! A [`Session`] owns the server (started once per command) and the run folder. [`Session::matrix`]
//! runs a selection of experiments, each in a fresh database cloned from the template, with extra
//! worker arguments (a mutant); `verify` runs it once or `--repeat N` times, `mutants` once for the
//! reference and once per mutant.

pub use crate::binaries::{default_mutant_worker_bin, default_tools_bin, default_worker_bin};
use std::path::{Path, PathBuf};
use std::time::Instant;

use fenceproof_harness::check::rule::{judged_by, RuleRef};
use fenceproof_harness::check::Check;
use fenceproof_harness::db::connections::Budget;
use fenceproof_harness::db::container::{self, ContainerDb};
use fenceproof_harness::db::external::{self, ExternalDb};
use fenceproof_harness::db::native::NativeCluster;
use fenceproof_harness::db::pgbin::PgBin;
use fenceproof_harness::db::{databases, Backend};
use fenceproof_harness::faults::ServerTarget;
use fenceproof_harness::lag::Lag;
use fenceproof_harness::pressure::Stall;
use fenceproof_harness::record::oracle;
use fenceproof_harness::record::run_dir::RunDir;
use fenceproof_harness::record::timeline::Timeline;
use fenceproof_harness::report::{partial, ExperimentResult, Matrix, Outcome, WorkerUnderTest};
use fenceproof_harness::HarnessError;
use fenceproof_protocol::write_path::WritePath;

use crate::ctx::{Ctx, CONTROL};
pub use crate::reproduce::shell_word;
use crate::reproduce::{Ran, Reproduce};
use crate::Experiment;

/// Which server the experiments run on (without --database-url).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// Native binaries when present, else Docker when a daemon answers, else a one-line error.
    #[default]
    Auto,
    Native,
    Container,
}

impl BackendChoice {
    pub fn parse(s: &str) -> Option<BackendChoice> {
        match s {
            "auto" => Some(BackendChoice::Auto),
            "native" => Some(BackendChoice::Native),
            "container" => Some(BackendChoice::Container),
            _ => None,
        }
    }

    /// The flag's word for this choice.
    pub fn label(self) -> &'static str {
        match self {
            BackendChoice::Auto => "auto",
            BackendChoice::Native => "native",
            BackendChoice::Container => "container",
        }
    }
}

pub struct VerifyOptions {
    pub backend: BackendChoice,
    /// The image of the container backend.
    pub pg_image: String,
    pub pg_bin: Option<PathBuf>,
    /// Run in the user's database (dedicated schemas) instead of a throwaway cluster.
    pub database_url: Option<String>,
    /// The deployment contract (`--contract`), if any.
    pub contract: Option<std::sync::Arc<fenceproof_harness::contract::Contract>>,
    /// Where that contract was read from (for the reproduce line).
    pub contract_path: Option<PathBuf>,
    pub reports_dir: PathBuf,
    pub worker_bin: PathBuf,
    /// The folder the worker's fingerprint covers (`verify --worker-dir`); `None`: the worker's
    /// own file, or a script's folder.
    pub worker_dir: Option<PathBuf>,
    pub tools_bin: PathBuf,
    /// `--skip-conformance` was given (said again in every reproduce line).
    pub skip_conformance: bool,
    /// The command that runs verify, as the reproduce lines start: the path this program was
    /// invoked by and `verify` (`./target/debug/fenceproof verify`), or `just verify`.
    pub program: String,
    /// The conformance report of the gate that ran before the matrix, linked from every report.
    pub conformance_report: Option<PathBuf>,
    /// How many rows run side by side (`--jobs`; 1 runs them one after another).
    pub jobs: usize,
    /// The write path the workers get (`--write-path`): the fp_* functions, or their own statements.
    pub write_path: WritePath,
    /// Which judges decide the verdicts (`--judge`): the rule checks, trace validation, or both.
    pub judging: crate::trace_check::Judging,
    /// How many times a matrix runs its STARVED rows again, one at a time, once the others ended
    /// (`--starved-reruns`; 0: a starved row stays STARVED).
    pub starved_reruns: u32,
}

/// The server the experiments run against.
pub enum Server {
    /// A throwaway cluster with a migrated template; a fresh database per experiment.
    Native(NativeCluster),
    /// The user's database; a fresh schema pair per experiment, dropped at the end.
    External(ExternalDb),
    /// PostgreSQL in a Docker container (testcontainers); a fresh database per experiment.
    Container(Box<ContainerDb>),
}

impl Server {
    pub fn kind(&self) -> &'static str {
        match self {
            Server::Native(c) => c.kind(),
            Server::External(_) => "external",
            Server::Container(_) => "container",
        }
    }
    pub fn version(&self) -> String {
        match self {
            Server::Native(c) => c.version(),
            Server::Container(c) => format!("{} in {}", c.version(), c.image),
            Server::External(e) => format!("{} as {} on {}", e.version, e.role, e.database),
        }
    }
}

/// One server and one run folder for a whole command.
pub struct Session {
    pub server: Server,
    /// Local PostgreSQL binaries (always found for native runs; optional with an external database).
    pub pg_bin: Option<PgBin>,
    pub contract: Option<std::sync::Arc<fenceproof_harness::contract::Contract>>,
    pub run: RunDir,
    pub worker_bin: PathBuf,
    pub tools_bin: PathBuf,
    /// What every reproduce line holds but the row (see [`Session::reproduce`]).
    reproduce: Reproduce,
    /// The program the rows drive, as every report names it.
    worker: WorkerUnderTest,
    conformance_report: Option<String>,
    started_at: chrono::DateTime<chrono::Utc>,
    t0: Instant,
    databases: u32,
    /// SQL run in every fresh experiment database right after it is cloned (a generated mutant of
    /// an fp_* function, `CREATE OR REPLACE FUNCTION ...`); `None` for the protocol as migrated.
    pub sql_patch: Option<String>,
    /// How C and D hold their transactions: the worker's `faults` field, or the fault proxy.
    pub barriers: crate::ctx::Barriers,
    /// How many rows [`Session::matrix`] runs side by side.
    pub jobs: usize,
    /// The write path the workers get.
    pub write_path: WritePath,
    /// Which judges decide the verdicts.
    pub judging: crate::trace_check::Judging,
    /// How many times [`Session::matrix`] runs its STARVED rows again, alone.
    pub starved_reruns: u32,
    /// Keep the rows finished so far for an interrupt to save ([`fenceproof_harness::report::partial`]):
    /// set by `verify`, whose run folder is a matrix.
    pub keep_partial: bool,
    /// What the server allows the rows in connections, read when the session started (`None`: it
    /// could not be read; rows are then admitted by `jobs` alone).
    pub connections: Option<Budget>,
}

impl Session {
    pub async fn start(opts: &VerifyOptions) -> Result<Session, HarnessError> {
        let started_at = chrono::Utc::now();
        let t0 = Instant::now();
        check_programs(opts)?;
        let team = opts.contract.as_ref().map(|c| c.database.migrations.clone()).unwrap_or_default();
        fenceproof_harness::db::team_schema::choose(&team)?;
        databases::grant_direct_path(opts.write_path == WritePath::Direct);
        sweep_freezers();
        // Nothing to run on is a one-line error before any run folder exists.
        let choice = if opts.database_url.is_some() { BackendChoice::Auto } else { resolve_backend(opts)? };
        let image = if choice == BackendChoice::Container {
            container::choose_image(&opts.pg_image)
        } else {
            opts.pg_image.clone()
        };
        let run = RunDir::create(&opts.reports_dir)?;
        let (server, pg_bin) = start_server(opts, choice, &image, &run).await?;
        let reproduce = Reproduce::of(&ran_on(opts, &server));
        let connections = read_budget(&server).await;
        Ok(Session {
            reproduce,
            worker: WorkerUnderTest::of_in(
                &opts.worker_bin,
                opts.worker_bin == default_worker_bin(),
                opts.worker_dir.as_deref(),
            ),
            conformance_report: gate_report_into(opts.conformance_report.as_deref(), &run.path),
            server,
            pg_bin,
            contract: opts.contract.clone(),
            run,
            worker_bin: opts.worker_bin.clone(),
            tools_bin: opts.tools_bin.clone(),
            started_at,
            t0,
            databases: 0,
            sql_patch: None,
            barriers: crate::ctx::Barriers::Worker,
            jobs: opts.jobs.max(1),
            write_path: opts.write_path,
            judging: opts.judging,
            starved_reruns: opts.starved_reruns,
            keep_partial: false,
            connections,
        })
    }

    /// When the session's own server has died: how, in words (`the server died (signal 9)`), with
    /// the last line its log gave about it. `None` while it runs, and for servers the harness did not
    /// start as a child (a container, a team's database).
    pub fn server_death(&mut self) -> Option<String> {
        let Server::Native(c) = &mut self.server else { return None };
        let status = c.exit_status()?;
        let log = std::fs::read_to_string(self.run.path.join("postgres.log")).unwrap_or_default();
        let last = log.lines().rev().find(|l| l.contains("PANIC") || l.contains("FATAL") || l.contains("terminated"));
        Some(match last {
            Some(l) => format!("the server died ({status}); its log: {}", l.trim()),
            None => format!("the server died ({status})"),
        })
    }

    /// The row of an experiment that did not run (or whose run produced nothing to show).
    pub(crate) fn not_run(&self, exp: &Experiment, why: &str) -> ExperimentResult {
        ExperimentResult {
            id: exp.id.into(),
            title: exp.title.into(),
            outcome: Outcome::Error,
            duration_ms: 0,
            observations: why.to_string(),
            checks: Vec::new(),
            error: Some(why.to_string()),
            reproduce: self.reproduce(exp.id),
            evidence: String::new(),
        }
    }

    /// End the session: drop what it created in an external database (a native cluster is
    /// stopped when the session is dropped).
    pub async fn finish(mut self) -> Result<(), HarnessError> {
        if let Server::Container(c) = &mut self.server {
            c.stop().await?;
        }
        if matches!(self.server, Server::External(_)) {
            let (_, failed) = external::drop_created().await?;
            for f in failed {
                eprintln!("fenceproof: could not drop schema {f}");
            }
        }
        Ok(())
    }

    pub fn elapsed_ms(&self) -> u128 {
        self.t0.elapsed().as_millis()
    }

    /// A fresh database cloned from the template, its own folder `<run>/<label>/<id>/`, and a
    /// context to run one experiment (or one randomized schedule) in.
    pub async fn context(&mut self, label: &str, id: &str, worker_args: &[String]) -> Result<Ctx, HarnessError> {
        self.plan_context(label, id, worker_args)?.build().await
    }

    /// Everything a row's context needs, owned: its folder and database name are allocated here;
    /// the database itself is made by [`ContextPlan::build`], which borrows nothing of the session
    /// (rows side by side build theirs while the others run).
    pub fn plan_context(&mut self, label: &str, id: &str, worker_args: &[String]) -> Result<ContextPlan, HarnessError> {
        let dir =
            if label.is_empty() { self.run.experiment(id)? } else { self.run.experiment(&format!("{label}/{id}"))? };
        self.databases += 1;
        let place = match &self.server {
            Server::Native(_) | Server::Container(_) => {
                let backend: &dyn Backend = match &self.server {
                    Server::Native(c) => c,
                    Server::Container(c) => c.as_ref(),
                    Server::External(_) => unreachable!("matched above"),
                };
                let dbname = format!("fp{}_{}", self.databases, id.to_lowercase().replace(['-', '/'], "_"));
                Place::Template { admin_url: backend.url_for("postgres"), db_url: backend.url_for(&dbname), dbname }
            }
            Server::External(ext) => {
                let tag: String = self.run.run_id.chars().rev().take(6).collect::<String>().chars().rev().collect();
                let name = format!("fp_{tag}_{}_{}", self.databases, id.to_lowercase().replace(['-', '/'], "_"));
                Place::External { ext: ext.clone(), name }
            }
        };
        let ctx = Ctx {
            id: id.into(),
            dir,
            db_url: String::new(),
            worker_login: None,
            write_path: self.write_path,
            pool: sqlx::PgPool::connect_lazy("postgres://localhost/unused").map_err(HarnessError::from)?,
            timeline: Timeline::new(),
            worker_bin: self.worker_bin.clone(),
            tools_bin: self.tools_bin.clone(),
            worker_args: worker_args.to_vec(),
            pg_bin: self.pg_bin.clone(),
            container_image: match &self.server {
                Server::Container(c) => Some(c.image.clone()),
                _ => None,
            },
            server: match &self.server {
                Server::Native(c) => c.pid().map(ServerTarget::Native),
                Server::Container(c) => Some(ServerTarget::Container(c.id.clone())),
                Server::External(_) => None,
            },
            oracle_schema: String::new(),
            contract: self.contract.clone(),
            sql_patch: self.sql_patch.clone(),
            barriers: self.barriers,
            checks: Vec::new(),
            notes: Vec::new(),
            own_commits: None,
            environment: Vec::new(),
            reproduce: self.reproduce(id),
            invariants: crate::invariants_judge::InvariantScope::new(crate::ctx::CONTROL),
        };
        Ok(ContextPlan { place, ctx })
    }
}

/// Trace validation of a row's history: the session database's, or the one an experiment saved
/// of its own database (`oracle.json`).
fn trace_row(
    dir: &std::path::Path,
    ctx: &Ctx,
    saved_by_experiment: bool,
    rows: Option<&[oracle::CommitRow]>,
) -> Result<Option<Check>, HarnessError> {
    let own: Option<Vec<oracle::CommitRow>> = saved_by_experiment.then(|| saved_history(dir).ok()).flatten();
    let Some(rows) = (if saved_by_experiment { own.as_deref() } else { rows }) else { return Ok(None) };
    let entries = ctx.timeline.entries();
    Ok(Some(crate::trace_check::judge(dir, rows, &entries, &ctx.environment, ctx.server.is_some())?))
}

/// The history an experiment saved of its own database (`oracle.json`), or why it cannot be read.
fn saved_history(dir: &std::path::Path) -> Result<Vec<oracle::CommitRow>, String> {
    let f = dir.join("oracle.json");
    let text = std::fs::read_to_string(&f).map_err(|e| format!("cannot read {}: {e}", f.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not a history: {e}", f.display()))
}

/// The invariants judge over the row's history (the one the experiment saved, or `rows`), for a
/// row whose story ran to its end; the ERROR naming the judge when it could not judge.
fn judge_invariants(
    exp: &Experiment,
    ctx: &mut Ctx,
    saved_by_experiment: bool,
    rows: Result<&[oracle::CommitRow], &HarnessError>,
) -> Option<String> {
    let saved = if saved_by_experiment { Some(saved_history(&ctx.dir)) } else { None };
    let history = match (&saved, rows) {
        (Some(saved), _) => saved.as_deref().map_err(String::clone),
        (None, rows) => rows.map_err(|e| format!("the row's history was not read: {e}")),
    };
    crate::invariants_judge::apply(exp.checks.invariants, &ctx.invariants, history, &mut ctx.checks).err()
}

/// What finishing a row needs of its session, owned (rows side by side finish inside their own
/// futures).
pub(crate) struct RowEnd {
    pub run_path: PathBuf,
    pub reproduce: String,
    pub judging: crate::trace_check::Judging,
}

impl RowEnd {
    /// The row of `exp` whose database could not be made for want of a server connection (`e`):
    /// STARVED, to run again alone, with nothing else to show.
    pub(crate) fn starved_unmade(&self, exp: &Experiment, e: &HarnessError, t0: Instant) -> ExperimentResult {
        let why = format!("its database was not made: {e} (the server had no connection to give)");
        ExperimentResult {
            id: exp.id.into(),
            title: exp.title.into(),
            outcome: Outcome::Starved,
            duration_ms: t0.elapsed().as_millis(),
            observations: why.clone(),
            checks: Vec::new(),
            error: Some(why),
            reproduce: self.reproduce.clone(),
            evidence: String::new(),
        }
    }

    /// The end of one row: its evidence saved, the answers and declared rules judged, the
    /// verdict. `res` is how its story ended.
    pub(crate) async fn finish(
        self,
        exp: &Experiment,
        worker_args: &[String],
        mut ctx: Ctx,
        res: Result<Result<(), HarnessError>, tokio::time::error::Elapsed>,
        start: RowStart,
    ) -> Result<ExperimentResult, HarnessError> {
        let t0 = start.at;
        let (dir, pool) = (ctx.dir.clone(), ctx.pool.clone());
        let (error, stop) = match ended(exp, &mut ctx, res) {
            Some((e, stop)) => (Some(e), stop),
            None => (None, Stop::Other),
        };
        stamp_refusal(&mut ctx).await;
        // Evidence, whatever happened.
        ctx.timeline.save(&dir.join("timeline.jsonl"))?;
        // An experiment that judged another database (H: its own promoted standby) saved that
        // database's oracle itself; otherwise it is this experiment's database.
        let saved_by_experiment = dir.join("oracle.json").exists();
        let rows = match ctx.own_commits.take() {
            Some(rows) => Ok(rows),
            None => oracle::commits_in(&pool, &ctx.oracle_schema).await,
        };
        let error = match error {
            None => judge_invariants(exp, &mut ctx, saved_by_experiment, rows.as_deref()),
            error => error,
        };
        if self.judging.trace() {
            ctx.checks.extend(trace_row(&dir, &ctx, saved_by_experiment, rows.as_deref().ok())?);
        }
        let callers = fenceproof_harness::check::callers::Callers::from_timeline(&ctx.timeline.entries());
        ctx.checks.extend(judge_calls(&dir, saved_by_experiment, rows.as_deref().ok(), &callers)?);
        if let (false, Ok(rows)) = (saved_by_experiment, rows) {
            std::fs::write(dir.join("oracle.json"), serde_json::to_string_pretty(&rows).expect("json"))?;
            // Every row that ran to its end on one database judges the workers' answers against
            // its commits (a restore or a failover loses commits by design, and is judged there).
            if error.is_none() && exp.checks.answers {
                ctx.checks.extend(crate::answers::judge(&dir, &rows)?);
            }
        }
        let error = match self.judging {
            crate::trace_check::Judging::Trace => {
                ctx.checks.retain(|c| c.name == crate::trace_check::TRACE);
                error
            }
            judging => error
                .or_else(|| {
                    crate::invariants_judge::unjudged_error(exp.checks.invariants, &ctx.invariants, &ctx.checks)
                })
                .or_else(|| undeclared_rules(exp, &ctx.checks, judging.trace())),
        };
        stamp_rules(&mut ctx.checks);
        // The row's database connections close first: checks.json is its last evidence, written
        // right before the row joins the matrix (an interrupt after it finds the row there).
        pool.close().await;
        std::fs::write(dir.join("checks.json"), serde_json::to_string_pretty(&ctx.checks).expect("json"))?;

        let (mut outcome, mut observations) = verdict(&ctx, error.as_deref());
        let cpu = start.cpu.and_then(|m| m.since());
        let error = match starved(outcome, stop, fenceproof_harness::lag::since(t0), cpu) {
            Some(lag) => {
                outcome = Outcome::Starved;
                let e = error.map(|e| format!("{e} (during this row {lag})"));
                if ctx.notes.is_empty() {
                    observations = e.clone().unwrap_or_default();
                }
                e
            }
            None => error,
        };
        let extra =
            if worker_args.is_empty() { String::new() } else { format!("   (worker args: {})", worker_args.join(" ")) };
        Ok(ExperimentResult {
            id: exp.id.into(),
            title: exp.title.into(),
            outcome,
            duration_ms: t0.elapsed().as_millis(),
            observations,
            checks: ctx.checks,
            error,
            reproduce: format!("{}{extra}", self.reproduce),
            evidence: dir.strip_prefix(&self.run_path).unwrap_or(&dir).display().to_string(),
        })
    }
}

impl Session {
    /// The command that runs experiment `id` alone, the way this session ran it: server,
    /// contract, worker, barriers, conformance gate.
    pub fn reproduce(&self, id: &str) -> String {
        let barriers = match self.barriers {
            crate::ctx::Barriers::Proxy => " --barriers proxy",
            crate::ctx::Barriers::Worker => "",
        };
        let Reproduce { program, flags, note } = &self.reproduce;
        format!("{program} --only {id}{flags}{barriers}{note}")
    }

    /// The matrix of `results` (in the order of the selection), as this session reports it.
    pub(crate) fn matrix_of(&self, results: Vec<ExperimentResult>, t0: Instant) -> Matrix {
        Matrix {
            run_id: self.run.run_id.clone(),
            backend: self.server.kind().into(),
            server_version: self.server.version(),
            started_at: self.started_at,
            duration_ms: t0.elapsed().as_millis(),
            worker: self.worker.clone(),
            conformance_report: self.conformance_report.clone(),
            results,
            interrupted: None,
        }
    }
}

/// Where a row's database is made.
enum Place {
    /// A database cloned from the template on the session's own server.
    Template { admin_url: String, db_url: String, dbname: String },
    /// A schema pair in a team's database.
    External { ext: ExternalDb, name: String },
}

/// A row's context before its database exists (see [`Session::plan_context`]).
pub struct ContextPlan {
    place: Place,
    /// Everything but the database: `db_url`, `worker_login`, `pool` and `oracle_schema` are set by
    /// [`ContextPlan::build`].
    ctx: Ctx,
}

impl ContextPlan {
    /// Make the row's database (and run the session's SQL patch in it): the context to run in.
    pub async fn build(self) -> Result<Ctx, HarnessError> {
        let mut ctx = self.ctx;
        match self.place {
            Place::Template { admin_url, db_url, dbname } => {
                databases::create_from_template_at(&admin_url, &dbname).await?;
                ctx.pool = databases::pool(&db_url, CONTROL, 4).await?;
                ctx.worker_login = Some(databases::url_as(&db_url, databases::WORKER_LOGIN)?);
                ctx.db_url = db_url;
                ctx.oracle_schema = oracle::DEFAULT_SCHEMA.to_string();
            }
            Place::External { ext, name } => {
                let schemas = ext.create(&name).await?;
                ctx.pool = ext.pool_in(&schemas.schema, CONTROL, 4).await?;
                ctx.db_url = schemas.worker_url;
                ctx.oracle_schema = schemas.oracle;
            }
        }
        if let Some(sql) = &ctx.sql_patch {
            sqlx::raw_sql(sql).execute(&ctx.pool).await?;
        }
        Ok(ctx)
    }
}

/// The worker and tool programs exist and can run, or a one-line error says which does not.
fn check_programs(opts: &VerifyOptions) -> Result<(), HarnessError> {
    for (what, p) in [("worker", &opts.worker_bin), ("fake-tools", &opts.tools_bin)] {
        use std::os::unix::fs::PermissionsExt;
        if p.is_dir() {
            return Err(HarnessError::Other(format!("{what} binary {} is a folder, not a program", p.display())));
        }
        if p.is_file() && p.metadata().map(|m| m.permissions().mode() & 0o111 == 0).unwrap_or(false) {
            return Err(HarnessError::Other(format!("{what} binary {} is not executable (chmod +x it)", p.display())));
        }
        if !p.is_file() {
            let or = if what == "worker" { "; or pass --worker-bin" } else { "" };
            return Err(HarnessError::Other(format!("{what} binary {} not found: {}{or}", p.display(), how_to_get(p))));
        }
    }
    Ok(())
}

/// The exact command that puts the missing program `p` where fenceproof looks: a build, when this
/// program runs from a cargo target folder, else the install of all three programs.
fn how_to_get(p: &Path) -> String {
    let exe = std::env::current_exe().unwrap_or_default();
    let in_target = exe.ancestors().any(|a| a.file_name().is_some_and(|n| n == "target"));
    if in_target {
        return "build it with `cargo build --workspace` (or `just build`)".into();
    }
    let package = match p.file_name().and_then(|n| n.to_str()) {
        Some("fenceproof-fake-tools") => "fake-tools",
        _ => "worker-bin",
    };
    format!(
        "install it beside {} with `cargo install --locked --path {package}` from the fenceproof repository \
         (`just install` installs fenceproof, its worker and its fake tools at once)",
        exe.parent().map(|d| d.display().to_string()).unwrap_or_default()
    )
}

/// Thaw and remove the freezer cgroups a harness that no longer runs left, saying so.
fn sweep_freezers() {
    let swept = fenceproof_harness::procs::freezer::sweep_leftovers();
    if !swept.is_empty() {
        eprintln!(
            "fenceproof: thawed and removed {} freezer cgroup(s) left by a harness that no longer runs: {}",
            swept.len(),
            swept.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        );
    }
}

/// The server the session runs on: the user's database, a container, or a native cluster, each
/// with its template made.
async fn start_server(
    opts: &VerifyOptions,
    choice: BackendChoice,
    image: &str,
    run: &RunDir,
) -> Result<(Server, Option<PgBin>), HarnessError> {
    let found = match &opts.database_url {
        Some(url) => {
            let ext = ExternalDb::connect(url).await?;
            let swept = ext.sweep_stale().await?;
            if !swept.is_empty() {
                eprintln!(
                    "fenceproof: dropped {} schema(s) left in the database by harness runs that no longer exist: {}",
                    swept.len(),
                    swept.join(", ")
                );
            }
            (Server::External(ext), PgBin::locate(opts.pg_bin.as_deref()).ok())
        }
        None => match choice {
            BackendChoice::Container => {
                if image != opts.pg_image {
                    eprintln!(
                        "fenceproof: {} is not in the local Docker daemon; using {image} (built by `just pg-image`)",
                        opts.pg_image
                    );
                }
                let c = ContainerDb::start(image, &run.path.join("postgres.log")).await?;
                databases::create_template(&c).await?;
                (Server::Container(Box::new(c)), PgBin::locate(opts.pg_bin.as_deref()).ok())
            }
            _ => {
                let bin = PgBin::locate(opts.pg_bin.as_deref())?;
                let cluster = NativeCluster::start(bin.clone(), &run.path.join("postgres.log")).await?;
                databases::create_template(&cluster).await?;
                (Server::Native(cluster), Some(bin))
            }
        },
    };
    Ok(found)
}

/// Every row that called the tools judges, from what they observed at each call, that no
/// dispatcher held a transaction open across it (whatever else happened to the row), against the
/// row's oracle: the one the experiment saved when it ran on a server of its own, else `rows`.
fn judge_calls(
    dir: &Path,
    saved_by_experiment: bool,
    rows: Option<&[oracle::CommitRow]>,
    callers: &fenceproof_harness::check::callers::Callers,
) -> Result<Option<Check>, HarnessError> {
    let ledger = dir.join("tools-ledger.jsonl");
    if !ledger.exists() {
        return Ok(None);
    }
    let saved: Option<Vec<oracle::CommitRow>> = if saved_by_experiment {
        serde_json::from_str(&std::fs::read_to_string(dir.join("oracle.json"))?).ok()
    } else {
        None
    };
    let Some(rows) = saved.as_deref().or(rows) else { return Ok(None) };
    let entries = fenceproof_harness::record::ledger::entries(&ledger)?;
    Ok(Some(fenceproof_harness::check::claims::no_transaction_across_call(&entries, rows, callers)))
}

/// When a row began, on the harness's clock and on the machine's CPU pressure.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowStart {
    pub(crate) at: Instant,
    pub(crate) cpu: Option<fenceproof_harness::pressure::Mark>,
}

impl RowStart {
    pub(crate) fn now() -> RowStart {
        RowStart { at: Instant::now(), cpu: fenceproof_harness::pressure::mark() }
    }
}

/// What `server` allows the rows in connections ([`Budget`]), read as the harness's admin (on a
/// server of its own) or as the team's login (on `--database-url`, whose own limit then counts),
/// and said in the log. `None`, with a warning, when it cannot be read.
async fn read_budget(server: &Server) -> Option<Budget> {
    let url = match server {
        Server::Native(c) => c.url_for("postgres"),
        Server::Container(c) => c.url_for("postgres"),
        Server::External(e) => e.url.clone(),
    };
    let read = async {
        let pool = databases::pool(&url, "fenceproof-harness", 1).await?;
        let budget = Budget::read(&pool).await;
        pool.close().await;
        Ok::<_, HarnessError>(budget?)
    };
    match read.await {
        Ok(b) => {
            tracing::info!("the server's connections: {}", b.describe());
            Some(b)
        }
        Err(e) => {
            tracing::warn!(
                "the server's connection settings could not be read ({e}); rows are admitted by --jobs alone"
            );
            None
        }
    }
}

/// What kind of end a row without a verdict came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// A wait that ran out, or the row's ceiling.
    Wait,
    /// A probe whose moment passed before it could be tried, proven from the database's clock
    /// or the tools' ledger (a lease that lapsed there, an answer the tools gave after its caller
    /// had gone): time kept the moment from being made, whichever process was slow.
    Moment,
    /// The server had no connection for the harness or its own driver (a pool's wait ran out,
    /// SQLSTATE 53300): the machine was out of a resource, whatever the lag.
    Connections,
    /// Anything else (a crashed process, a harness fault, a worker outside its language).
    Other,
}

impl Stop {
    /// The kind of end an experiment's error is.
    fn of(e: &HarnessError) -> Stop {
        match e {
            HarnessError::Inconclusive(_) => Stop::Moment,
            e if e.out_of_connections() => Stop::Connections,
            e if e.is_wait() => Stop::Wait,
            _ => Stop::Other,
        }
    }
}

/// Whether a row without a verdict was starved: it ended on a probe whose moment passed, on the
/// want of a server connection, or on a wait that ran out (or its ceiling) while the harness lost
/// enough of the row to its own scheduling delay (`lag`) or the whole machine queued for its cores
/// (`cpu`, the row's CPU pressure); then the delays, described.
fn starved(outcome: Outcome, stop: Stop, lag: Lag, cpu: Option<Stall>) -> Option<String> {
    let machine = cpu.filter(Stall::starved);
    let starved = match stop {
        Stop::Moment | Stop::Connections => true,
        Stop::Wait => lag.starved() || machine.is_some(),
        Stop::Other => false,
    };
    let said = match (stop, machine) {
        (Stop::Connections, _) => "the server had no connection to give".to_string(),
        (_, Some(m)) => format!("{}; {}", lag.describe(), m.describe()),
        (_, None) => lag.describe(),
    };
    (outcome == Outcome::Error && starved).then_some(said)
}

/// How the run of `exp` ended: `None` when it reached its end (with the legal-step check its
/// declaration asks for, passed, or failed when the worker refused a legal step), else the error
/// and what kind of end it was.
fn ended(
    exp: &Experiment,
    ctx: &mut Ctx,
    res: Result<Result<(), HarnessError>, tokio::time::error::Elapsed>,
) -> Option<(String, Stop)> {
    match res {
        Ok(Ok(())) => {
            if exp.checks.legal_step {
                ctx.check(Check::pass(crate::ctx::LEGAL_STEP_CHECK, "every step the harness set up legally succeeded"));
            }
            None
        }
        Ok(Err(HarnessError::StepRefused { step, answer })) => {
            // Broken protocol code, not a harness fault: a FAIL naming the rule, never an ERROR.
            ctx.check(Check::fail(
                crate::ctx::LEGAL_STEP_CHECK,
                format!("{step} was set up legally and answered {answer}"),
            ));
            None
        }
        Ok(Err(e)) => Some((e.to_string(), Stop::of(&e))),
        Err(_) => Some((
            format!(
                "experiment did not finish within its ceiling of {:?} and the harness's measured delay (at most twice the ceiling)",
                exp.ceiling()
            ),
            Stop::Wait,
        )),
    }
}

/// A refused legal step carries the oracle's last commit when the runner records it (the
/// experiment's processes have stopped): what committed before the refusal is at or below it, so
/// the report can tell a refusal that follows a broken commit from one before it.
async fn stamp_refusal(ctx: &mut Ctx) {
    let refused = |c: &Check| c.name == crate::ctx::LEGAL_STEP_CHECK && !c.passed();
    if ctx.checks.iter().any(refused) {
        let mark = ctx.oracle_mark().await.ok();
        for c in ctx.checks.iter_mut().filter(|c| refused(c)) {
            c.seen_at_seq = mark;
        }
    }
}

/// A row's verdict (FAIL on any failed check, ERROR without a verdict) and its key observations.
fn verdict(ctx: &Ctx, error: Option<&str>) -> (Outcome, String) {
    let outcome = if ctx.checks.iter().any(|c| !c.passed()) {
        Outcome::Fail
    } else if error.is_some() || ctx.checks.is_empty() {
        Outcome::Error
    } else {
        Outcome::Pass
    };
    let mut observations = ctx.notes.join("; ");
    // A row never has empty key observations: what broke, else why no verdict, else what held.
    if observations.is_empty() {
        let first_failed = ctx.checks.iter().find(|c| !c.passed());
        observations = match (first_failed, error) {
            (Some(c), _) => {
                let first_line = c.evidence.lines().next().unwrap_or_default();
                format!("{}: {}", c.name, first_line.chars().take(160).collect::<String>())
            }
            (None, Some(e)) => e.to_string(),
            (None, None) => format!("{} checks held", ctx.checks.len()),
        };
    }
    (outcome, observations)
}

/// Each check's rules: those its finding named (trace validation's, as the model names them, by
/// id: their words are filled in here), else the catalogue's rules of its name. A trace validation
/// finding the model names no rule for breaks none of the rules its passing check stands for.
fn stamp_rules(checks: &mut [Check]) {
    for c in checks {
        let unnamed_finding = c.name == crate::trace_check::TRACE && !c.passed();
        if c.rules.is_empty() && !unnamed_finding {
            c.rules = crate::catalogue::rules_for(&c.name).into_iter().map(RuleRef::from).collect();
        }
        for r in c.rules.iter_mut().filter(|r| r.statement.is_empty()) {
            if let Some(rule) = crate::catalogue::rule(&r.id) {
                *r = RuleRef::from(rule);
            }
        }
    }
}

/// A row that ran to its end and passed must have judged every rule it declares: an experiment
/// whose checks were renamed or skipped is an ERROR naming the rules, never a silent PASS. With
/// trace validation turned off (`--judge rules`), a rule trace validation judges is not asked of
/// the rest: the person turned its judge off.
fn undeclared_rules(exp: &Experiment, checks: &[Check], trace: bool) -> Option<String> {
    if checks.iter().any(|c| !c.passed()) {
        return None;
    }
    let missing: Vec<&str> = crate::catalogue::rules_of(exp)
        .into_iter()
        .filter(|r| trace || !judged_by(r, crate::trace_check::TRACE))
        .filter(|r| !checks.iter().any(|c| judged_by(r, &c.name)))
        .map(|r| r.id)
        .collect();
    (!missing.is_empty()).then(|| format!("declared to judge {} but ran none of its checks", missing.join(", ")))
}

/// A progress bar on stderr while experiments run, only when stderr is a terminal (CI logs get the
/// matrix at the end instead) and `FENCEPROOF_QUIET` is not set.
pub(crate) fn progress(label: &str, done: usize, total: usize, next: &str) {
    use std::io::{IsTerminal, Write};
    let mut err = std::io::stderr();
    if !err.is_terminal() || std::env::var_os("FENCEPROOF_QUIET").is_some() || total == 0 {
        return;
    }
    let width = 30;
    let filled = done * width / total;
    let bar: String = "=".repeat(filled) + &" ".repeat(width - filled);
    let line = if done == total { String::new() } else { format!("[{bar}] {done}/{total} {label} {next}") };
    let _ = write!(err, "\r\x1b[2K{line}");
    let _ = err.flush();
}

/// Without a terminal (a CI log), one line on stderr per finished row, so the log shows progress
/// before the matrix; silent with `--quiet`/`--json` (`FENCEPROOF_QUIET`) and on a terminal, which
/// has the progress bar.
pub(crate) fn log_finished(label: &str, r: &ExperimentResult) {
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() || std::env::var_os("FENCEPROOF_QUIET").is_some() {
        return;
    }
    if label.is_empty() {
        eprintln!("{}", r.log_line());
    } else {
        eprintln!("{label}: {}", r.log_line());
    }
}

/// Start a server, run `experiments` `repeat` times, save the matrix; returns the last matrix, the
/// verdicts that changed between repetitions (flakes), and the run folder.
pub async fn verify(
    opts: &VerifyOptions,
    experiments: Vec<Experiment>,
    repeat: u32,
) -> Result<(Matrix, Vec<String>, PathBuf), HarnessError> {
    verify_with(opts, experiments, repeat, crate::ctx::Barriers::Worker).await
}

/// Start the session's worker once and require an answer to its first command (see
/// [`crate::preflight`]).
pub async fn preflight(session: &Session, _opts: &VerifyOptions) -> Result<(), HarnessError> {
    let url = match &session.server {
        Server::Native(c) => c.url_for("postgres"),
        Server::Container(c) => c.url_for("postgres"),
        Server::External(ext) => ext.url.clone(),
    };
    crate::preflight::check_worker(&session.worker_bin, &url, &session.run.path.join("preflight")).await
}

/// [`verify`], with C and D holding transactions the way `barriers` says.
pub async fn verify_with(
    opts: &VerifyOptions,
    experiments: Vec<Experiment>,
    repeat: u32,
    barriers: crate::ctx::Barriers,
) -> Result<(Matrix, Vec<String>, PathBuf), HarnessError> {
    let mut session = Session::start(opts).await?;
    session.barriers = barriers;
    session.keep_partial = true;
    partial::record(&session.run.path, session.matrix_of(Vec::new(), Instant::now()));
    // The worker must answer its first command before the matrix spends time on it.
    preflight(&session, opts).await?;
    if std::env::var_os("FENCEPROOF_QUIET").is_none() {
        eprintln!("fenceproof: up to {} row(s) side by side (--jobs {})", session.jobs, session.jobs);
    }
    let repeat = repeat.max(1);
    let mut rounds = Vec::new();
    for i in 1..=repeat {
        let label = if repeat == 1 { String::new() } else { format!("r{i}") };
        rounds.push(session.matrix(&label, &experiments, &[]).await?);
    }
    let flakes = flakes(&rounds);
    let mut matrix = rounds.pop().expect("at least one round");
    matrix.duration_ms = session.elapsed_ms();
    let path = session.run.path.clone();
    matrix.save(&path)?;
    partial::clear();
    if repeat > 1 {
        let summary = serde_json::json!({ "repeat": repeat, "flakes": flakes });
        std::fs::write(path.join("repeat.json"), serde_json::to_string_pretty(&summary).expect("json"))?;
    }
    session.run.mark_latest()?;
    session.finish().await?;
    Ok((matrix, flakes, path))
}

/// What a session ran on, for its reproduce lines.
fn ran_on<'a>(opts: &'a VerifyOptions, server: &'a Server) -> Ran<'a> {
    let native = matches!(server, Server::Native(_));
    Ran {
        program: &opts.program,
        image: match server {
            Server::Container(c) => Some(c.image.as_str()),
            _ => None,
        },
        database_url: opts.database_url.as_deref().filter(|_| matches!(server, Server::External(_))),
        native: native && opts.backend == BackendChoice::Native && opts.contract_path.is_none(),
        pg_bin: opts.pg_bin.as_deref().filter(|_| native),
        contract: opts.contract_path.as_deref(),
        worker: Some(opts.worker_bin.as_path()).filter(|w| *w != default_worker_bin()),
        gate_done: opts.skip_conformance || opts.conformance_report.is_some(),
        direct: opts.write_path == WritePath::Direct,
    }
}

/// The gate's conformance report (`conformance.txt`, and `conformance.json` beside it) copied into
/// the run folder, so the folder stands alone (a CI artifact of one folder keeps its links): the
/// copy's path, or the original's when it cannot be copied.
fn gate_report_into(report: Option<&Path>, run: &Path) -> Option<String> {
    let report = report?;
    let copied = run.join("conformance.txt");
    let json = report.with_extension("json");
    let ok = std::fs::copy(report, &copied).is_ok()
        && (!json.exists() || std::fs::copy(&json, run.join("conformance.json")).is_ok());
    Some(if ok { copied } else { report.to_path_buf() }.display().to_string())
}

/// Experiments whose verdict was not the same in every round, as "id: PASS,FAIL,...".
pub fn flakes(rounds: &[Matrix]) -> Vec<String> {
    let Some(first) = rounds.first() else { return Vec::new() };
    first
        .results
        .iter()
        .filter_map(|r| {
            let seen: Vec<Outcome> =
                rounds.iter().filter_map(|m| m.results.iter().find(|x| x.id == r.id).map(|x| x.outcome)).collect();
            (seen.iter().any(|o| *o != seen[0]))
                .then(|| format!("{}: {}", r.id, seen.iter().map(|o| o.label()).collect::<Vec<_>>().join(",")))
        })
        .collect()
}

/// How many rows run side by side by default: `FENCEPROOF_JOBS` when set, else four per core
/// (rows spend most of their time waiting on real time; a matrix at 8 jobs used about 60 % of two
/// cores), at most 8; one against a team's database, where rows share one database. Four per core
/// became honest once no row blocked the session's thread and the rows with short leases and keys
/// sized them from a measured round trip (`crate::measured`): both example workers' matrices at
/// once, 8 jobs each, 5 rounds, changed no verdict.
pub fn default_jobs(external: bool) -> usize {
    if let Some(n) = std::env::var("FENCEPROOF_JOBS").ok().and_then(|v| v.parse::<usize>().ok()).filter(|n| *n > 0) {
        return n.min(64);
    }
    if external {
        return 1;
    }
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    (cores * 4).clamp(1, 8)
}

/// One matrix per PostgreSQL version found, combined: experiment rows, one column per version.
pub async fn verify_versions(
    opts: &VerifyOptions,
    experiments: &[Experiment],
    bins: Vec<PgBin>,
) -> Result<(Vec<(String, Matrix)>, PathBuf), HarnessError> {
    if bins.is_empty() {
        return Err(HarnessError::PgBinariesNotFound {
            looked: "/usr/lib/postgresql/*/bin, .pg/*/*/pginstall/bin, PG_BIN".into(),
        });
    }
    let combined = RunDir::create(&opts.reports_dir)?;
    let mut out = Vec::new();
    for bin in bins {
        let label = bin.version_numbers().iter().map(|n| n.to_string()).collect::<Vec<_>>().join(".");
        eprintln!("PostgreSQL {label} ({})", bin.dir.display());
        let o = VerifyOptions {
            backend: BackendChoice::Native,
            pg_image: opts.pg_image.clone(),
            pg_bin: Some(bin.dir.clone()),
            database_url: None,
            contract: opts.contract.clone(),
            contract_path: opts.contract_path.clone(),
            reports_dir: combined.path.clone(),
            worker_bin: opts.worker_bin.clone(),
            worker_dir: opts.worker_dir.clone(),
            tools_bin: opts.tools_bin.clone(),
            skip_conformance: opts.skip_conformance,
            conformance_report: opts.conformance_report.clone(),
            jobs: opts.jobs,
            write_path: opts.write_path,
            judging: opts.judging,
            starved_reruns: opts.starved_reruns,
            program: opts.program.clone(),
        };
        let mut session = Session::start(&o).await?;
        let mut m = session.matrix("", experiments, &[]).await?;
        m.duration_ms = session.elapsed_ms();
        m.save(&session.run.path)?;
        session.finish().await?;
        out.push((label, m));
    }
    let md = versions_markdown(&out);
    std::fs::write(combined.path.join("versions.md"), &md)?;
    let json: Vec<serde_json::Value> =
        out.iter().map(|(v, m)| serde_json::json!({"version": v, "matrix": m})).collect();
    std::fs::write(combined.path.join("versions.json"), serde_json::to_string_pretty(&json).expect("json"))?;
    combined.mark_latest()?;
    Ok((out, combined.path))
}

/// The combined table: one row per experiment, one column per version.
pub fn versions_markdown(ms: &[(String, Matrix)]) -> String {
    let mut s = format!(
        "| experiment | {} |\n|---|{}\n",
        ms.iter().map(|(v, _)| format!("PostgreSQL {v}")).collect::<Vec<_>>().join(" | "),
        "---|".repeat(ms.len())
    );
    if let Some((_, first)) = ms.first() {
        for r in &first.results {
            let cells: Vec<&str> = ms
                .iter()
                .map(|(_, m)| m.results.iter().find(|x| x.id == r.id).map(|x| x.outcome.label()).unwrap_or("-"))
                .collect();
            s.push_str(&format!("| {} | {} |\n", r.id, cells.join(" | ")));
        }
    }
    s
}

/// The backend `opts` asks for, resolved: `auto` is native when binaries are found, else the
/// container backend when a Docker daemon answers, else one line saying how to get either.
pub fn resolve_backend(opts: &VerifyOptions) -> Result<BackendChoice, HarnessError> {
    match opts.backend {
        BackendChoice::Auto => {
            // An explicit --pg-bin means native: its error is the one to report.
            let native = PgBin::locate(opts.pg_bin.as_deref());
            if native.is_ok() || opts.pg_bin.is_some() {
                return Ok(BackendChoice::Native);
            }
            match container::daemon_answers() {
                Ok(()) => container::preflight(&container::choose_image(&opts.pg_image)).map(|_| BackendChoice::Container),
                Err(docker) => Err(HarnessError::Other(format!(
                    "nothing to run PostgreSQL with: no server binaries (install postgresql, or pass --pg-bin DIR) and {docker} (start Docker, or pass --database-url)"
                ))),
            }
        }
        BackendChoice::Native => PgBin::locate(opts.pg_bin.as_deref()).map(|_| BackendChoice::Native),
        BackendChoice::Container => {
            container::preflight(&container::choose_image(&opts.pg_image)).map(|_| BackendChoice::Container)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_row_without_verdict_is_starved_only_after_a_wait_on_a_starved_harness() {
        let busy = Lag { total: Duration::from_millis(2900), worst: Duration::from_millis(1200) };
        let quiet = Lag { total: Duration::from_millis(40), worst: Duration::from_millis(25) };
        let s = starved(Outcome::Error, Stop::Wait, busy, None).expect("a wait that ran out on a busy machine");
        assert!(s.contains("2900 ms late") && s.contains("1200 ms at once"), "{s}");
        assert_eq!(starved(Outcome::Error, Stop::Wait, quiet, None), None, "a hang on a quiet machine stays an ERROR");
        assert_eq!(starved(Outcome::Error, Stop::Other, busy, None), None, "a crash is no wait: ERROR");
        assert_eq!(starved(Outcome::Fail, Stop::Wait, busy, None), None, "a FAIL stays a FAIL");
        assert_eq!(starved(Outcome::Pass, Stop::Wait, busy, None), None);
    }

    #[test]
    fn a_probe_whose_moment_passed_is_starved_even_when_the_harness_ran_on_time() {
        // The tools (another process) answered after the call timeout; the harness's own thread
        // was on time: still no verdict, and never a bare ERROR (E-conflict in a pool at load 23).
        let quiet = Lag { total: Duration::from_millis(40), worst: Duration::from_millis(25) };
        let s = starved(Outcome::Error, Stop::Moment, quiet, None).expect("a passed moment is STARVED");
        assert!(s.contains("40 ms late"), "{s}");
        assert_eq!(starved(Outcome::Fail, Stop::Moment, quiet, None), None, "a FAIL found before stays a FAIL");
        let late = HarnessError::Inconclusive("the tools' 409 came after the call timeout".into());
        assert_eq!(Stop::of(&late), Stop::Moment);
        let timeout = HarnessError::Timeout { what: "B's ready".into(), after_ms: 15_000 };
        assert_eq!(Stop::of(&timeout), Stop::Wait);
        assert_eq!(Stop::of(&HarnessError::Other("the server did not start".into())), Stop::Other);
    }

    /// A connection the harness or its driver could not get is the machine out of a resource: the
    /// row is STARVED on a quiet harness too, and a verdict reached before it stands.
    #[test]
    fn a_refused_or_timed_out_connection_is_starved_never_error() {
        let quiet = Lag { total: Duration::from_millis(40), worst: Duration::from_millis(25) };
        let pool = HarnessError::Database(sqlx::Error::PoolTimedOut);
        assert_eq!(Stop::of(&pool), Stop::Connections);
        let driver = HarnessError::OutOfConnections {
            what: "the driver of the model's paths".into(),
            detail: "database error: pool timed out while waiting for an open connection".into(),
        };
        assert_eq!(Stop::of(&driver), Stop::Connections);
        let s = starved(Outcome::Error, Stop::of(&driver), quiet, None).expect("no connection: STARVED");
        assert!(s.contains("no connection"), "{s}");
        assert_eq!(starved(Outcome::Fail, Stop::Connections, quiet, None), None, "a FAIL found before stays a FAIL");
        // A lost connection is no refusal: on a quiet machine it stays an ERROR.
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert_eq!(Stop::of(&HarnessError::Database(sqlx::Error::Io(reset))), Stop::Other);
    }

    #[test]
    fn a_wait_that_ran_out_while_the_machine_queued_for_its_cores_is_starved() {
        // The harness's thread ran on time, but every process queued for the cores: the worker
        // that did not answer in time may be the starved one.
        let quiet = Lag { total: Duration::from_millis(40), worst: Duration::from_millis(25) };
        let busy = Stall { stalled: Duration::from_millis(9_100), window: Duration::from_millis(31_000) };
        let calm = Stall { stalled: Duration::from_millis(300), window: Duration::from_millis(31_000) };
        let s = starved(Outcome::Error, Stop::Wait, quiet, Some(busy)).expect("a starved machine");
        assert!(s.contains("9100 ms of the row's 31000 ms"), "{s}");
        assert_eq!(starved(Outcome::Error, Stop::Wait, quiet, Some(calm)), None, "a hang on a calm machine");
        assert_eq!(starved(Outcome::Error, Stop::Other, quiet, Some(busy)), None, "a crash is no wait");
        assert_eq!(starved(Outcome::Fail, Stop::Wait, quiet, Some(busy)), None, "a FAIL stays a FAIL");
    }
}
