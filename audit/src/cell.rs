//! One library under one audit experiment: a fresh database, the library's schema, the commit
//! triggers on its job table, the fake tools, one job; worker A takes it and is held; the
//! library's recovery gives it to worker B; A comes back (or not); then the checks, from the tools'
//! ledger and the commit triggers only. Every wait is bounded; a step that does not happen in time
//! ends the cell in ERROR naming it, and every process of the cell is stopped either way.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use fenceproof_harness::check::audit::{self, AuditHistory, Execution, Hold, JobWrite};
use fenceproof_harness::check::Check;
use fenceproof_harness::db::{databases, Backend};
use fenceproof_harness::procs::adapter::{Adapter, AdapterWorker, WorkerSpec};
use fenceproof_harness::procs::freezer::Frozen;
use fenceproof_harness::procs::signals;
use fenceproof_harness::procs::tools::ToolsProc;
use fenceproof_harness::record::audit_commits::{self, AuditCommit};
use fenceproof_harness::record::ledger;
use fenceproof_harness::record::timeline::Timeline;
use fenceproof_harness::{wait, HarnessError};

use super::experiments::{AuditExperiment, HoldKind, Resume};
use super::hold::{self, Held};
use super::libraries::{HeldAt, Library, Runtime, CHECKPOINT_EXPERIMENT};
use super::settings::{Settings, Timing};
use super::takeover;
use super::{pause, registry, requeue};

/// How long a step that needs no recovery may take (a START, an END after the gate opened).
const STEP: Duration = Duration::from_secs(30);
/// How long the harness watches for a write it expects may come (a stale write, an outcome): the
/// window only bounds how long it looks; a write that lands later is still in the commit log and
/// judged, and nothing fails because a window passed.
const SETTLE: Duration = Duration::from_secs(3);

/// The verdict of one cell: the matrix's three, and one for an experiment the library's design
/// does not allow (its reason is the cell's `error` text).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    #[serde(rename = "PASS")]
    Pass,
    #[serde(rename = "FAIL")]
    Fail,
    #[serde(rename = "ERROR")]
    Error,
    #[serde(rename = "N/A")]
    NotApplicable,
    /// The library did not hand the job to B while A was held (alive): nothing stale to judge.
    #[serde(rename = "NO TAKEOVER")]
    NoTakeover,
}

impl Outcome {
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Pass => "PASS",
            Outcome::Fail => "FAIL",
            Outcome::Error => "ERROR",
            Outcome::NotApplicable => "N/A",
            Outcome::NoTakeover => "NO TAKEOVER",
        }
    }
}

/// What the cell needs from its surroundings.
pub struct Env<'a> {
    pub backend: &'a dyn Backend,
    pub python: &'a Path,
    pub adapters: &'a Path,
    pub tools_bin: &'a Path,
    /// The built Rust adapters' folder, or why they could not be built.
    pub rust_bin: &'a Result<PathBuf, String>,
    /// The stall-recovery settings every cell runs at.
    pub settings: Settings,
}

/// The outcome of one cell, with its evidence.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CellResult {
    pub library: String,
    pub version: String,
    pub experiment: String,
    /// The settings it ran at (`fast`, `production`).
    #[serde(default = "fast")]
    pub settings: String,
    pub control: bool,
    /// The same verdicts as the matrix's experiments.
    pub verdict: Outcome,
    /// How many times the job body ran (tools' ledger).
    pub executions: usize,
    pub checks: Vec<Check>,
    pub error: Option<String>,
    pub duration_ms: u128,
    /// The cell's folder, relative to the run folder.
    pub evidence: String,
    pub reproduce: String,
    pub history: Option<AuditHistory>,
    pub timeline: Vec<fenceproof_harness::record::timeline::Entry>,
    /// What the workers printed (the adapters' events): their own word, secondary evidence only.
    pub worker_events: Vec<Value>,
    /// Why the experiment does not apply to this library (verdict N/A).
    pub not_applicable: Option<String>,
    /// How long A was held (paused or frozen), from the timeline: its last stop to the SIGCONT (or
    /// thaw) that let it go on, the pause that produced the verdict. `None` when A was killed or
    /// never held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused_ms: Option<i64>,
    /// What the harness saw of its own fault (the held statement; pauses repeated outside a
    /// library's recovery lock), when worth a line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed: Option<String>,
}

impl CellResult {
    /// The check named `name`, when it was judged.
    pub fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }
}

/// The settings of a cell saved before settings were recorded.
fn fast() -> String {
    Settings::Fast.name().into()
}

fn app_name(worker: &str) -> String {
    format!("fp-audit-{worker}")
}

/// Run one cell; its evidence goes to `dir`.
pub async fn run(env: &Env<'_>, lib: &Library, exp: &AuditExperiment, dir: &Path, index: usize) -> CellResult {
    let started = Instant::now();
    let timeline = Timeline::new();
    if let Some(why) = lib.not_applicable(exp.id) {
        return not_applicable(env, lib, exp, dir, why);
    }
    let mut state = Cell {
        workers: Vec::new(),
        holds: Vec::new(),
        frozen: None,
        tools: None,
        no_takeover: false,
        kept: false,
        sigterm_at: None,
        held: None,
        held_pid: 0,
        observed: Vec::new(),
        tree: lib.process_tree,
    };
    let outcome = drive(env, lib, exp, dir, index, &timeline, &mut state).await;
    if let Some(h) = state.held.take() {
        let _ = h.release().await;
    }
    let mut worker_events = Vec::new();
    for w in &mut state.workers {
        w.stop(Duration::from_secs(5)).await;
        worker_events.extend(w.read_events().into_iter().map(|mut e| {
            e["worker"] = json!(w.name);
            e
        }));
    }
    if let Some(f) = state.frozen.take() {
        let _ = f.thaw().await;
    }
    drop(state.tools.take());
    let reproduce = reproduce(env.settings, lib, exp);
    let evidence = dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let (verdict, checks, error, history) = verdict_of(outcome, &mut state);
    let result = CellResult {
        library: lib.name.into(),
        version: lib.version.into(),
        experiment: exp.id.into(),
        settings: env.settings.name().into(),
        control: lib.control,
        verdict,
        executions: history.as_ref().map(AuditHistory::executions_count).unwrap_or(0),
        checks,
        error,
        duration_ms: started.elapsed().as_millis(),
        evidence,
        reproduce,
        history,
        timeline: timeline.entries(),
        worker_events,
        not_applicable: None,
        paused_ms: pause::held_ms(&timeline.entries(), "A"),
        observed: (!state.observed.is_empty()).then(|| state.observed.join("; ")),
    };
    let _ = std::fs::write(dir.join("cell.json"), serde_json::to_string_pretty(&result).unwrap_or_default());
    let _ = timeline.save(&dir.join("timeline.json"));
    result
}

