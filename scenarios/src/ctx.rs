//! What an experiment gets: a fresh database with the oracle, a control-plane pool, the harness's
//! timeline, its own folder in the run's report, and a way to spawn worker processes.

use std::path::PathBuf;
use std::time::Duration;

use fenceproof_harness::check::Check;
use fenceproof_harness::procs::tools::ToolsProc;
use fenceproof_harness::procs::worker::{WorkerProc, WorkerSpec};
use fenceproof_harness::record::timeline::Timeline;
use fenceproof_harness::wait;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::write_path::WritePath;
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

/// The application_name of the harness's control-plane session (setup, cancel, observation).
pub const CONTROL: &str = "fenceproof-control";

/// Owner-id prefix of control-plane processes.
pub const CONTROL_PLANE_PREFIX: &str = "control-plane-";

/// Default bound on any single wait inside an experiment.
pub const STEP: Duration = Duration::from_secs(15);

pub struct Ctx {
    pub id: String,
    pub dir: PathBuf,
    pub db_url: String,
    /// The same database as the worker role's login (`fenceproof_worker`, migration 0002): workers
    /// started with it can only call the fenced fp_* functions. `None` where the harness cannot
    /// create logins (an external database): workers then use `db_url` and the direct write path.
    pub worker_login: Option<String>,
    /// The write path workers get (`verify --write-path`): `Api`, the fp_* functions as the worker
    /// login; `Direct`, the worker's own statements as the direct login (`fenceproof_direct_writer`'s
    /// table privileges), or as the team's role in its database.
    pub write_path: WritePath,
    /// Control-plane / observer pool (application_name = CONTROL).
    pub pool: PgPool,
    pub timeline: Timeline,
    pub worker_bin: PathBuf,
    pub tools_bin: PathBuf,
    /// Extra arguments for every worker process (e.g. `--mutant NAME`).
    pub worker_args: Vec<String>,
    /// The PostgreSQL binaries (for experiments that build servers of their own, like H).
    pub pg_bin: Option<fenceproof_harness::db::pgbin::PgBin>,
    /// The image of the session's container backend, when it is one: H then builds its primary +
    /// standby as containers too.
    pub container_image: Option<String>,
    /// The server this experiment's database lives on, for faults that stop the whole server;
    /// `None` on a team's own database.
    pub server: Option<fenceproof_harness::faults::ServerTarget>,
    /// The schema of this experiment's oracle.
    pub oracle_schema: String,
    /// The deployment contract given on the command line, if any.
    pub contract: Option<std::sync::Arc<fenceproof_harness::contract::Contract>>,
    /// The SQL the session runs in every fresh database (a generated mutant of an fp_* function);
    /// an experiment that builds a database of its own must run it there too.
    pub sql_patch: Option<String>,
    /// How C and D hold a worker's transactions.
    pub barriers: Barriers,
    /// Checks accumulated by the experiment.
    pub checks: Vec<Check>,
    /// Key observations for the matrix row.
    pub notes: Vec<String>,
    /// The commits of a server of the row's own, read when the row left it ([`crate::own_server`]):
    /// the runner saves and judges these instead of the session database's.
    pub own_commits: Option<Vec<fenceproof_harness::record::oracle::CommitRow>>,
    /// Writers the experiment itself runs outside the protocol (a legacy direct writer): trace
    /// validation counts their commits as the environment's, not as protocol steps.
    pub environment: Vec<String>,
    /// The command that runs this row alone again, as its `reproduce:` line prints it.
    pub reproduce: String,
    /// What the runner's invariants judge must know of this row (its control-plane writers, where
    /// its protocol steps start): the experiment says it here, the runner judges.
    pub invariants: crate::invariants_judge::InvariantScope,
}

