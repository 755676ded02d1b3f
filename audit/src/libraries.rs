//! The job queues and durable-execution engines the audit knows: one line each, beside its adapter
//! in `audit/adapters/`. Adding a library is an adapter (a Python file `lib_<name>.py`, or a
//! package of the Rust workspace `audit/adapters/rust/`, both speaking the three commands of
//! `audit/adapters/common.py`) and a line in [`LIBRARIES`].

use std::time::Duration;

use fenceproof_harness::check::audit::Success;

use crate::settings::{Production, Settings, Timing};

/// The experiment that needs a checkpoint table.
pub const CHECKPOINT_EXPERIMENT: &str = "checkpoint-early";

/// The experiment whose reason, when a library gives one, covers every experiment asking for a retry.
pub const RETRY_EXPERIMENT: &str = "pause-early-retry";

/// Where the held-write experiment holds the stale worker's outcome write inside the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldAt {
    /// A statement trigger on the job table, for A's session only and only for a client statement
    /// matching this case-insensitive regex (the library's outcome call as it sends it, not its
    /// polls or heartbeats): the write waits before it reads or locks a row
    /// (`harness/sql/held_write.sql`).
    Trigger(&'static str),
    /// The harness's key-share hold on the row (table, key column, keyed by the job id) the
    /// write locks `FOR UPDATE` before its check: the write waits before its check, while an
    /// UPDATE of that row (the takeover) goes on.
    KeyShare(&'static str, &'static str),
}

/// A lock of the library's own recovery that a worker paused at the wrong moment keeps, and with
/// it every other worker's recovery: the cells pause A outside it (resumed and paused again until
/// A does not hold it), and say how often that took.
#[derive(Debug, Clone, Copy)]
pub struct RecoveryLock {
    /// What it is, for the timeline and the pages.
    pub what: &'static str,
    /// SQL answering whether a session named `$1` holds it.
    pub held_by: &'static str,
}

/// A library's table of live workers and their heartbeats.
#[derive(Debug, Clone, Copy)]
pub struct Registry {
    /// The table (schema-qualified).
    pub table: &'static str,
    /// The column naming the worker in a row.
    pub key: &'static str,
    /// The key is the worker's name as the adapter gives it (`--owner`): a worker restarted under
    /// the same name shares the registration (and its heartbeat) with the one it replaces; else the
    /// library numbers its workers itself.
    pub named: bool,
    /// What the library does with the registry that a cell's outcome hangs on, for the pages.
    pub why: &'static str,
}

/// How the adapter runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// A Python file in the adapters folder, run with the audit's Python environment.
    Python,
    /// A binary of the Rust workspace `audit/adapters/rust/`, built when the audit runs.
    Rust,
}

#[derive(Debug, Clone, Copy)]
pub struct Library {
    /// Its name on the command line and in the report.
    pub name: &'static str,
    /// The pinned version (`audit/requirements.txt`); the findings name it.
    pub version: &'static str,
    /// How its adapter runs.
    pub runtime: Runtime,
    /// The adapter: a file in the adapters folder (Python) or a binary name (Rust).
    pub adapter: &'static str,
    /// The job table the commit triggers watch (schema-qualified).
    pub table: &'static str,
    /// The job row's status column.
    pub status_column: &'static str,
    /// Status values meaning "claimed by a worker and running".
    pub claimed: &'static [&'static str],
    /// What a successful job looks like in the table.
    pub success: Success,
    /// The database needs the protocol's schema (cloned from the migrated template).
    pub protocol_schema: bool,
    /// The fast settings the adapter configures (the stall threshold: a heartbeat older than
    /// `stall_s` is stale), the tightest the library allows.
    pub fast: Timing,
    /// How long its recovery may take to hand the job to B (B's START) at the fast settings, in
    /// seconds (at production settings the bound follows the timing: [`Timing::takeover`]).
    pub takeover_s: u64,
    /// How the library recovers a stalled job, as configured at the fast settings.
    pub recovery: &'static str,
    /// Its documented production defaults, with where each comes from.
    pub production: Production,
    /// Whether the completion of a job is fenced against a worker that lost it, by the library's design.
    pub completion_guard: &'static str,
    /// The control row (the reference protocol), expected to pass everything.
    pub control: bool,
    /// The table its checkpoint/progress records of a running job go to, when it has them.
    pub checkpoint_table: Option<&'static str>,
    /// Where the held-write experiment holds A's outcome write.
    pub held_at: HeldAt,
    /// The rows the library's takeover writes (what a held write of A could block).
    pub takeover_touches: &'static str,
    /// A lock of its recovery a paused worker can keep from everyone (A is paused outside it).
    pub recovery_lock: Option<RecoveryLock>,
    /// Its registry of live workers, when a cell's outcome hangs on it: watched by the commit
    /// triggers in every cell, read back for the cell's note (`crate::registry`).
    pub registry: Option<Registry>,
    /// The library's table of task results, when it keeps the outcome apart from the queue row
    /// (table, the column that says how the task ended): its commits are judged with the job
    /// table's, each status read as `column=value`.
    pub results_table: Option<(&'static str, &'static str)>,
    /// The settings the library warns against, whether the audit runs at one, and which cells
    /// (the pages' settings paragraph says it; empty when the audit knows of no such warning).
    pub warns: &'static str,
    /// Its worker is a tree of processes (a django-q2 `qcluster`: the Sentinel forks pusher,
    /// workers and monitor): the harness pauses and resumes the worker's whole process group.
    pub process_tree: bool,
    /// Experiments the library's design does not allow, each with the reason (reported instead of
    /// a verdict).
    pub not_applicable: &'static [(&'static str, &'static str)],
}

impl Library {
    /// The numbers of its stall recovery under `settings`.
    pub fn timing(&self, settings: Settings) -> Timing {
        match settings {
            Settings::Fast => self.fast,
            Settings::Production => self.production.timing,
        }
    }

    /// How long its recovery may take to hand a stalled job to B under `settings`.
    pub fn takeover(&self, settings: Settings) -> Duration {
        match settings {
            Settings::Fast => Duration::from_secs(self.takeover_s),
            Settings::Production => self.production.timing.takeover(),
        }
    }