/// The cell's verdict, checks, error and history from how its schedule ended.
fn verdict_of(
    outcome: Result<AuditHistory, HarnessError>,
    state: &mut Cell,
) -> (Outcome, Vec<Check>, Option<String>, Option<AuditHistory>) {
    match outcome {
        Ok(history) => {
            let mut checks = audit::judge(&history);
            let b_wrote = checks.iter().any(|c| c.name == audit::STALE_WRITE && !c.passed());
            let a_lost = checks.iter().any(|c| c.name == audit::CURRENT_OUTCOME && !c.passed());
            if state.kept && a_lost && !b_wrote {
                // A, the current worker, never committed its success and nobody else changed the
                // job: its library let the job go (graphile_worker releases it at shutdown), which
                // is at-least-once, not an outcome another worker replaced.
                checks.retain(|c| c.name != audit::CURRENT_OUTCOME);
                state.observed.push("A's success never committed and nobody else changed the job: not judged".into());
            }
            let verdict = if checks.iter().all(Check::passed) { Outcome::Pass } else { Outcome::Fail };
            (verdict, checks, None, Some(history))
        }
        Err(e) if state.no_takeover => (Outcome::NoTakeover, Vec::new(), Some(e.to_string()), None),
        Err(e) => (Outcome::Error, Vec::new(), Some(e.to_string()), None),
    }
}

/// The cell of an experiment the library's design does not allow: its reason, no verdict.
fn not_applicable(env: &Env<'_>, lib: &Library, exp: &AuditExperiment, dir: &Path, why: &str) -> CellResult {
    let result = CellResult {
        library: lib.name.into(),
        version: lib.version.into(),
        experiment: exp.id.into(),
        settings: env.settings.name().into(),
        control: lib.control,
        verdict: Outcome::NotApplicable,
        executions: 0,
        checks: Vec::new(),
        error: None,
        duration_ms: 0,
        evidence: dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default(),
        reproduce: reproduce(env.settings, lib, exp),
        history: None,
        timeline: Vec::new(),
        worker_events: Vec::new(),
        not_applicable: Some(why.to_string()),
        paused_ms: None,
        observed: None,
    };
    let _ = std::fs::write(dir.join("cell.json"), serde_json::to_string_pretty(&result).unwrap_or_default());
    result
}

/// The command line that runs this cell again.
fn reproduce(settings: Settings, lib: &Library, exp: &AuditExperiment) -> String {
    match settings {
        Settings::Fast => format!("fenceproof audit --library {} --only {}", lib.name, exp.id),
        s => format!("fenceproof audit --settings {} --library {} --only {}", s.name(), lib.name, exp.id),
    }
}

/// What has to be cleaned up whatever happens.
struct Cell {
    /// The library did not hand the job to B while A was held (paused or frozen, not killed).
    no_takeover: bool,
    /// A long job (A not held) that nobody took over: A stays the current worker.
    kept: bool,
    /// When A was sent SIGTERM (the graceful-shutdown experiment).
    sigterm_at: Option<DateTime<Utc>>,
    workers: Vec<AdapterWorker>,
    holds: Vec<Hold>,
    /// A's outcome write held inside the database (the held-write experiment), until released.
    held: Option<Held>,
    /// The backend of A's held write (0 when none).
    held_pid: i32,
    /// What the harness saw of its own fault worth a line in the table (the held statement, pauses
    /// repeated outside a recovery lock).
    observed: Vec<String>,
    frozen: Option<Frozen>,
    tools: Option<ToolsProc>,
    /// A's worker is a tree of processes: its pauses and freezes take the whole tree.
    tree: bool,
}

/// START/END entries of the tools' ledger: (worker, phase, at).
fn ledger_marks(path: &Path) -> Result<Vec<(String, String, DateTime<Utc>)>, HarnessError> {
    let mut out = Vec::new();
    for e in ledger::entries(path)? {
        if e["kind"] != "created" {
            continue;
        }
        // The tools keep the request as `body`; `at` is Unix seconds (a decimal string).
        let r = &e["body"];
        let (Some(w), Some(p), Some(at)) = (r["worker"].as_str(), r["phase"].as_str(), e["at"].as_str()) else {
            continue;
        };
        let Ok(secs) = at.parse::<f64>() else { continue };
        if let Some(at) = DateTime::from_timestamp_micros((secs * 1e6).round() as i64) {
            out.push((w.to_string(), p.to_string(), at));
        }
    }
    Ok(out)
}

fn count(marks: &[(String, String, DateTime<Utc>)], worker: &str, phase: &str) -> usize {
    marks.iter().filter(|(w, p, _)| w == worker && p == phase).count()
}

async fn wait_mark(
    ledger: &Path,
    worker: &str,
    phase: &str,
    n: usize,
    bound: Duration,
    what: &str,
) -> Result<(), HarnessError> {
    wait::until(what, bound, || async move { Ok((count(&ledger_marks(ledger)?, worker, phase) >= n).then_some(())) })
        .await
}