/// A worker whose term is over tries everything anyway: renew, save at the revision it knows and
/// at the run's `current` one (as a stale worker that re-read the row would, so that only the lease
/// check stands between it and the new holder's state), succeed, fail, release. Returns each
/// attempt with the outcome it was told.
pub async fn stale_attempts(w: &mut WorkerProc, current: i64) -> Result<Vec<(&'static str, String)>, HarnessError> {
    let by = format!("{} (stale)", w.name);
    let mut attempts = Vec::new();
    for (label, cmd) in [
        ("renew", json!({"cmd": "renew"})),
        ("save@stale", json!({"cmd": "save", "checkpoint": {"step": 2, "by": by}})),
        ("save@current", json!({"cmd": "save", "checkpoint": {"step": 3, "by": by}, "expected_revision": current})),
        ("succeed@current", json!({"cmd": "succeed", "expected_revision": current})),
        ("fail@current", json!({"cmd": "fail", "expected_revision": current})),
        ("release", json!({"cmd": "release"})),
    ] {
        let ev = w.request(cmd, STEP).await?;
        attempts.push((label, outcome(&ev).to_string()));
    }
    Ok(attempts)
}

/// A worker whose term is over asks for the lease again while the new holder's term is live: it
/// must be told `busy` (a worker that answers from what it believes it holds, not from the
/// database, would say `ok`; the row's lease-answer check then finds no takeover behind it).
/// Returns the outcome it was told.
pub async fn stale_acquire(w: &mut WorkerProc, run_id: Uuid) -> Result<String, HarnessError> {
    let ev = w
        .request(
            json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 30_000, "heartbeat_ms": 60_000, "renew_timeout_ms": 2000}),
            STEP,
        )
        .await?;
    Ok(outcome(&ev).to_string())
}

/// The names of the two checks [`Ctx::judge_stale_after_takeover`] makes (each row words them for
/// its own story and rule).
pub struct StaleChecks<'a> {
    /// Nothing the stale worker sends after the takeover commits (judged by the oracle).
    pub nothing_commits: &'a str,
    /// The current term's lease and the run are unchanged (judged by the rows).
    pub rows_unchanged: &'a str,
}

/// How experiments C and D hold a worker's transactions at a point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Barriers {
    /// The worker's own `faults` field: it takes a harness-held advisory lock at the named point.
    #[default]
    Worker,
    /// The harness's wire-protocol proxy holds the statement: no cooperation from the worker.
    Proxy,
}

impl Barriers {
    pub fn parse(s: &str) -> Option<Barriers> {
        match s {
            "worker" => Some(Barriers::Worker),
            "proxy" => Some(Barriers::Proxy),
            _ => None,
        }
    }
}