    /// How long a live worker's long job runs before "nobody took over" is the answer.
    pub fn long_job(&self, settings: Settings) -> Duration {
        match settings {
            Settings::Fast => Duration::from_secs_f64((self.fast.stall_s * 5.0).max(10.0)),
            Settings::Production => self.production.timing.long_job(),
        }
    }

    /// Why `experiment` does not apply to this library, when it does not.
    pub fn not_applicable(&self, experiment: &str) -> Option<&'static str> {
        let find = |id: &str| self.not_applicable.iter().find(|(e, _)| *e == id).map(|(_, why)| *why);
        // A library without a retry request (its `pause-early-retry` reason) cannot take part in
        // any experiment where a worker asks for one.
        let asks_retry = crate::experiments::EXPERIMENTS.iter().any(|e| e.id == experiment && e.asks_retry());
        find(experiment).or_else(|| asks_retry.then(|| find(RETRY_EXPERIMENT)).flatten()).or_else(|| {
            (experiment == CHECKPOINT_EXPERIMENT && self.checkpoint_table.is_none())
                .then_some("the library keeps no checkpoint or progress record of a running job")
        })
    }
}

/// graphile_worker's sweep takes `pg_try_advisory_xact_lock(0x47575253, 0x53574550)` in a
/// transaction; a worker paused inside it keeps the lock, and every other worker's sweep skips.
const GRAPHILE_SWEEP_LOCK: RecoveryLock = RecoveryLock {
    what: "graphile_worker's sweep lock (advisory 0x47575253/0x53574550, taken for each sweep's transaction)",
    held_by: "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
               WHERE a.application_name = $1 AND l.locktype = 'advisory' AND l.granted
                 AND l.classid = 1196905043 AND l.objid = 1398228304 AND l.objsubid = 2)",
};