/// A's execution ends after it came back: its END in the tools' ledger, or its library stopped it
/// (a refused heartbeat; the adapter says `aborted`, which only ends the wait: the verdict comes
/// from the ledger and the commit triggers).
async fn wait_end_a(ledger: &Path, events: &Path) -> Result<(), HarnessError> {
    wait::until("A's execution to end after it came back (its END, or its library stopping it)", STEP, || async move {
        let aborted = std::fs::read_to_string(events)
            .map(|t| fenceproof_harness::procs::adapter::events(&t).iter().any(|e| e["event"] == "aborted"))
            .unwrap_or(false);
        Ok((aborted || count(&ledger_marks(ledger)?, "A", "end") >= 1).then_some(()))
    })
    .await
}

/// Watch (at most `SETTLE`) for a commit by `worker` after commit `after_seq` that changes the
/// job's state (a status change or a delete: a heartbeat is not what the harness waits for, nor a
/// change of the library's registry of workers).
async fn settle(pool: &sqlx::PgPool, lib: &Library, worker: &str, after_seq: i64) -> Result<bool, HarnessError> {
    let app = app_name(worker);
    let registry = lib.registry.map(|r| r.table).unwrap_or("");
    let (results, column) = lib.results_table.unwrap_or(("", ""));
    let deadline = Instant::now() + SETTLE;
    loop {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM fenceproof_audit.commits WHERE writer = $1 AND seq > $2
                AND (op = 'DELETE' OR old_row->>$3 IS DISTINCT FROM new_row->>$3
                     OR (table_name = $5 AND old_row->>$6 IS DISTINCT FROM new_row->>$6)) AND table_name <> $4",
        )
        .bind(&app)
        .bind(after_seq)
        .bind(lib.status_column)
        .bind(registry)
        .bind(results)
        .bind(column)
        .fetch_one(pool)
        .await?;
        if n > 0 {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(wait::POLL_EVERY * 5).await;
    }
}

/// How long A must go without committing a change of the job's state for the harness to take what
/// its retry request set going as played out.
const QUIET: Duration = Duration::from_secs(2);
/// At most how long the harness waits for that.
const QUIET_BOUND: Duration = Duration::from_secs(10);

/// After A's retry request, with B's execution still running: what the request sets going in A
/// plays out before B's gate opens (a job the stale retry put back in the queue is claimed and run
/// again by A, the free worker, as often as the library lets it), so whether a second execution
/// starts beside B, and what state A leaves the job in, is the library's doing, not a race with B's
/// END. Waits until A has committed no change of the job's state (a status change, an insert or a
/// delete: not a heartbeat) for [`QUIET`], at most [`QUIET_BOUND`]; the timeline says where it
/// stopped, and the cell's note says so when A was still changing the job.
async fn quiet_after_retry(
    pool: &sqlx::PgPool,
    lib: &Library,
    timeline: &Timeline,
    cell: &mut Cell,
) -> Result<(), HarnessError> {
    let last = || async {
        let q = "SELECT coalesce(max(seq), 0) FROM fenceproof_audit.commits WHERE table_name = $1 AND writer = $2
                   AND (op <> 'UPDATE' OR old_row->>$3 IS DISTINCT FROM new_row->>$3)";
        let q = sqlx::query_scalar(q).bind(lib.table).bind(app_name("A")).bind(lib.status_column);
        Ok::<i64, HarnessError>(q.fetch_one(pool).await?)
    };
    let (mut seen, started) = (last().await?, Instant::now());
    let mut since = Instant::now();
    while since.elapsed() < QUIET && started.elapsed() < QUIET_BOUND {
        tokio::time::sleep(wait::POLL_EVERY * 5).await;
        let now = last().await?;
        if now != seen {
            (seen, since) = (now, Instant::now());
        }
    }
    let still = since.elapsed() < QUIET;
    let detail = json!({"quiet_ms": QUIET.as_millis(), "last_state_change_by_a": seen, "still_changing": still});
    timeline.record("harness", "observed", "quiet_after_retry", detail);
    if still {
        cell.observed.push(format!(
            "A still changed the job's state {} s after its retry request (last: commit #{seen}); B's gate opened then",
            QUIET_BOUND.as_secs()
        ));
    }
    Ok(())
}

async fn last_seq(pool: &sqlx::PgPool) -> Result<i64, HarnessError> {
    Ok(sqlx::query_scalar("SELECT coalesce(max(seq), 0) FROM fenceproof_audit.commits").fetch_one(pool).await?)
}

fn open_gate(gates: &Path, worker: &str, timeline: &Timeline) -> Result<(), HarnessError> {
    std::fs::write(gates.join(worker), b"open")?;
    timeline.record("harness", "open_gate", worker, json!({}));
    Ok(())
}

async fn create_database(env: &Env<'_>, lib: &Library, name: &str) -> Result<String, HarnessError> {
    if lib.protocol_schema {
        return databases::create_from_template(env.backend, name).await;
    }
    let admin = databases::pool(&env.backend.url_for("postgres"), "fenceproof-harness", 1).await?;
    sqlx::query(&format!("CREATE DATABASE \"{name}\"")).execute(&admin).await?;
    admin.close().await;
    Ok(env.backend.url_for(name))
}

async fn drive(
    env: &Env<'_>,
    lib: &Library,
    exp: &AuditExperiment,
    dir: &Path,
    index: usize,
    timeline: &Timeline,
    cell: &mut Cell,
) -> Result<AuditHistory, HarnessError> {
    let stage = prepare(env, lib, exp, dir, index, timeline, cell).await?;
    if let Err(e) = schedule(&stage, lib, exp, dir, timeline, cell).await {
        // A cell without a verdict (NO TAKEOVER, ERROR) keeps its commits for whoever checks it.
        if let Ok(commits) = audit_commits::read(&stage.pool).await {
            let _ =
                std::fs::write(dir.join("commits.json"), serde_json::to_string_pretty(&commits).unwrap_or_default());
        }
        return Err(e);
    }
    collect(stage, lib, exp, dir, timeline, cell).await
}