impl Ctx {
    /// An advisory-lock key of this row's own: `base` (the experiment's constant) in the low 32
    /// bits, a hash of the row's evidence folder (unique per run and row) above. Advisory locks
    /// are per database, and rows share one database when they run in a team's (side by side, or
    /// two runs at once): their barriers must never wait on each other's.
    pub fn lock_key(&self, base: i64) -> i64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.dir.to_string_lossy().bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        (((h & 0x7FFF_FFFF) as i64) << 32) | (base & 0xFFFF_FFFF)
    }

    /// Start a worker process named `name` with a fresh owner id (`start`: its mode and further
    /// arguments; a plain argument list starts it in commands mode, a [`Script`] scripted).
    pub async fn spawn_worker(&self, name: &str, start: impl Into<Start>) -> Result<WorkerProc, HarnessError> {
        let owner = format!("worker-{name}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        self.spawn_worker_as(name, &owner, start).await
    }

    /// Start a worker process named `name` (a fresh owner id) on database `database` of the row's
    /// server, with the login and write path the row gives its workers.
    pub async fn spawn_worker_in(
        &self,
        name: &str,
        database: &str,
        start: impl Into<Start>,
    ) -> Result<WorkerProc, HarnessError> {
        let owner = format!("worker-{name}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let mut start = start.into();
        let url = with_database(&self.worker_url(&mut start.extra)?, database)?;
        self.spawn_worker_in_dir(name, &owner, &url, start, &self.dir.join(database_folder(database))).await
    }

    /// A control-plane process named `name` (see [`Ctx::spawn_control_plane`]) on database
    /// `database`.
    pub async fn spawn_control_plane_in(&self, name: &str, database: &str) -> Result<WorkerProc, HarnessError> {
        let owner = format!("{CONTROL_PLANE_PREFIX}{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let url = with_database(&self.db_url, database)?;
        let args: Vec<String> = vec!["--write-path".into(), "direct".into()];
        self.spawn_worker_in_dir(name, &owner, &url, args, &self.dir.join(database_folder(database))).await
    }

    /// Start a worker process named `name` with the given owner id (which may be shared, as a
    /// restarted host reusing its hostname would).
    pub async fn spawn_worker_as(
        &self,
        name: &str,
        owner: &str,
        start: impl Into<Start>,
    ) -> Result<WorkerProc, HarnessError> {
        let mut start = start.into();
        let url = self.worker_url(&mut start.extra)?;
        self.spawn_worker_at(name, owner, &url, start).await
    }

    /// Start a worker (fresh owner id) that reaches the server only through its own fault proxy.
    pub async fn spawn_worker_proxied(
        &self,
        name: &str,
        start: impl Into<Start>,
    ) -> Result<(WorkerProc, fenceproof_harness::faults::proxy::Proxy), HarnessError> {
        let owner = format!("worker-{name}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let mut start = start.into();
        let url = self.worker_url(&mut start.extra)?;
        let proxy = fenceproof_harness::faults::proxy::Proxy::start(name, &url, self.timeline.clone()).await?;
        let w = self.spawn_worker_at(name, &owner, proxy.url(), start).await?;
        Ok((w, proxy))
    }

    /// Whether the workers are a named or SQL mutant (which lives on the direct write path).
    fn mutant(&self) -> bool {
        self.worker_args.iter().any(|a| a == "--mutant" || a == "--sql-mutant")
    }

    /// The URL a worker is given, with the matching `--write-path`: on the fp_* path the worker
    /// login; on the direct path the direct login (in the harness's own clusters) or the database's
    /// URL (a team's database, whose role is the team's own); a mutant, which rewrites statements of
    /// the direct path, gets the schema owner's URL.
    fn worker_url(&self, extra_args: &mut Vec<String>) -> Result<String, HarnessError> {
        let (path, url) = match (&self.worker_login, self.mutant(), self.write_path) {
            (Some(login), false, WritePath::Api) => ("api", login.clone()),
            (Some(login), false, WritePath::Direct) => (
                "direct",
                fenceproof_harness::db::databases::url_as(login, fenceproof_harness::db::databases::DIRECT_LOGIN)?,
            ),
            _ => ("direct", self.db_url.clone()),
        };
        extra_args.extend(["--write-path".to_string(), path.to_string()]);
        Ok(url)
    }

    /// Start a worker connected to another database (e.g. a primary an experiment built itself).
    pub async fn spawn_worker_at(
        &self,
        name: &str,
        owner: &str,
        database_url: &str,
        start: impl Into<Start>,
    ) -> Result<WorkerProc, HarnessError> {
        self.spawn_worker_in_dir(name, owner, database_url, start, &self.dir.clone()).await
    }

    /// [`Ctx::spawn_worker_at`], its events and stderr kept in `dir`.
    async fn spawn_worker_in_dir(
        &self,
        name: &str,
        owner: &str,
        database_url: &str,
        start: impl Into<Start>,
        dir: &std::path::Path,
    ) -> Result<WorkerProc, HarnessError> {
        let Start { launch, extra: mut extra_args } = start.into();
        let owner = owner.to_string();
        // A row that starts workers on a server of its own (H, N) names no write path: the
        // contract passes one always, the session's (a mutant lives on the direct path); on the
        // direct path they run the worker's own statements there too, as the direct login.
        let mut database_url = database_url.to_string();
        let named = extra_args.iter().any(|a| a == "--write-path");
        if !named {
            let direct = self.write_path == WritePath::Direct || self.mutant();
            extra_args.extend(["--write-path".to_string(), (if direct { "direct" } else { "api" }).to_string()]);
        }
        let direct_login = self.worker_login.is_some() && !self.mutant() && !owner.starts_with(CONTROL_PLANE_PREFIX);
        if self.write_path == WritePath::Direct && !named && direct_login {
            database_url = fenceproof_harness::db::databases::url_as(
                &database_url,
                fenceproof_harness::db::databases::DIRECT_LOGIN,
            )?;
        }
        extra_args.extend(self.worker_args.iter().cloned());
        // One secret store per experiment, shared by its workers and dispatchers.
        extra_args.extend(["--secrets-dir".to_string(), self.secrets_dir().display().to_string()]);
        extra_args.extend(["--trace-id".to_string(), self.trace_id()]);
        WorkerProc::spawn(
            WorkerSpec {
                name: name.into(),
                owner,
                binary: self.worker_bin.clone(),
                database_url,
                dir: dir.to_path_buf(),
                launch,
                extra_args,
            },
            self.timeline.clone(),
        )
        .await
    }

    /// The experiment's secret store (a directory the workers and dispatchers share).
    pub fn secrets_dir(&self) -> PathBuf {
        self.dir.join("secrets")
    }

    /// Start the fake tools with their ledger in this experiment's folder, observing the callers'
    /// sessions on this experiment's database at every call (the control URL).
    pub async fn spawn_tools(&self) -> Result<ToolsProc, HarnessError> {
        ToolsProc::spawn(&self.tools_bin, &self.dir, &self.timeline, Some(&self.db_url)).await
    }

    /// Start a control-plane process (the worker binary under test, used only for control-plane
    /// commands: create_run, cancel). Its owner id starts with `control-plane-`, which the
    /// invariants treat as the authorized control plane.
    pub async fn spawn_control_plane(&self) -> Result<WorkerProc, HarnessError> {
        let owner = format!("{CONTROL_PLANE_PREFIX}{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        self.spawn_worker_at("cp", &owner, &self.db_url.clone(), vec!["--write-path".into(), "direct".into()]).await
    }

    /// Start a worker that can reach the fake tools (a dispatcher / reconciler).
    pub async fn spawn_dispatcher(&self, name: &str, tools: &ToolsProc) -> Result<WorkerProc, HarnessError> {
        self.spawn_worker(name, Launch::dispatcher(tools.addr)).await
    }

    /// Start the reference worker (whatever worker the row tests) as a dispatcher: the driver of
    /// the model's paths lives there. A named or SQL mutant's build is kept, with its arguments.
    pub async fn spawn_reference_dispatcher(
        &mut self,
        name: &str,
        tools: &ToolsProc,
    ) -> Result<WorkerProc, HarnessError> {
        let ours = self.worker_bin.file_name().is_some_and(|n| n.to_string_lossy().starts_with("fenceproof-worker"));
        if ours {
            return self.spawn_dispatcher(name, tools).await;
        }
        let bin = std::mem::replace(&mut self.worker_bin, crate::binaries::default_worker_bin());
        let args = std::mem::take(&mut self.worker_args);
        let w = self.spawn_dispatcher(name, tools).await;
        self.worker_bin = bin;
        self.worker_args = args;
        w
    }

    /// Wait until the lease of `run_id` has expired on the database clock: bounded by [`STEP`]
    /// beyond the time the lease had left when the wait began (a TTL sized from a loaded
    /// machine's round trip, `crate::measured`, can be longer than a step).
    pub async fn wait_lease_expired(&self, run_id: Uuid) -> Result<(), HarnessError> {
        let left: Option<i64> = sqlx::query_scalar(
            "SELECT greatest(0, (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint) \
             FROM worker_leases WHERE run_id = $1::text::uuid",
        )
        .bind(run_id.to_string())
        .fetch_optional(&self.pool)
        .await?;
        let bound = STEP + Duration::from_millis(left.unwrap_or(0).max(0) as u64);
        self.wait_db_true_within(
            "the lease to expire on the database clock",
            "SELECT expires_at <= clock_timestamp() FROM worker_leases WHERE run_id = $1::text::uuid",
            &run_id.to_string(),
            bound,
        )
        .await
    }

    /// How many milliseconds `owner`'s term `epoch` of the lease of `run_id` has left on the
    /// database clock now (`None` when it is not that term's or has lapsed). Recorded in the
    /// timeline: a row whose later step depends on "A still holds" shows that A did.
    pub async fn lease_left_ms(&self, run_id: Uuid, owner: &str, epoch: i64) -> Result<Option<i64>, HarnessError> {
        let left: Option<i64> = sqlx::query_scalar(
            "SELECT (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint FROM worker_leases \
             WHERE run_id = $1::text::uuid AND owner = $2 AND epoch = $3 AND expires_at > clock_timestamp()",
        )
        .bind(run_id.to_string())
        .bind(owner)
        .bind(epoch)
        .fetch_optional(&self.pool)
        .await?;
        self.timeline.record(
            "harness",
            "observed",
            "database",
            json!({ "lease_left_ms": left, "owner": owner, "epoch": epoch }),
        );
        Ok(left)
    }

    /// A step of the worker that holds the lease of `run_id` (a renewal, a start, a save): true
    /// when it succeeded. Refused while the lease was still live on the database clock at the
    /// answer, it is a refused legal step ([`HarnessError::StepRefused`], a FAIL). Refused once the
    /// lease had expired on the database clock, it proves nothing (the harness's command came
    /// after a short lease lapsed, as on a busy machine): false, recorded in the timeline, and
    /// the row decides what to try instead.
    pub async fn ok_while_live(&self, ev: &serde_json::Value, step: &str, run_id: Uuid) -> Result<bool, HarnessError> {
        self.ok_while_live_on(&self.pool, ev, step, run_id).await
    }

    /// [`Ctx::ok_while_live`] where the run lives in another database than the row's (`pool`:
    /// a server the row started itself, as N-restore's).
    pub async fn ok_while_live_on(
        &self,
        pool: &PgPool,
        ev: &serde_json::Value,
        step: &str,
        run_id: Uuid,
    ) -> Result<bool, HarnessError> {
        if ev["outcome"] == "ok" || ev["outcome"].as_str().is_none() {
            return require_ok(ev, step).map(|_| true);
        }
        let lapsed: Option<bool> = sqlx::query_scalar(
            "SELECT expires_at <= clock_timestamp() FROM worker_leases WHERE run_id = $1::text::uuid",
        )
        .bind(run_id.to_string())
        .fetch_optional(pool)
        .await?;
        if lapsed != Some(true) {
            return require_ok(ev, step).map(|_| true);
        }
        self.timeline.record("harness", "refused_after_lapse", step, json!({"answer": ev}));
        Ok(false)
    }

    /// [`Ctx::ok_while_live`] for a row that cannot try again: a step refused after the lease
    /// lapsed on the database clock leaves the row without a verdict ([`HarnessError::Inconclusive`],
    /// STARVED when the harness measured itself starved), never a FAIL.
    pub async fn require_ok_while_live(
        &self,
        ev: &serde_json::Value,
        step: &str,
        run_id: Uuid,
    ) -> Result<(), HarnessError> {
        self.require_ok_while_live_on(&self.pool, ev, step, run_id).await
    }

    /// [`Ctx::require_ok_while_live`] on another database than the row's (see [`Ctx::ok_while_live_on`]).
    pub async fn require_ok_while_live_on(
        &self,
        pool: &PgPool,
        ev: &serde_json::Value,
        step: &str,
        run_id: Uuid,
    ) -> Result<(), HarnessError> {
        if self.ok_while_live_on(pool, ev, step, run_id).await? {
            return Ok(());
        }
        Err(HarnessError::Inconclusive(format!(
            "{step} was refused ({}) after the lease had lapsed on the database clock",
            outcome(ev)
        )))
    }

    /// Wait until the dispatch claim on `operation_id` has expired on the database clock.
    pub async fn wait_claim_expired(&self, operation_id: &str) -> Result<(), HarnessError> {
        self.wait_db_true(
            "the dispatch claim to expire on the database clock",
            "SELECT coalesce(dispatch_until <= clock_timestamp(), false) FROM tool_operations WHERE operation_id = $1",
            operation_id,
        )
        .await
    }

    async fn wait_db_true(&self, what: &str, sql: &str, arg: &str) -> Result<(), HarnessError> {
        self.wait_db_true_within(what, sql, arg, STEP).await
    }

    async fn wait_db_true_within(&self, what: &str, sql: &str, arg: &str, bound: Duration) -> Result<(), HarnessError> {
        let pool = self.pool.clone();
        wait::until(what, bound, || {
            let pool = pool.clone();
            async move {
                let done: bool = sqlx::query_scalar(sql).bind(arg).fetch_one(&pool).await?;
                Ok(done.then_some(()))
            }
        })
        .await?;
        self.timeline.record("harness", "observed", "database", serde_json::json!({ "condition": what }));
        Ok(())
    }

    /// The ledger row of `operation_id` as the database has it.
    pub async fn operation(&self, operation_id: &str) -> Result<serde_json::Value, HarnessError> {
        Ok(sqlx::query_scalar("SELECT to_jsonb(o) FROM tool_operations o WHERE operation_id = $1")
            .bind(operation_id)
            .fetch_optional(&self.pool)
            .await?
            .unwrap_or(serde_json::Value::Null))
    }

    /// The trace id every process of this experiment logs with: the run folder and experiment.
    pub fn trace_id(&self) -> String {
        let run =
            self.dir.parent().and_then(|p| p.file_name()).map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        format!("{run}/{}", self.id)
    }

    /// A stale worker `w` tries everything after a takeover (see [`stale_attempts`]; `before` is
    /// the run and lease right after the takeover, at oracle mark `takeover`): judge that nothing of
    /// it committed and that the current term's lease and the run are unchanged. Returns its
    /// attempts as `label=outcome` and how many of its commits came after the takeover.
    pub async fn judge_stale_after_takeover(
        &mut self,
        w: &mut WorkerProc,
        run_id: Uuid,
        takeover: i64,
        before: &fenceproof_harness::record::oracle::RunState,
        names: StaleChecks<'_>,
    ) -> Result<(Vec<String>, usize), HarnessError> {
        let current = before.run["revision"].as_i64().unwrap_or(-1);
        let mut attempts: Vec<String> =
            stale_attempts(w, current).await?.into_iter().map(|(l, o)| format!("{l}={o}")).collect();
        attempts.push(format!("acquire={}", stale_acquire(w, run_id).await?));
        let stale: Vec<_> =
            self.commits().await?.into_iter().filter(|c| c.seq > takeover && c.writer == w.owner).collect();
        self.check(
            Check::expect(
                names.nothing_commits,
                stale.is_empty(),
                format!(
                    "{} commits by {} after the takeover (#{takeover}){}; it was told: {}",
                    stale.len(),
                    w.name,
                    stale.first().map(|c| format!(", first #{} on {}", c.seq, c.table_name)).unwrap_or_default(),
                    attempts.join(" ")
                ),
            )
            .citing(stale.iter().map(|c| c.seq)),
        );
        let after = fenceproof_harness::record::oracle::run_state(&self.pool, run_id).await?;
        self.check(Check::expect(
            names.rows_unchanged,
            before.lease["epoch"] == after.lease["epoch"]
                && before.lease["owner"] == after.lease["owner"]
                && before.run["revision"] == after.run["revision"]
                && before.run["status"] == after.run["status"],
            format!(
                "before: lease {} run {}; after: lease {} run {}",
                before.lease, before.run, after.lease, after.run
            ),
        ));
        Ok((attempts, stale.len()))
    }

    pub fn check(&mut self, c: Check) {
        self.checks.push(c);
    }

    pub fn note(&mut self, s: impl Into<String>) {
        self.notes.push(s.into());
    }

    /// The oracle's highest commit sequence number so far (0 when none).
    pub async fn oracle_mark(&self) -> Result<i64, HarnessError> {
        let sql = format!("SELECT coalesce(max(seq), 0) FROM {}.commits", self.oracle_schema);
        Ok(sqlx::query_scalar(&sql).fetch_one(&self.pool).await?)
    }

    /// Every commit the oracle recorded in this experiment's database, in commit order.
    pub async fn commits(&self) -> Result<Vec<fenceproof_harness::record::oracle::CommitRow>, HarnessError> {
        fenceproof_harness::record::oracle::commits_in(&self.pool, &self.oracle_schema).await
    }
}

/// The outcome field of a worker's answer.
/// The folder of a row's second database's processes (their events, stderr, tools' ledger):
/// the part of its name after the row's own, `<row db>_lane1` → `lane1`.
pub fn database_folder(database: &str) -> &str {
    database.rsplit('_').next().unwrap_or(database)
}

/// `url` naming database `database` instead of its own.
pub fn with_database(url: &str, database: &str) -> Result<String, HarnessError> {
    let mut u = url::Url::parse(url).map_err(|e| HarnessError::Other(format!("bad database URL: {e}")))?;
    u.set_path(&format!("/{database}"));
    Ok(u.to_string())
}

pub fn outcome(ev: &serde_json::Value) -> &str {
    ev["outcome"].as_str().unwrap_or("?")
}

/// Scrape a worker's metrics (Prometheus text), saving them as `metrics-<name>.prom` in `dir`.
pub async fn scrape(w: &mut WorkerProc, dir: &std::path::Path) -> Result<String, HarnessError> {
    let ev = w.request(serde_json::json!({"cmd": "metrics"}), STEP).await?;
    let text = ev["data"]["text"].as_str().unwrap_or_default().to_string();
    std::fs::write(dir.join(format!("metrics-{}.prom", w.name)), &text)?;
    Ok(text)
}

/// A scripted worker's task (the worker contract's `--script` mode): the values of its flags,
/// which the contract's Flags table turns into its command line.
pub use fenceproof_harness::procs::flags::{Launch, Script};

/// How a row starts a worker: its mode ([`Launch`]) and further arguments. A plain argument list
/// starts a worker in commands mode; a [`Script`] starts a scripted one.
pub struct Start {
    pub launch: Launch,
    pub extra: Vec<String>,
}

impl From<Vec<String>> for Start {
    fn from(extra: Vec<String>) -> Start {
        Start { launch: Launch::Commands, extra }
    }
}

impl From<Launch> for Start {
    fn from(launch: Launch) -> Start {
        Start { launch, extra: Vec::new() }
    }
}

impl From<Script> for Start {
    fn from(s: Script) -> Start {
        Launch::Scripted(s).into()
    }
}

/// The `data` field of a worker's answer.
pub fn data(ev: &serde_json::Value) -> &serde_json::Value {
    &ev["data"]
}

/// Stop the experiment when a step the harness set up legally did not succeed. An answer with an
/// outcome other than `ok` means the code under test refused (or failed) a step the protocol must
/// allow: the runner records it as a FAIL of rule `liveness.legal-step` ([`HarnessError::StepRefused`]).
/// An answer without an outcome is the worker breaking its language: no verdict (ERROR).
pub fn require_ok(ev: &serde_json::Value, step: &str) -> Result<(), HarnessError> {
    match ev["outcome"].as_str() {
        Some("ok") => Ok(()),
        Some(_) => Err(HarnessError::StepRefused { step: step.to_string(), answer: ev.to_string() }),
        None => Err(HarnessError::Other(format!("setup step {step}: the worker's answer has no outcome: {ev}"))),
    }
}

/// The check a refused legal step becomes (see [`require_ok`]).
pub const LEGAL_STEP_CHECK: &str = "a step the protocol must allow succeeds";

/// The check of the rows that need the worker login (P-role, P-api) on a backend without one.
pub const WORKER_LOGIN_EXISTS: &str = "the worker login exists";

/// The check of the rows where B takes over an expired lease from A (I-renew, K-backward, M).
pub const TAKEOVER_IS_NEXT_EPOCH: &str = "B's takeover is A's epoch + 1";