pub const LIBRARIES: &[Library] = &[
    Library {
        name: "reference",
        version: "fenceproof protocol (migrations 0001-0003)",
        runtime: Runtime::Python,
        adapter: "lib_reference.py",
        table: "public.agent_runs",
        status_column: "status",
        claimed: &["running"],
        success: Success::Status("succeeded"),
        protocol_schema: true,
        fast: Timing { stall_s: 2.0, heartbeat_s: 0.5, sweep_s: 0.2, extra_s: 0.0 },
        takeover_s: 60,
        recovery: "lease expiry (TTL 2 s, renewed every 0.5 s); a new acquire raises the epoch",
        production: Production {
            timing: Timing { stall_s: 30.0, heartbeat_s: 7.5, sweep_s: 0.2, extra_s: 0.0 },
            defaults: "none to state: the protocol has no default lease TTL (fp_lease_acquire and fp_lease_renew take p_ttl_ms from each call, migrations/0002); production runs use a 30 s TTL renewed every TTL/4, as the reference worker renews",
            deviation: "",
        },
        completion_guard: "fp_run_transition checks owner, epoch and expiry under the lease row lock",
        control: true,
        checkpoint_table: Some("public.agent_runs"),
        held_at: HeldAt::KeyShare("public.worker_leases", "run_id"),
        takeover_touches: "the lease row (fp_lease_acquire: owner, epoch, expiry) and the run row (B's running -> running transition)",
        recovery_lock: None,
        registry: None,
        warns: "",
        results_table: None,
        process_tree: false,
        not_applicable: &[],
    },
    Library {
        name: "procrastinate",
        version: "3.10.0",
        runtime: Runtime::Python,
        adapter: "lib_procrastinate.py",
        table: "public.procrastinate_jobs",
        status_column: "status",
        claimed: &["doing"],
        success: Success::Status("succeeded"),
        protocol_schema: false,
        fast: Timing { stall_s: 2.0, heartbeat_s: 0.5, sweep_s: 0.25, extra_s: 0.0 },
        takeover_s: 60,
        recovery: "documented recipe: get_stalled_jobs(seconds_since_heartbeat=2) + retry_job, every 0.25 s; heartbeat every 0.5 s",
        production: Production {
            timing: Timing { stall_s: 30.0, heartbeat_s: 10.0, sweep_s: 5.0, extra_s: 0.0 },
            defaults: "heartbeat every 10 s (`procrastinate/worker.py` Worker.__init__: `update_heartbeat_interval: float = 10.0`); a job is stalled once its worker's heartbeat is 30 s old (`procrastinate/manager.py` JobManager.get_stalled_jobs: `seconds_since_heartbeat: float = 30`); the documented recipe (howto/production/retry_stalled_jobs) calls get_stalled_jobs() and retry_job from a periodic task every 10 minutes (`cron=\"*/10 * * * *\"`)",
            deviation: "the recipe's pass runs every 5 s, not every 10 minutes: the cadence only decides how long after the threshold the takeover comes (a pause that outlasts 30 s is taken over at the next pass), and cells of ten minutes each are not affordable",
        },
        completion_guard: "status check only (the job must be doing)",
        control: false,
        checkpoint_table: None,
        held_at: HeldAt::Trigger("procrastinate_finish_job"),
        takeover_touches: "the job row (retry_job: doing -> todo; B's fetch: todo -> doing)",
        recovery_lock: None,
        registry: Some(Registry {
            table: "public.procrastinate_workers",
            key: "id",
            named: false,
            why: "a worker starting prunes the workers whose heartbeat is older than its stalled_worker_timeout (procrastinate's default 30 s here); a job's worker_id references its worker's row, so a pruned worker cannot claim a job again",
        }),
        warns: "`JobManager.get_stalled_jobs` (`procrastinate/manager.py`) asks that `update_heartbeat_interval` and `stalled_worker_timeout` be checked when its threshold changes: here the heartbeat (0.5 s) is well inside the 2 s threshold and `stalled_worker_timeout` keeps its 30 s default, so no cell runs at a setting it warns against",
        results_table: None,
        process_tree: false,
        not_applicable: &[],
    },
    Library {
        name: "pgqueuer",
        version: "1.6.0",
        runtime: Runtime::Python,
        adapter: "lib_pgqueuer.py",
        table: "public.pgqueuer",
        status_column: "status",
        claimed: &["picked"],
        success: Success::Deleted,
        protocol_schema: false,
        fast: Timing { stall_s: 2.0, heartbeat_s: 1.0, sweep_s: 0.5, extra_s: 0.0 },
        takeover_s: 60,
        recovery: "built in: dequeue re-picks a picked job whose heartbeat is older than heartbeat_timeout=2 s",
        production: Production {
            timing: Timing { stall_s: 30.0, heartbeat_s: 15.0, sweep_s: 30.0, extra_s: 0.0 },
            defaults: "`pgqueuer/core/applications.py` PgQueuer.run: `heartbeat_timeout: timedelta = timedelta(seconds=30)` and `dequeue_timeout: timedelta = timedelta(seconds=30)`; a running job's heartbeat is refreshed every heartbeat_timeout / 2 (`pgqueuer/core/qm.py` QueueManager._dispatch)",
            deviation: "",
        },
        completion_guard: "none (the row is deleted by id)",
        control: false,
        checkpoint_table: None,
        held_at: HeldAt::Trigger("delete\\s+from\\s+pgqueuer"),
        takeover_touches: "the job row (dequeue re-picks it: status, heartbeat)",
        recovery_lock: None,
        registry: None,
        warns: "",
        results_table: None,
        process_tree: false,
        not_applicable: &[],
    },
    Library {
        name: "chancy",
        version: "0.26.0",
        runtime: Runtime::Python,
        adapter: "lib_chancy.py",
        table: "public.chancy_jobs",
        status_column: "state",
        claimed: &["running"],
        success: Success::Status("succeeded"),
        protocol_schema: false,
        fast: Timing { stall_s: 2.0, heartbeat_s: 1.0, sweep_s: 1.0, extra_s: 0.0 },
        // Its recovery takes over within a few seconds; under the same name the new worker's
        // heartbeats keep the paused one's job owned, and the cell says so within this bound.
        takeover_s: 20,
        recovery: "Recovery plugin (poll 1 s, leader only) with heartbeat_timeout=2 s; a new claim_id per claim",
        production: Production {
            timing: Timing { stall_s: 90.0, heartbeat_s: 30.0, sweep_s: 60.0, extra_s: 60.0 },
            defaults: "`chancy/worker.py` Worker.__init__: `heartbeat_poll_interval: int = 30`, `heartbeat_timeout: int = 90`; `chancy/plugins/recovery.py` Recovery.__init__: `poll_interval: int = 60`, run by the leader only (`chancy/plugins/leadership.py` Leadership.__init__: `poll_interval: int = 60, timeout: int = 60 * 2`)",
            deviation: "",
        },
        completion_guard: "claim_id (the update matches the claim it ran under)",
        control: false,
        checkpoint_table: None,
        held_at: HeldAt::Trigger("completed_at"),
        takeover_touches: "the job row (recovery: running -> pending; B's claim with a new claim_id)",
        recovery_lock: None,
        registry: Some(Registry {
            table: "public.chancy_workers",
            key: "worker_id",
            named: true,
            why: "the Recovery plugin takes back only the running jobs of a worker id whose last_seen is older than heartbeat_timeout; a worker started under the same worker_id refreshes that id's last_seen",
        }),
        warns: "",
        results_table: None,
        process_tree: false,
        not_applicable: &[],
    },
    Library {
        name: "dbos",
        version: "3.4.0",
        runtime: Runtime::Python,
        adapter: "lib_dbos.py",
        table: "dbos.workflow_status",
        status_column: "status",
        claimed: &["PENDING"],
        success: Success::Status("SUCCESS"),
        protocol_schema: false,
        fast: Timing { stall_s: 2.0, heartbeat_s: 0.0, sweep_s: 0.25, extra_s: 0.0 },
        takeover_s: 60,
        recovery: "explicit: the recovering worker calls the executor recovery for every other executor holding a PENDING workflow at once (DBOS has no heartbeat); startup recovery for its own executor id",
        production: Production {
            timing: Timing { stall_s: 2.0, heartbeat_s: 0.0, sweep_s: 0.25, extra_s: 0.0 },
            defaults: "no number to move: dbos-transact-py has no heartbeat and no stall threshold; a PENDING workflow is recovered by an executor starting under its executor id or by an explicit call (`dbos/_recovery.py` recover_pending_workflows, `dbos/_dbos.py` DBOS._recover_pending_workflows)",
            deviation: "the same as fast: there is no threshold to set",
        },
        completion_guard: "owner_xid (a new one per recovery) checked on step and outcome writes",
        control: false,
        checkpoint_table: Some("dbos.operation_outputs"),
        held_at: HeldAt::Trigger("workflow_status\\s+set\\s+status"),
        takeover_touches: "the workflow_status row (recovery: a new owner_xid and executor id)",
        recovery_lock: None,
        registry: None,
        warns: "",
        results_table: None,
        process_tree: false,
        not_applicable: &[
            ("pause-early-retry", "DBOS has no job-level retry request: a step's retries run inside the same execution"),
            ("long-job-success", "DBOS has no heartbeat: a live executor's workflows are recovered only when it is declared dead (Conductor, 60 s without its heartbeat to Conductor, or an operator); the adapter's recovery declares every other executor dead at once"),
        ],
    },
    Library {
        name: "absurd",
        version: "0.5.1 (absurd-sdk, absurdctl schema)",
        runtime: Runtime::Python,
        adapter: "lib_absurd.py",
        table: "absurd.t_audit",
        status_column: "state",
        claimed: &["running"],
        success: Success::Status("completed"),
        protocol_schema: false,
        fast: Timing { stall_s: 2.0, heartbeat_s: 0.5, sweep_s: 0.2, extra_s: 0.0 },
        takeover_s: 60,
        recovery: "built in: claim_timeout=2 s, extended by ctx.heartbeat() every 0.5 s; every claim sweeps expired runs into a new run",
        production: Production {
            timing: Timing { stall_s: 120.0, heartbeat_s: 60.0, sweep_s: 0.2, extra_s: 0.0 },
            defaults: "`absurd_sdk/__init__.py` Absurd.start_worker: `claim_timeout: int = 120`; the SDK's own heartbeat while a task waits is claim_timeout / 2 (TaskContext.await_task_result: `heartbeat_interval_ms = max(500, int((self._claim_timeout * 1000) / 2))`)",
            deviation: "",
        },
        completion_guard: "the run's state, read FOR UPDATE in complete_run/fail_run/extend_claim",
        control: false,
        checkpoint_table: Some("absurd.c_audit"),
        held_at: HeldAt::Trigger("complete_run"),
        takeover_touches: "the task row and the run rows (the expired run fails, a new run is claimed)",
        recovery_lock: None,
        registry: None,
        warns: "",
        results_table: None,
        process_tree: false,
        not_applicable: &[],
    },
    Library {
        name: "saq",
        version: "0.26.4",
        runtime: Runtime::Python,
        adapter: "lib_saq.py",
        table: "public.saq_jobs",
        status_column: "status",
        claimed: &["active"],
        success: Success::Status("complete"),
        protocol_schema: false,
        fast: Timing { stall_s: 2.0, heartbeat_s: 0.5, sweep_s: 1.0, extra_s: 5.0 },
        takeover_s: 60,
        recovery: "built in: the sweep (every 1 s, one worker at a time under a session advisory lock) aborts a job whose heartbeat (job.update() every 0.5 s) is older than heartbeat=2 s, waits up to 5 s, re-queues it",
        production: Production {
            timing: Timing { stall_s: 10.0, heartbeat_s: 0.0, sweep_s: 60.0, extra_s: 5.0 },
            defaults: "`saq/job.py` Job: `timeout: int = 10`, `heartbeat: int = 0` (disabled), so Job.stuck holds once an active job has run 10 s; `saq/worker.py` Worker.__init__: `\"sweep\": 60` in its timers; `saq/queue/postgres.py` PostgresQueue.sweep: `abort: float = 5.0` before it re-queues",
            deviation: "dequeue keeps the adapter's 0.25 s polling (poll_interval; saq's default 0 waits for a NOTIFY, and its re-queue, PostgresQueue._retry, sends none)",
        },
        completion_guard: "none (the job row is updated by key, whatever its status)",
        control: false,
        checkpoint_table: Some("public.saq_jobs"),
        held_at: HeldAt::Trigger("expire_at\\s*="),
        takeover_touches: "the job row (the sweep: active -> aborting -> queued; B's dequeue: active)",
        recovery_lock: None,
        registry: None,
        warns: "none known to the audit: `heartbeat` and `timeout=0` are documented options (`saq/job.py`, `Job`: \"0 means disabled\")",
        results_table: None,
        process_tree: false,
        not_applicable: &[],
    },
    Library {
        name: "saq_sweeper",
        version: "0.26.4 (the stalled worker holds the sweep lock)",
        runtime: Runtime::Python,
        adapter: "lib_saq_sweeper.py",
        table: "public.saq_jobs",
        status_column: "status",
        claimed: &["active"],
        success: Success::Status("complete"),
        protocol_schema: false,
        fast: Timing { stall_s: 2.0, heartbeat_s: 0.5, sweep_s: 1.0, extra_s: 5.0 },
        takeover_s: 20,
        recovery: "as saq's line, but A, started first, sweeps too and keeps the sweep lock (a session advisory lock `PostgresQueue.sweep` takes once and never lets go): B's sweeps return at once",
        production: Production {
            timing: Timing { stall_s: 10.0, heartbeat_s: 0.0, sweep_s: 60.0, extra_s: 5.0 },
            defaults: "`saq/job.py` Job: `timeout: int = 10`, `heartbeat: int = 0` (disabled), so Job.stuck holds once an active job has run 10 s; `saq/worker.py` Worker.__init__: `\"sweep\": 60` in its timers; `saq/queue/postgres.py` PostgresQueue.sweep: `abort: float = 5.0` before it re-queues",
            deviation: "dequeue keeps the adapter's 0.25 s polling (poll_interval; saq's default 0 waits for a NOTIFY, and its re-queue, PostgresQueue._retry, sends none)",
        },
        completion_guard: "none (the job row is updated by key, whatever its status)",
        control: false,
        checkpoint_table: Some("public.saq_jobs"),
        held_at: HeldAt::Trigger("expire_at\\s*="),
        takeover_touches: "the job row (the sweep: active -> aborting -> queued; B's dequeue: active)",
        recovery_lock: None,
        registry: None,
        warns: "none known to the audit: `heartbeat` and `timeout=0` are documented options (`saq/job.py`, `Job`: \"0 means disabled\")",
        results_table: None,
        process_tree: false,
        not_applicable: &[],
    },
    Library {
        name: "django_q2",
        version: "1.11.1 (ORM broker, Django 5.2.19)",
        runtime: Runtime::Python,
        adapter: "lib_django_q2.py",
        table: "public.django_q_ormq",
        status_column: "lock",
        claimed: &[],
        success: Success::Deleted,
        protocol_schema: false,
        fast: Timing { stall_s: 25.0, heartbeat_s: 0.0, sweep_s: 0.2, extra_s: 0.0 },
        takeover_s: 90,
        recovery: "built in, no heartbeat: the ORM broker's dequeue re-delivers a task whose lock (pulled at + retry=25 s) passed; run as `qcluster` with timeout=20 s < retry, as django-q2 asks",
        production: Production {
            timing: Timing { stall_s: 60.0, heartbeat_s: 0.0, sweep_s: 0.2, extra_s: 0.0 },
            defaults: "`django_q/conf.py` Conf: `RETRY = conf.get(\"retry\", 60)` (a pulled task is delivered again 60 s later unless acknowledged), `POLL = conf.get(\"poll\", 0.2)`, `TIMEOUT = conf.get(\"timeout\", None)` with the warning \"Retry and timeout are misconfigured\" when timeout is unset or larger than retry; no heartbeat",
            deviation: "timeout is set to retry - 5 s (55 s), as the warning asks: django-q2 has no default for it",
        },
        completion_guard: "none (acknowledge deletes the queue row by primary key)",
        control: false,
        checkpoint_table: None,
        held_at: HeldAt::Trigger("delete\\s+from\\s+\"django_q_ormq\""),
        takeover_touches: "the queue row (B's dequeue: lock)",
        recovery_lock: None,
        registry: None,
        warns: "`django_q/conf.py` warns \"Retry and timeout are misconfigured\" unless timeout < retry: the cells published from 2026-12-07 run at timeout = retry - 5 s; the cells published before ran with timeout unset, the setting it warns against",
        results_table: Some(("public.django_q_task", "success")),
        process_tree: true,
        not_applicable: &[],
    },
    Library {
        name: "sqlxmq",
        version: "0.6.0",
        runtime: Runtime::Rust,
        adapter: "audit-sqlxmq",
        table: "public.mq_msgs",
        status_column: "attempts",
        claimed: &[],
        success: Success::Deleted,
        protocol_schema: false,
        fast: Timing { stall_s: 2.0, heartbeat_s: 0.5, sweep_s: 0.2, extra_s: 0.0 },
        takeover_s: 60,
        recovery: "built in: a poll takes a message whose attempt_at passed; retry_backoff=2 s is the visibility timeout, pushed on by the runner's keep-alive",
        production: Production {
            timing: Timing { stall_s: 1.0, heartbeat_s: 0.5, sweep_s: 0.2, extra_s: 0.0 },
            defaults: "`sqlxmq/src/spawn.rs` JobBuilder::new_with_id: `retry_backoff: Duration::from_secs(1)`, `retries: 4` (the backoff doubles per attempt): the default visibility timeout is 1 s, tighter than the fast settings' 2 s",
            deviation: "",
        },
        completion_guard: "none (mq_delete, mq_checkpoint and mq_keep_alive by message id)",
        control: false,
        checkpoint_table: Some("public.mq_payloads"),
        held_at: HeldAt::Trigger("mq_delete"),
        takeover_touches: "the message row (B's poll: attempt_at, attempts)",
        recovery_lock: None,
        registry: None,
        warns: "",
        results_table: None,
        process_tree: false,
        not_applicable: &[],
    },
    Library {
        name: "underway",
        version: "0.2.0",
        runtime: Runtime::Rust,
        adapter: "audit-underway",
        table: "underway.task",
        status_column: "state",
        claimed: &["in_progress"],
        success: Success::Status("succeeded"),
        protocol_schema: false,
        fast: Timing { stall_s: 2.0, heartbeat_s: 2.0, sweep_s: 0.2, extra_s: 0.0 },
        // The stalled worker's transaction (and its advisory lock) stays open while it is paused:
        // a takeover may never come, and the cell says so within this bound.
        takeover_s: 15,
        recovery: "built in: dequeue takes an in_progress task whose heartbeat (every 2 s) is older than 2 s, while attempts remain",
        production: Production {
            timing: Timing { stall_s: 30.0, heartbeat_s: 30.0, sweep_s: 0.2, extra_s: 0.0 },
            defaults: "`underway/src/task.rs` Task::heartbeat: `30.seconds()`; dequeue takes an in-progress task whose `last_heartbeat_at < now() - heartbeat` (`underway/src/queue.rs` Queue::dequeue)",
            deviation: "",
        },
        completion_guard: "a transaction-level advisory lock on the task id, taken by the executing transaction",
        control: false,
        checkpoint_table: None,
        held_at: HeldAt::Trigger("completed_at"),
        takeover_touches: "the task row (B's dequeue: state, heartbeat) and its advisory lock",
        recovery_lock: None,
        registry: None,
        warns: "",
        results_table: None,
        process_tree: false,
        not_applicable: &[],
    },
    Library {
        name: "apalis",
        version: "1.0.0 (+ apalis-postgres 1.0.0)",
        runtime: Runtime::Rust,
        adapter: "audit-apalis",
        table: "apalis.jobs",
        status_column: "status",
        claimed: &["Running", "Queued"],
        success: Success::Status("Done"),
        protocol_schema: false,
        fast: Timing { stall_s: 2.0, heartbeat_s: 1.0, sweep_s: 1.0, extra_s: 0.0 },
        // Under the same name the new worker's heartbeats keep the paused one's job owned: the
        // takeover may never come, and the cell says so within this bound.
        takeover_s: 15,
        recovery: "built in: heartbeat every 1 s, missed_heartbeats=2; every worker's heartbeat re-enqueues the jobs of workers silent 2 s (reenqueue_orphaned)",
        production: Production {
            timing: Timing { stall_s: 60.0, heartbeat_s: 30.0, sweep_s: 30.0, extra_s: 0.0 },
            defaults: "`apalis-postgres/src/config.rs`: `heartbeat_interval` 30 s, `missed_heartbeats` 2 as its doc comment and serde default say (default_missed_heartbeats), a 60 s threshold; Config::default itself sets `missed_heartbeats: 10` (300 s), and the adapter sets 2 explicitly",
            deviation: "",
        },
        completion_guard: "lock_by = the worker's name (its owner id)",
        control: false,
        checkpoint_table: None,
        held_at: HeldAt::Trigger("last_result"),
        takeover_touches: "the job row (reenqueue_orphaned: status, lock_by; B's fetch)",
        recovery_lock: None,
        registry: None,
        warns: "",
        results_table: None,
        process_tree: false,
        not_applicable: &[],
    },
    Library {
        name: "graphile_worker",
        version: "0.14.1",
        runtime: Runtime::Rust,
        adapter: "audit-graphile",
        table: "graphile_worker._private_jobs",
        status_column: "attempts",
        claimed: &[],
        success: Success::Deleted,
        protocol_schema: false,
        fast: Timing { stall_s: 2.0, heartbeat_s: 0.5, sweep_s: 0.5, extra_s: 0.0 },
        takeover_s: 20,
        recovery: "optional dead-worker recovery, tightest: heartbeat 0.5 s, sweep 0.5 s, threshold 2 s, recovery_delay 0",
        production: Production {
            timing: Timing { stall_s: 300.0, heartbeat_s: 30.0, sweep_s: 60.0, extra_s: 30.0 },
            defaults: "`graphile_worker_recovery/src/config.rs` WorkerRecoveryConfig::default: `heartbeat_interval: Duration::from_secs(30)`, `sweep_interval: Duration::from_secs(60)`, `sweep_threshold: Duration::from_secs(5 * 60)`, `recovery_delay: Duration::from_secs(30)`, `enabled: false`",
            deviation: "recovery is off by default (enabled: false); a production run turns it on with its default timings",
        },
        completion_guard: "completion deletes by job id; failure matches locked_by (the worker id)",
        control: false,
        checkpoint_table: None,
        held_at: HeldAt::Trigger("delete\\s+from\\s+graphile_worker\\._private_jobs"),
        takeover_touches: "the job row (the sweep clears locked_by, locked_at; B's claim) and the workers row",
        recovery_lock: Some(GRAPHILE_SWEEP_LOCK),
        registry: None,
        warns: "none known to the audit; recovery is off by default (`WorkerRecoveryConfig`, `enabled: false`) and the audit turns it on",
        results_table: None,
        process_tree: false,
        not_applicable: &[(
            "same-name-early-success",
            "the worker id is random per worker instance (graphile_worker_<hex>); the library offers no way to reuse one",
        )],
    },
    Library {
        name: "pgmq",
        version: "0.33.7 (crate; pgmq SQL 1.11.1 without the extension)",
        runtime: Runtime::Rust,
        adapter: "audit-pgmq",
        table: "pgmq.q_audit",
        status_column: "read_ct",
        claimed: &[],
        success: Success::Deleted,
        protocol_schema: false,
        fast: Timing { stall_s: 2.0, heartbeat_s: 0.5, sweep_s: 0.2, extra_s: 0.0 },
        takeover_s: 60,
        recovery: "built in: read makes a message invisible for vt=2 s, the consumer's set_vt every 0.5 s pushes it on; any consumer's read takes a visible message",
        production: Production {
            timing: Timing { stall_s: 30.0, heartbeat_s: 0.0, sweep_s: 0.2, extra_s: 0.0 },
            defaults: "`pgmq/src/types.rs`: `pub const VT_DEFAULT: i32 = 30`, the visibility timeout of PGMQueue::read when the caller gives none (`pgmq/src/lib.rs`); the crate sends no set_vt heartbeat of its own",
            deviation: "",
        },
        completion_guard: "none (delete, archive and set_vt name the message by id)",
        control: false,
        checkpoint_table: None,
        held_at: HeldAt::Trigger("pgmq\\.(delete|archive)"),
        takeover_touches: "the message row (B's read: vt, read_ct)",
        recovery_lock: None,
        registry: None,
        warns: "",
        results_table: None,
        process_tree: false,
        not_applicable: &[],
    },
    Library {
        name: "fang",
        version: "0.11.0 (async worker, sqlx)",
        runtime: Runtime::Rust,
        adapter: "audit-fang",
        table: "public.fang_tasks",
        status_column: "state",
        claimed: &["in_progress"],
        success: Success::Status("finished"),
        protocol_schema: false,
        fast: Timing { stall_s: 2.0, heartbeat_s: 0.0, sweep_s: 0.2, extra_s: 0.0 },
        // fang never fetches an in_progress task again: the takeover never comes, and the cell
        // says so within this bound.
        takeover_s: 10,
        recovery: "none: a fetch takes only new and retried tasks (fetch_task_type.sql); an in_progress task stays with its worker",
        production: Production {
            timing: Timing { stall_s: 2.0, heartbeat_s: 0.0, sweep_s: 0.2, extra_s: 0.0 },
            defaults: "no number to move: fang has no stall recovery (`fang/src/asynk/queries_postgres/fetch_task_type.sql` takes only new and retried tasks)",
            deviation: "the same as fast: there is no threshold to set",
        },
        completion_guard: "none (update_task_state by task id)",
        control: false,
        checkpoint_table: None,
        held_at: HeldAt::Trigger("update\\s+\"fang_tasks\"\\s+set\\s+\"state\""),
        takeover_touches: "the task row (a fetch: new or retried -> in_progress)",
        recovery_lock: None,
        registry: None,
        warns: "",
        results_table: None,
        process_tree: false,
        not_applicable: &[(
            "kill-control",
            "fang recovers no task of a dead worker: a fetch takes only new and retried tasks (fetch_task_type.sql), so a killed worker's in_progress task is never run again",
        )],
    },
    Library {
        name: "django_tasks",
        version: "0.12.0 (django-tasks with django-tasks-db 0.13.0, Django 5.2.19)",
        runtime: Runtime::Python,
        adapter: "lib_django_tasks.py",
        table: "public.django_tasks_database_dbtaskresult",
        status_column: "status",
        claimed: &["RUNNING"],
        success: Success::Status("SUCCESSFUL"),
        protocol_schema: false,
        fast: Timing { stall_s: 2.0, heartbeat_s: 0.0, sweep_s: 0.2, extra_s: 0.0 },
        // Nothing recovers a RUNNING task: the takeover never comes, and the cell says so within
        // this bound.
        takeover_s: 10,
        recovery: "none: `db_worker` takes only READY tasks (`DBTaskResultQuerySet.ready`); a RUNNING task stays with its worker",
        production: Production {
            timing: Timing { stall_s: 2.0, heartbeat_s: 0.0, sweep_s: 1.0, extra_s: 0.0 },
            defaults: "no number to move: django-tasks-db has no heartbeat, lease or recovery (`django_tasks_db/management/commands/db_worker.py` Worker.run claims READY tasks only); `--interval` defaults to 1 s",
            deviation: "the same as fast but the 1 s poll: there is no threshold to set",
        },
        completion_guard: "none (set_successful and set_failed save by primary key)",
        control: false,
        checkpoint_table: None,
        held_at: HeldAt::Trigger("\"finished_at\"\\s*="),
        takeover_touches: "the task row (a claim: READY -> RUNNING)",
        recovery_lock: None,
        registry: None,
        warns: "",
        results_table: None,
        process_tree: false,
        not_applicable: &[
            ("pause-early-retry", "django-tasks has no retry request: a task that raises is FAILED for good (Worker.run_task -> DBTaskResult.set_failed)"),
            ("kill-control", "django-tasks-db recovers no task of a dead worker: db_worker takes only READY tasks, so a killed worker's RUNNING task is never run again"),
        ],
    },
    Library {
        name: "dramatiq_pg",
        version: "0.12.0 (dramatiq-pg with dramatiq 1.18.0)",
        runtime: Runtime::Python,
        adapter: "lib_dramatiq_pg.py",
        table: "dramatiq.queue",
        status_column: "state",
        claimed: &["consumed"],
        success: Success::Status("done"),
        protocol_schema: false,
        fast: Timing { stall_s: 2.0, heartbeat_s: 0.0, sweep_s: 0.25, extra_s: 0.0 },
        takeover_s: 15,
        recovery: "documented `recover` command (consumed messages older than --minage back to queued) run every 0.25 s with minage 2 s; a consumer's claim also needs `pg_try_advisory_lock` on the message, held by the claiming session until the ack",
        production: Production {
            timing: Timing { stall_s: 60.0, heartbeat_s: 0.0, sweep_s: 60.0, extra_s: 0.0 },
            defaults: "`dramatiq_pg/cli.py` make_argument_parser: `recover --minage` defaults to `1 min`; recovery runs only when an operator runs that command; a consumer also polls for pending messages at start and at random (`dramatiq_pg/broker.py` PostgresConsumer.__next__, `randint(0, 300)`)",
            deviation: "the recover command runs every 60 s, not when an operator runs it",
        },
        completion_guard: "none by design (ack and nack update by message id), but the claiming session's advisory lock keeps others from claiming the message",
        control: false,
        checkpoint_table: None,
        held_at: HeldAt::Trigger("set\\s+\"state\"\\s*=\\s*'(done|rejected)'"),
        takeover_touches: "the message row (recover: consumed -> queued; a claim: consumed, under the message's advisory lock)",
        recovery_lock: None,
        registry: None,
        warns: "",
        results_table: None,
        process_tree: true,
        not_applicable: &[],
    },
    Library {
        name: "huey",
        version: "3.5.4 (SqlHuey: huey's SQL storage on peewee 4.5.3)",
        runtime: Runtime::Python,
        adapter: "lib_huey.py",
        table: "public.task",
        status_column: "queue",
        claimed: &[],
        success: Success::Deleted,
        protocol_schema: false,
        fast: Timing { stall_s: 2.0, heartbeat_s: 0.0, sweep_s: 0.1, extra_s: 0.0 },
        // A dequeued task is no longer in the queue: the takeover never comes, and the cell says
        // so within this bound.
        takeover_s: 10,
        recovery: "none: the dequeue deletes the task's row in the transaction that reads it (`SqlStorage.dequeue`); nothing of a running task stays to recover",
        production: Production {
            timing: Timing { stall_s: 2.0, heartbeat_s: 0.0, sweep_s: 0.1, extra_s: 0.0 },
            defaults: "no number to move: huey has no heartbeat, lease or recovery of a dequeued task (`huey/contrib/sql_huey.py` SqlStorage.dequeue deletes the row it takes); the consumer polls from `initial_delay` 0.1 s backing off to `max_delay` 10 s (`huey/consumer_options.py` config_defaults), one worker thread",
            deviation: "the same as fast: the adapter runs the consumer at its defaults",
        },
        completion_guard: "none needed by the queue (the row is gone once dequeued); the result is written to the kv table by task id (`SqlStorage.put_data`)",
        control: false,
        checkpoint_table: None,
        held_at: HeldAt::Trigger("insert\\s+into\\s+\"task\""),
        takeover_touches: "nothing to take over: the task row was deleted by A's dequeue",
        recovery_lock: None,
        registry: None,
        warns: "",
        results_table: Some(("public.kv", "value")),
        process_tree: false,
        not_applicable: &[
            ("held-write-early", "huey's outcome writes no row of the task table to hold: A's dequeue deleted it (SqlStorage.dequeue), and the result goes to the kv table"),
            ("kill-control", "huey recovers no task of a dead consumer: the dequeue deleted the task's row, so a killed consumer's task is never run again"),
        ],
    },
    Library {
        name: "rexecutor",
        version: "0.1.1 (rexecutor with rexecutor-sqlx 0.1.1)",
        runtime: Runtime::Rust,
        adapter: "audit-rexecutor",
        table: "public.rexecutor_jobs",
        status_column: "status",
        claimed: &["executing"],
        success: Success::Status("complete"),
        protocol_schema: false,
        fast: Timing { stall_s: 2.0, heartbeat_s: 0.0, sweep_s: 30.0, extra_s: 0.0 },
        // Nothing recovers an executing job: the takeover never comes, and the cell says so within
        // this bound.
        takeover_s: 10,
        recovery: "none: a claim takes only scheduled and retryable jobs (`load_job_mark_as_executing_for_executor`); an executing job stays with its worker",
        production: Production {
            timing: Timing { stall_s: 2.0, heartbeat_s: 0.0, sweep_s: 30.0, extra_s: 0.0 },
            defaults: "no number to move: rexecutor-sqlx has no heartbeat, lease or recovery (`rexecutor-sqlx/src/lib.rs` RexecutorPgBackend::load_job_mark_as_executing_for_executor claims scheduled and retryable jobs only); a runner looks for ready jobs on each NOTIFY of its executor and at least every 30 s (`rexecutor-sqlx/src/stream.rs` ReadyJobStream::DEFAULT_DELAY)",
            deviation: "the same as fast: there is no threshold to set",
        },
        completion_guard: "none (the outcome updates by job id, whatever its status)",
        control: false,
        checkpoint_table: None,
        held_at: HeldAt::Trigger("set\\s+status\\s*=\\s*'(complete|retryable|cancelled|discarded)'"),
        takeover_touches: "the job row (a claim: scheduled or retryable -> executing)",
        recovery_lock: None,
        registry: None,
        warns: "",
        results_table: None,
        process_tree: false,
        not_applicable: &[(
            "kill-control",
            "rexecutor recovers no job of a dead worker: a claim takes only scheduled and retryable jobs, so a killed worker's executing job is never run again",
        )],
    },
    Library {
        name: "background_jobs",
        version: "0.20.0 (background-jobs with background-jobs-tokio and background-jobs-postgres 0.20.0)",
        runtime: Runtime::Rust,
        adapter: "audit-bgjobs",
        table: "public.job_queue",
        status_column: "status",
        claimed: &["running"],
        success: Success::Deleted,
        protocol_schema: false,
        fast: Timing { stall_s: 2.0, heartbeat_s: 0.4, sweep_s: 5.0, extra_s: 0.0 },
        takeover_s: 20,
        recovery: "built in: every worker's pop first resets running jobs whose heartbeat is older than 5 x the job's HEARTBEAT_INTERVAL (400 ms: 2 s), then claims a new one; a worker with nothing to claim pops again on a NOTIFY or within 5 s",
        production: Production {
            timing: Timing { stall_s: 25.0, heartbeat_s: 5.0, sweep_s: 5.0, extra_s: 0.0 },
            defaults: "`background-jobs-core/src/job.rs` Job: `const HEARTBEAT_INTERVAL: u64 = 5_000` (ms); a running job is reset once its heartbeat is older than `heartbeat_interval * 5` (`background-jobs-postgres/src/lib.rs` Storage::pop), 25 s; an idle pop waits at most 5 s",
            deviation: "",
        },
        completion_guard: "none (complete deletes the row by job id; the heartbeat updates by job id and writes its own runner_id)",
        control: false,
        checkpoint_table: None,
        held_at: HeldAt::Trigger("delete\\s+from\\s+\"job_queue\""),
        takeover_touches: "the job row (the reset: running -> new; B's claim: new -> running)",
        recovery_lock: None,
        registry: None,
        warns: "",
        results_table: None,
        process_tree: false,
        not_applicable: &[],
    },
    Library {
        name: "backie",
        version: "0.9.0 (async PostgreSQL store, diesel-async 0.3)",
        runtime: Runtime::Rust,
        adapter: "audit-backie",
        table: "public.backie_tasks",
        status_column: "running_at",
        claimed: &[],
        success: Success::Deleted,
        protocol_schema: false,
        fast: Timing { stall_s: 2.0, heartbeat_s: 0.0, sweep_s: 0.2, extra_s: 0.0 },
        takeover_s: 15,
        recovery: "the queue's execution_timeout=2 s: a pull (every 0.2 s) also takes a task whose running_at is older than it (no heartbeat); RetentionMode::RemoveAll deletes a finished task's row",
        production: Production {
            timing: Timing { stall_s: 2.0, heartbeat_s: 0.0, sweep_s: 1.0, extra_s: 0.0 },
            defaults: "`backie/src/worker_pool.rs` QueueConfig::new: `execution_timeout: None` (a running task is never taken back), `pull_interval: Duration::from_secs(1)`, `retention_mode: RetentionMode::default()` (`RemoveDone`, `backie/src/lib.rs`)",
            deviation: "RetentionMode::RemoveAll instead of RemoveDone, so a final failure deletes the row as a success does",
        },
        completion_guard: "none (remove_task deletes by task id; set_running and schedule_task_retry update by id)",
        control: false,
        checkpoint_table: None,
        held_at: HeldAt::Trigger("delete\\s+from\\s+\"backie_tasks\""),
        takeover_touches: "the task row (B's pull: running_at)",
        recovery_lock: None,
        registry: None,
        warns: "",
        results_table: None,
        process_tree: false,
        not_applicable: &[],
    },
    Library {
        name: "hammerwork",
        version: "3.0.0 (feature postgres)",
        runtime: Runtime::Rust,
        adapter: "audit-hammerwork",
        table: "public.hammerwork_jobs",
        status_column: "status",
        claimed: &["Running"],
        success: Success::Status("Completed"),
        protocol_schema: false,
        fast: Timing { stall_s: 2.0, heartbeat_s: 0.67, sweep_s: 0.25, extra_s: 0.0 },
        takeover_s: 20,
        recovery: "built in: a claim takes a 2 s lease, renewed by a heartbeat every third of it; the pool's stale job reaper (every 0.25 s) puts a Running job whose lease expired back to Pending",
        production: Production {
            timing: Timing { stall_s: 300.0, heartbeat_s: 100.0, sweep_s: 60.0, extra_s: 0.0 },
            defaults: "`hammerwork/src/worker.rs` DEFAULT_LEASE_DURATION (the queue's, 5 minutes) (`Worker::with_lease_duration`: heartbeats every third of it); `hammerwork/src/worker.rs` `DEFAULT_STALE_JOB_REAPER_INTERVAL: Duration = Duration::from_secs(60)`; a worker polls every 1 s (`Worker::new`)",
            deviation: "",
        },
        completion_guard: "the run: outcome and heartbeat writes match id, status Running, attempts and started_at of the run that was claimed",
        control: false,
        checkpoint_table: None,
        held_at: HeldAt::Trigger("set\\s+status\\s*=\\s*('completed'|\\$2|'timedout'|'pending',\\s*scheduled_at)"),
        takeover_touches: "the job row (the reaper: Running -> Pending; B's claim: Pending -> Running with a new started_at and attempts)",
        recovery_lock: None,
        registry: None,
        warns: "",
        results_table: None,
        process_tree: false,
        not_applicable: &[],
    },
];