/// The cell's schedule once it is set up: A held, B's takeover, A brought back as `exp` says.
async fn schedule(
    stage: &Stage,
    lib: &Library,
    exp: &AuditExperiment,
    dir: &Path,
    timeline: &Timeline,
    cell: &mut Cell,
) -> Result<(), HarnessError> {
    hold_and_take_over(stage, lib, exp, dir, timeline, cell).await?;
    let (pool, gates, ledger_path) = (&stage.pool, &stage.gates, &stage.ledger_path);
    match exp.resume {
        Resume::Early if exp.hold == HoldKind::HeldWrite => {
            // B took over while A's write waited inside the database: release it, then resume A
            // (a write that is one statement of a longer transaction needs A to commit it).
            let mark = last_seq(pool).await?;
            if let Some(h) = cell.held.take() {
                h.release().await?;
            }
            bring_back(exp, cell, timeline).await?;
            wait_end_a(ledger_path, &cell.workers[0].events).await?;
            settle(pool, lib, "A", mark).await?;
            finish_b(pool, lib, gates, ledger_path, timeline).await?;
        }
        Resume::Early => {
            let mark = last_seq(pool).await?;
            if exp.outcome == "checkpoint" {
                // A comes back with its work done: its gate is open before it runs again, so its
                // first act is the checkpoint write (not a heartbeat that could stop it first).
                open_gate(gates, "A", timeline)?;
                bring_back(exp, cell, timeline).await?;
            } else {
                bring_back(exp, cell, timeline).await?;
                open_gate(gates, "A", timeline)?;
            }
            // A that exited on SIGTERM has no END to wait for.
            if cell.sigterm_at.is_none() || cell.workers[0].exited().is_none() {
                wait_end_a(ledger_path, &cell.workers[0].events).await?;
            }
            settle(pool, lib, "A", mark).await?;
            if exp.outcome == "retry" {
                quiet_after_retry(pool, lib, timeline, cell).await?;
            }
            if !cell.kept {
                finish_b(pool, lib, gates, ledger_path, timeline).await?;
            }
        }
        Resume::Late => {
            finish_b(pool, lib, gates, ledger_path, timeline).await?;
            bring_back(exp, cell, timeline).await?;
            let mark = last_seq(pool).await?;
            open_gate(gates, "A", timeline)?;
            wait_end_a(ledger_path, &cell.workers[0].events).await?;
            settle(pool, lib, "A", mark).await?;
        }
        Resume::Never => finish_b(pool, lib, gates, ledger_path, timeline).await?,
    }
    Ok(())
}

/// What a cell runs on once it is set up: the library's adapter, its database, the tools and the
/// workers' gates.
struct Stage {
    adapter: Adapter,
    url: String,
    pool: sqlx::PgPool,
    tools_addr: String,
    ledger_path: PathBuf,
    gates: PathBuf,
    /// The job's id as the adapter named it at enqueue.
    job: String,
    /// The settings the cell runs at, and their numbers for this library.
    settings: Settings,
    timing: Timing,
}

impl Stage {
    /// How worker `name` ("A" or "B") of this cell is started.
    fn worker<'a>(&'a self, name: &'a str, owner: &'a str, outcome: &'a str, recover: bool) -> WorkerSpec<'a> {
        WorkerSpec {
            owner,
            name,
            app_name: if name == "A" { "fp-audit-A" } else { "fp-audit-B" },
            dsn: &self.url,
            tools: &self.tools_addr,
            gates: &self.gates,
            outcome,
            settings: self.settings.name(),
            stall_s: self.timing.stall_s,
            heartbeat_s: self.timing.heartbeat_s,
            sweep_s: self.timing.sweep_s,
            recover,
        }
    }
}

/// A fresh database with the library's schema and the commit triggers on its job table, the fake
/// tools (kept in `cell`), and one job enqueued.
async fn prepare(
    env: &Env<'_>,
    lib: &Library,
    exp: &AuditExperiment,
    dir: &Path,
    index: usize,
    timeline: &Timeline,
    cell: &mut Cell,
) -> Result<Stage, HarnessError> {
    let adapter = match lib.runtime {
        Runtime::Python => Adapter { python: Some(env.python.to_path_buf()), script: env.adapters.join(lib.adapter) },
        Runtime::Rust => match env.rust_bin {
            Ok(bin) => Adapter { python: None, script: bin.join(lib.adapter) },
            Err(e) => return Err(HarnessError::Other(format!("the Rust adapters did not build: {e}"))),
        },
    };
    let db = format!("audit_{index}_{}", lib.name);
    let url = create_database(env, lib, &db).await?;
    let pool = databases::pool(&url, "fenceproof-harness", 2).await?;
    let (timing, settings) = (lib.timing(env.settings), env.settings);
    let numbers = timing.args(settings);
    let numbers: Vec<&str> = numbers.iter().map(String::as_str).collect();
    adapter.once("setup", &url, &numbers, &app_name("setup"), Duration::from_secs(120)).await?;
    audit_commits::install(&pool, lib.table).await?;
    if exp.hold == HoldKind::HeldWrite {
        hold::prepare(&pool, lib).await?;
        if let HeldAt::KeyShare(table, _) = lib.held_at {
            audit_commits::watch(&pool, table).await?;
        }
    }
    if let Some(t) = checkpoint_table(lib, exp) {
        if t != lib.table {
            audit_commits::watch(&pool, t).await?;
        }
    }
    if let Some(r) = lib.registry {
        audit_commits::watch(&pool, r.table).await?;
    }
    if let Some((t, _)) = lib.results_table {
        audit_commits::watch(&pool, t).await?;
    }
    timeline.record("harness", "setup", lib.name, json!({"database": db, "table": lib.table}));

    let tools = ToolsProc::spawn(env.tools_bin, dir, timeline, None).await?;
    let tools_addr = tools.addr.to_string();
    let ledger_path: PathBuf = tools.ledger.clone();
    cell.tools = Some(tools);
    let enqueue_args = [&["--outcome", exp.enqueue_outcome()][..], &numbers].concat();
    let enq = adapter.once("enqueue", &url, &enqueue_args, &app_name("enqueue"), Duration::from_secs(60)).await?;
    let job = enq.iter().find(|e| e["event"] == "enqueued").map(|e| e["job"].clone()).unwrap_or(Value::Null);
    timeline.record("harness", "enqueue", lib.name, json!({"job": job}));

    let gates = dir.join("gates");
    std::fs::create_dir_all(&gates)?;
    let job = job.as_str().map(str::to_string).unwrap_or_else(|| job.to_string());
    Ok(Stage { adapter, url, pool, tools_addr, ledger_path, gates, job, settings, timing })
}

/// A takes the job and starts it; A is held past the stall threshold; B, with the library's stall
/// recovery, takes the job over.
async fn hold_and_take_over(
    stage: &Stage,
    lib: &Library,
    exp: &AuditExperiment,
    dir: &Path,
    timeline: &Timeline,
    cell: &mut Cell,
) -> Result<(), HarnessError> {
    // A takes the job and starts it.
    cell.workers.push(stage.adapter.spawn_worker(&stage.worker("A", "A", exp.outcome, false), dir, timeline)?);
    wait_mark(&stage.ledger_path, "A", "start", 1, STEP, "A's execution to start (its START in the tools' ledger)")
        .await
        .map_err(|e| with_last_words(e, &cell.workers[0]))?;

    // The fault: A held past the stall threshold (or, a long job, not held at all).
    if exp.hold == HoldKind::HeldWrite {
        hold_write(stage, lib, timeline, cell).await?;
    }
    if exp.hold == HoldKind::Sigterm {
        signals::send(cell.workers[0].pid, nix::sys::signal::Signal::SIGTERM)?;
        cell.sigterm_at = Some(Utc::now());
    }
    if !matches!(exp.hold, HoldKind::Running | HoldKind::Sigterm) {
        let held_from = Utc::now();
        hold_a(&stage.pool, lib, exp, timeline, cell).await?;
        cell.holds.push(Hold { worker: "A".into(), from: held_from, to: None });
    }
    timeline.record("harness", "hold", "A", json!({"how": format!("{:?}", exp.hold)}));

    // B, with the library's stall recovery, takes the job over.
    cell.workers.push(stage.adapter.spawn_worker(
        &stage.worker("B", if exp.same_name { "A" } else { "B" }, exp.taker, true),
        dir,
        timeline,
    )?);
    wait_b(stage, lib, exp, timeline, cell).await?;
    if let (Some(from), Some(how)) = (cell.sigterm_at, cell.workers[0].exited()) {
        // A exited on SIGTERM without finishing its job: judged as killed from then on.
        cell.holds.push(Hold { worker: "A".into(), from, to: None });
        let ended = count(&ledger_marks(&stage.ledger_path)?, "A", "end") > 0;
        cell.observed.push(match ended {
            // Its library let the job's execution end first (django-q2's timeout stops it).
            true => format!("A exited on SIGTERM ({how}) once its job's execution had ended"),
            false => format!("A exited on SIGTERM ({how}) without waiting for its job"),
        });
    }
    Ok(())
}

/// B's takeover, as the library's own record or B's START shows it. A long job (A not held) that
/// nobody takes over within five stall thresholds (at least 10 s) stays A's: the cell goes on with
/// A as the current worker.
async fn wait_b(
    stage: &Stage,
    lib: &Library,
    exp: &AuditExperiment,
    timeline: &Timeline,
    cell: &mut Cell,
) -> Result<(), HarnessError> {
    let running = matches!(exp.hold, HoldKind::Running | HoldKind::Sigterm);
    let bound = match running {
        true => lib.long_job(stage.settings),
        false => lib.takeover(stage.settings),
    };
    let mut taken = seen_takeover(stage, lib, exp, bound, timeline, cell).await;
    let a_alive = cell.workers[0].exited().is_none();
    if let (true, Err(_), false) = (exp.hold == HoldKind::Sigterm, &taken, a_alive) {
        // A exited on SIGTERM: the library's recovery of a gone worker, within its own bound.
        taken = seen_takeover(stage, lib, exp, lib.takeover(stage.settings), timeline, cell).await;
    }
    if let (true, Err(_), true, None) = (running, &taken, a_alive, cell.workers[1].exited()) {
        cell.kept = true;
        let what = format!("B did not start the job within {} s while A, alive, ran it", bound.as_secs());
        timeline.record("harness", "observed", "kept", json!({"bound_s": bound.as_secs()}));
        cell.observed.push(format!("{what}; A is the current worker"));
        return Ok(());
    }
    if let Err(e) = taken {
        // With A held but alive, no takeover is an observation about the library (it keeps the job
        // with the worker it believes alive), not a harness failure; with A killed it is an error.
        cell.no_takeover = exp.hold != HoldKind::Kill && cell.workers[1].exited().is_none();
        if cell.no_takeover && cell.held_pid != 0 {
            let why = hold::blocked_takeover(&stage.pool, cell.held_pid, lib).await;
            return Err(HarnessError::Other(format!("{e}; {why}")));
        }
        let e = with_registry_notes(stage, lib, exp, cell, e).await;
        return Err(with_last_words(e, &cell.workers[1]));
    }
    timeline.record("harness", "observed", "takeover", json!({"by": "B"}));
    Ok(())
}

/// `e` with what the library's registry of workers says of it (why the job stayed with A).
async fn with_registry_notes(
    stage: &Stage,
    lib: &Library,
    exp: &AuditExperiment,
    cell: &Cell,
    e: HarnessError,
) -> HarnessError {
    let Ok(commits) = audit_commits::read(&stage.pool).await else { return e };
    let paused = cell.holds.first().map(|h| h.from);
    match registry::notes(lib, exp, &commits, paused, None, Utc::now(), stage.timing.stall_s) {
        notes if notes.is_empty() => e,
        notes => HarnessError::Other(format!("{e}; {}", notes.join("; "))),
    }
}