/// The libraries named in `names` (all when `None`), or the unknown name.
pub fn select(names: Option<&[String]>) -> Result<Vec<Library>, String> {
    let Some(names) = names else { return Ok(LIBRARIES.to_vec()) };
    names
        .iter()
        .map(|n| {
            LIBRARIES.iter().find(|l| l.name == n.as_str()).copied().ok_or_else(|| {
                format!(
                    "unknown library {n:?}; known: {}",
                    LIBRARIES.iter().map(|l| l.name).collect::<Vec<_>>().join(", ")
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_a_library_without_a_checkpoint_table_skips_the_checkpoint_cell() {
        for (i, l) in LIBRARIES.iter().enumerate() {
            assert!(LIBRARIES[..i].iter().all(|o| o.name != l.name), "{} twice", l.name);
            assert_eq!(l.not_applicable(CHECKPOINT_EXPERIMENT).is_some(), l.checkpoint_table.is_none(), "{}", l.name);
        }
        let reference = LIBRARIES.iter().find(|l| l.control).expect("a control");
        assert!(crate::experiments::EXPERIMENTS.iter().all(|e| reference.not_applicable(e.id).is_none()));
    }

    #[test]
    fn every_library_says_where_its_write_is_held_and_the_control_holds_it_before_its_check() {
        for l in LIBRARIES {
            assert!(!l.takeover_touches.is_empty(), "{}", l.name);
            match l.held_at {
                HeldAt::Trigger(pattern) => assert!(!l.control && !pattern.trim().is_empty(), "{}", l.name),
                // The control's write must wait before its lease check, or B's takeover waits on
                // it (the check's row lock) and nothing would show the check refusing.
                HeldAt::KeyShare(table, column) => assert!(l.control && !table.is_empty() && !column.is_empty()),
            }
        }
    }

    #[test]
    fn every_reason_names_a_known_experiment() {
        for l in LIBRARIES {
            for (e, _) in l.not_applicable {
                assert!(crate::experiments::EXPERIMENTS.iter().any(|x| x.id == *e), "{}: {e}", l.name);
            }
        }
    }
}