/// Wait (at most `bound`) for B's takeover: its committed claim under a row hold, else its START
/// or the system's own ownership record.
async fn seen_takeover(
    stage: &Stage,
    lib: &Library,
    exp: &AuditExperiment,
    bound: Duration,
    timeline: &Timeline,
    cell: &mut Cell,
) -> Result<(), HarnessError> {
    match (exp.hold, lib.held_at) {
        // The row hold also keeps B's own first protected write (it locks the same row) until the
        // release: the takeover is B's committed claim of that row, and B's START follows it.
        (HoldKind::HeldWrite, HeldAt::KeyShare(table, _)) => wait_commit(&stage.pool, "B", table, bound).await,
        _ => {
            let started = || Ok(count(&ledger_marks(&stage.ledger_path)?, "B", "start") >= 1);
            let seen = takeover::wait(&stage.pool, lib, started, bound, SETTLE, timeline).await?;
            if let takeover::Seen::Record(d) = seen {
                cell.observed.push(format!("takeover seen in the system's own record, not by B's START: {d}"));
            }
            Ok(())
        }
    }
}

/// Pause (or freeze, or kill) A; a pause lands outside the library's recovery lock.
async fn hold_a(
    pool: &sqlx::PgPool,
    lib: &Library,
    exp: &AuditExperiment,
    timeline: &Timeline,
    cell: &mut Cell,
) -> Result<(), HarnessError> {
    let a_pid = cell.workers[0].pid;
    let except = cell.held_pid;
    let at = match exp.hold {
        HoldKind::Sigstop | HoldKind::HeldWrite => {
            let tree = cell.tree;
            sigstop(a_pid, tree, timeline).await?;
            let (p, r) = (|| sigstop(a_pid, tree, timeline), || sigcont(a_pid, tree, timeline));
            hold::outside_library_locks(pool, lib, &app_name("A"), except, timeline, p, r).await?
        }
        HoldKind::Freeze => freeze_a(pool, lib, except, timeline, cell).await?,
        HoldKind::Kill => {
            cell.workers[0].kill().await;
            hold::PausedAt::default()
        }
        HoldKind::Running | HoldKind::Sigterm => hold::PausedAt::default(),
    };
    if at.tries > 0 {
        timeline.record("harness", "observed", "repaused", json!({"tries": at.tries, "why": at.why}));
        let last = at.why.last().map(String::as_str).unwrap_or("");
        cell.observed.push(format!("A paused again {} time(s) (last: {last})", at.tries));
    }
    if !at.inside.is_empty() {
        cell.observed.push(format!("A paused inside its library's transaction: {}", at.inside.join("; ")));
    }
    Ok(())
}

/// Stop A with SIGSTOP, the moment in the timeline (the pause behind a verdict is read from there).
async fn sigstop(pid: nix::unistd::Pid, tree: bool, timeline: &Timeline) -> Result<(), HarnessError> {
    timeline.record("harness", pause::STOP, "A", json!({"how": "SIGSTOP", "process_group": tree}));
    if tree {
        signals::send_group(pid, nix::sys::signal::Signal::SIGSTOP)?;
    }
    signals::pause(pid).await
}

/// Let A go on with SIGCONT, the moment in the timeline.
async fn sigcont(pid: nix::unistd::Pid, tree: bool, timeline: &Timeline) -> Result<(), HarnessError> {
    timeline.record("harness", pause::CONT, "A", json!({"how": "SIGCONT", "process_group": tree}));
    if tree {
        signals::send_group(pid, nix::sys::signal::Signal::SIGCONT)?;
    }
    signals::resume(pid).await
}

/// Freeze A's cgroup, outside its library's locks; each freeze and thaw in the timeline.
async fn freeze_a(
    pool: &sqlx::PgPool,
    lib: &Library,
    except: i32,
    timeline: &Timeline,
    cell: &mut Cell,
) -> Result<hold::PausedAt, HarnessError> {
    let a_pid = cell.workers[0].pid;
    timeline.record("harness", pause::STOP, "A", json!({"how": "freeze"}));
    let tree = cell.tree;
    let freeze_a = move || async move {
        match tree {
            true => Frozen::freeze_tree(a_pid).await,
            false => Frozen::freeze(a_pid).await,
        }
    };
    let frozen = std::sync::Arc::new(tokio::sync::Mutex::new(Some(freeze_a().await?)));
    let (f, t1) = (frozen.clone(), timeline.clone());
    let thaw = move || {
        let (f, t1) = (f.clone(), t1.clone());
        async move {
            t1.record("harness", pause::CONT, "A", json!({"how": "thaw"}));
            match f.lock().await.take() {
                Some(x) => x.thaw().await,
                None => Ok(()),
            }
        }
    };
    let (g, t2) = (frozen.clone(), timeline.clone());
    let freeze = move || {
        let (g, t2) = (g.clone(), t2.clone());
        async move {
            t2.record("harness", pause::STOP, "A", json!({"how": "freeze"}));
            *g.lock().await = Some(freeze_a().await?);
            Ok(())
        }
    };
    let at = hold::outside_library_locks(pool, lib, &app_name("A"), except, timeline, freeze, thaw).await?;
    cell.frozen = frozen.lock().await.take();
    Ok(at)
}

/// The held-write experiment's first half: A's outcome write held inside the database. The hold
/// is armed, A's gate opens (its body ends, its library sends the outcome), and the harness waits
/// until a write of A's waits on the hold; the held statement goes to the timeline.
async fn hold_write(stage: &Stage, lib: &Library, timeline: &Timeline, cell: &mut Cell) -> Result<(), HarnessError> {
    let app = app_name("A");
    let held = Held::arm(lib, &stage.url, &stage.pool, &app, &stage.job, timeline).await?;
    cell.held = Some(held);
    open_gate(&stage.gates, "A", timeline)?;
    let Some(held) = cell.held.as_ref() else { return Err(HarnessError::Other("no hold".into())) };
    let (pid, query) =
        held.wait_held(&stage.pool, &app, STEP).await.map_err(|e| with_last_words(e, &cell.workers[0]))?;
    cell.held_pid = pid;
    let rows = hold::held_rows(&stage.pool, pid).await;
    let detail = json!({"pid": pid, "query": hold::one_line(&query, 300), "rows_held_before": rows});
    timeline.record("harness", "observed", "write_held", detail);
    cell.observed.push(format!("A's write held: `{}`", hold::one_line(&query, 120).replace('`', "'")));
    Ok(())
}

/// Wait until a write of `table` by worker `worker` has committed.
async fn wait_commit(pool: &sqlx::PgPool, worker: &str, table: &str, bound: Duration) -> Result<(), HarnessError> {
    let (app, table) = (app_name(worker), table.trim_start_matches("public.").to_string());
    let what = format!("the library's recovery to hand the job to {worker} (its committed claim of {table})");
    wait::until(&what, bound, || {
        let (app, table) = (app.clone(), table.clone());
        async move {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM fenceproof_audit.commits WHERE writer = $1 AND (table_name = $2 OR table_name = 'public.' || $2)",
            )
            .bind(&app)
            .bind(&table)
            .fetch_one(pool)
            .await?;
            Ok((n > 0).then_some(()))
        }
    })
    .await
}

/// The checkpoint table the experiment watches, when it is the checkpoint experiment.
fn checkpoint_table(lib: &Library, exp: &AuditExperiment) -> Option<&'static str> {
    (exp.id == CHECKPOINT_EXPERIMENT).then_some(lib.checkpoint_table).flatten()
}

/// A last look, the workers stopped, and the history from the commit triggers and the tools' ledger.
async fn collect(
    stage: Stage,
    lib: &Library,
    exp: &AuditExperiment,
    dir: &Path,
    timeline: &Timeline,
    cell: &mut Cell,
) -> Result<AuditHistory, HarnessError> {
    let pool = stage.pool;
    // A last look: anything the libraries do on their own after the outcomes (a retried job
    // picked up again) lands now; it is judged like everything else.
    let mark = last_seq(&pool).await?;
    settle(&pool, lib, "A", mark).await?;
    timeline.record("harness", "stop", "workers", json!({}));
    for w in &mut cell.workers {
        w.stop(Duration::from_secs(5)).await;
    }
    let commits = audit_commits::read(&pool).await?;
    pool.close().await;
    std::fs::write(dir.join("commits.json"), serde_json::to_string_pretty(&commits).unwrap_or_default())?;
    let mut h = history(lib, checkpoint_table(lib, exp), &ledger_marks(&stage.ledger_path)?, &commits, &cell.holds);
    h.taker_outcome = exp.taker.into();
    let paused = cell.holds.first().map(|h| h.from);
    let stall_s = stage.timing.stall_s;
    cell.observed.extend(registry::notes(lib, exp, &commits, paused, h.takeover_at(), Utc::now(), stall_s));
    if exp.outcome == "retry" {
        cell.observed.extend(requeue::note(&h));
    }
    if let (Resume::Late, "retry", Some(back)) = (exp.resume, exp.taker, cell.holds.first().and_then(|h| h.to)) {
        cell.observed.extend(requeue::at_return(&h, back));
    }
    if cell.kept {
        // Nobody took the job from A: A is the current worker, and B must not have touched it.
        (h.stalled, h.taker, h.taker_outcome) = ("B".into(), "A".into(), exp.outcome.into());
    }
    Ok(h)
}

/// B's gate opens; wait for its END and (at most the settle window) for its outcome to commit.
/// A B that never started the body (a takeover seen in the system's own record) ends when it
/// commits the job's outcome without running it (a workflow finished from its recorded steps).
async fn finish_b(
    pool: &sqlx::PgPool,
    lib: &Library,
    gates: &Path,
    ledger_path: &Path,
    timeline: &Timeline,
) -> Result<(), HarnessError> {
    let mark = last_seq(pool).await?;
    open_gate(gates, "B", timeline)?;
    let what =
        "B's execution to end after its gate opened (its END, or the job's outcome committed by B without a START)";
    let ended = wait::until(what, STEP, || async move {
        let marks = ledger_marks(ledger_path)?;
        if count(&marks, "B", "end") >= 1 {
            return Ok(Some(true));
        }
        Ok((count(&marks, "B", "start") == 0 && outcome_without_start(pool, lib).await?).then_some(false))
    })
    .await?;
    if !ended {
        timeline.record("harness", "observed", "outcome_without_start", json!({"worker": "B"}));
    }
    settle(pool, lib, "B", mark).await?;
    Ok(())
}

/// Whether B committed an outcome of the job (a state change out of the claimed states, or a
/// delete) though its body never started.
async fn outcome_without_start(pool: &sqlx::PgPool, lib: &Library) -> Result<bool, HarnessError> {
    let claimed: Vec<String> = lib.claimed.iter().map(|s| s.to_string()).collect();
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM fenceproof_audit.commits WHERE writer = 'fp-audit-B'
            AND (table_name = $1 OR table_name = 'public.' || $1)
            AND (op = 'DELETE' OR (old_row->>$2 IS DISTINCT FROM new_row->>$2 AND NOT (new_row->>$2 = ANY($3))))",
    )
    .bind(lib.table.trim_start_matches("public."))
    .bind(lib.status_column)
    .bind(&claimed)
    .fetch_one(pool)
    .await?;
    Ok(n > 0)
}

/// Resume or thaw A, and close its hold window.
async fn bring_back(exp: &AuditExperiment, cell: &mut Cell, timeline: &Timeline) -> Result<(), HarnessError> {
    match exp.hold {
        HoldKind::Sigstop | HoldKind::HeldWrite => sigcont(cell.workers[0].pid, cell.tree, timeline).await?,
        HoldKind::Freeze => {
            if let Some(f) = cell.frozen.take() {
                timeline.record("harness", pause::CONT, "A", json!({"how": "thaw"}));
                f.thaw().await?;
            }
        }
        HoldKind::Kill | HoldKind::Running | HoldKind::Sigterm => return Ok(()),
    }
    if let Some(h) = cell.holds.last_mut() {
        h.to = Some(Utc::now());
    }
    timeline.record("harness", "resume", "A", json!({}));
    Ok(())
}

fn with_last_words(e: HarnessError, w: &AdapterWorker) -> HarnessError {
    let words = w.last_words();
    if words.is_empty() {
        e
    } else {
        HarnessError::Other(format!("{e}; {}'s stderr ends: {words}", w.name))
    }
}

/// The commits of the library's results table (when it has one) as writes of the job, each status
/// read as `column=value` (django-q2's `success=false`).
fn result_writes(lib: &Library, commits: &[AuditCommit], write: impl Fn(&AuditCommit) -> JobWrite) -> Vec<JobWrite> {
    let Some((table, column)) = lib.results_table else { return Vec::new() };
    let result = |row: &Option<Value>| row.as_ref().map(|r| format!("{column}={}", r[column]));
    let results = commits.iter().filter(|c| c.table_name == table);
    results
        .map(|c| JobWrite { status_before: result(&c.old_row), status_after: result(&c.new_row), ..write(c) })
        .collect()
}

/// The library-neutral history the checkers judge.
pub fn history(
    lib: &Library,
    checkpoint_table: Option<&str>,
    marks: &[(String, String, DateTime<Utc>)],
    commits: &[AuditCommit],
    holds: &[Hold],
) -> AuditHistory {
    let mut executions: Vec<Execution> = Vec::new();
    for (w, phase, at) in marks {
        match phase.as_str() {
            "start" => executions.push(Execution { worker: w.clone(), start: *at, end: None }),
            "end" => {
                if let Some(e) = executions.iter_mut().rev().find(|e| &e.worker == w && e.end.is_none()) {
                    e.end = Some(*at);
                }
            }
            _ => {}
        }
    }
    // A status is a string in most libraries; a number (sqlxmq's remaining attempts) reads as text.
    let status = |row: &Option<Value>| {
        row.as_ref().map(|r| &r[lib.status_column]).filter(|v| !v.is_null()).map(|v| match v.as_str() {
            Some(s) => s.to_string(),
            None => v.to_string(),
        })
    };
    let write = |c: &AuditCommit| JobWrite {
        seq: c.seq,
        writer: c.writer.strip_prefix("fp-audit-").unwrap_or(&c.writer).to_string(),
        at: c.committed_at,
        op: c.op.clone(),
        status_before: status(&c.old_row),
        status_after: status(&c.new_row),
    };
    let mut writes: Vec<JobWrite> = commits.iter().filter(|c| c.table_name == lib.table).map(write).collect();
    writes.extend(result_writes(lib, commits, write));
    writes.sort_by_key(|w| w.seq);
    let checkpoints = checkpoint_table.map(|t| {
        commits
            .iter()
            .filter(|c| c.table_name == t)
            .filter(|c| {
                t != lib.table
                    || c.old_row.as_ref().map(|r| &r[lib.status_column])
                        == c.new_row.as_ref().map(|r| &r[lib.status_column])
            })
            .map(write)
            .collect()
    });
    AuditHistory {
        stalled: "A".into(),
        taker: "B".into(),
        executions,
        writes,
        holds: holds.to_vec(),
        claimed: lib.claimed.iter().map(|s| s.to_string()).collect(),
        success: lib.success,
        taker_outcome: "success".into(),
        checkpoints,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libraries::LIBRARIES;

    fn commit(seq: i64, table: &str, op: &str, writer: &str, old: Option<Value>, new: Option<Value>) -> AuditCommit {
        let at = DateTime::from_timestamp(1_800_000_000 + seq, 0).expect("a time");
        let writer = format!("fp-audit-{writer}");
        AuditCommit {
            seq,
            table_name: table.into(),
            op: op.into(),
            writer,
            backend_pid: 1,
            committed_at: at,
            old_row: old,
            new_row: new,
        }
    }

    /// django-q2's late success over B's final failure: invisible on the queue table (B's
    /// acknowledge deleted the row), a stale write and a lost outcome on its results table.
    #[test]
    fn a_stale_success_in_the_results_table_is_judged() {
        let lib = *LIBRARIES.iter().find(|l| l.name == "django_q2").expect("django_q2");
        let (q, t) = ("public.django_q_ormq", "public.django_q_task");
        let commits = [
            commit(1, q, "UPDATE", "A", Some(json!({"lock": "1"})), Some(json!({"lock": "2"}))),
            commit(3, q, "UPDATE", "B", Some(json!({"lock": "2"})), Some(json!({"lock": "3"}))),
            commit(5, t, "INSERT", "B", None, Some(json!({"success": false}))),
            commit(6, q, "DELETE", "B", Some(json!({"lock": "3"})), None),
            commit(8, t, "UPDATE", "A", Some(json!({"success": false})), Some(json!({"success": true}))),
        ];
        let at = |s: i64| DateTime::from_timestamp(1_800_000_000 + s, 0).expect("a time");
        let marks = [
            ("A".into(), "start".into(), at(1)),
            ("B".into(), "start".into(), at(3)),
            ("B".into(), "end".into(), at(4)),
        ];
        let holds = [Hold { worker: "A".into(), from: at(2), to: Some(at(7)) }];
        let judged = |lib: &Library| {
            let mut h = history(lib, None, &marks, &commits, &holds);
            h.taker_outcome = "fail".into();
            audit::judge(&h).into_iter().filter(|c| !c.passed()).map(|c| c.name).collect::<Vec<_>>()
        };
        assert_eq!(judged(&lib), [audit::STALE_WRITE, audit::CURRENT_OUTCOME], "the results table shows it");
        let blind = Library { results_table: None, ..lib };
        assert!(judged(&blind).is_empty(), "the queue table alone does not");
    }
}
