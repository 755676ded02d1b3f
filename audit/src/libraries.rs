//! The job queues the audit knows: one line each, beside its adapter in `audit/adapters/`.
//! Adding a library is an adapter file (`lib_<name>.py`, the three commands of
//! `audit/adapters/common.py`) and a line in [`LIBRARIES`].

use fenceproof_harness::check::audit::Success;

#[derive(Debug, Clone, Copy)]
pub struct Library {
    /// Its name on the command line and in the report.
    pub name: &'static str,
    /// The pinned version (`audit/requirements.txt`); the findings name it.
    pub version: &'static str,
    /// The adapter file in the adapters folder.
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
    /// The stall threshold the adapter configures, in seconds (a heartbeat older than this is stale).
    pub stall_s: f64,
    /// How the library recovers a stalled job, as configured here.
    pub recovery: &'static str,
    /// Whether the completion of a job is fenced against a worker that lost it, by the library's design.
    pub completion_guard: &'static str,
    /// The control row (the reference protocol), expected to pass everything.
    pub control: bool,
}

pub const LIBRARIES: &[Library] = &[
    Library {
        name: "reference",
        version: "fenceproof protocol (migrations 0001-0003)",
        adapter: "lib_reference.py",
        table: "public.agent_runs",
        status_column: "status",
        claimed: &["running"],
        success: Success::Status("succeeded"),
        protocol_schema: true,
        stall_s: 2.0,
        recovery: "lease expiry (TTL 2 s, renewed every 0.5 s); a new acquire raises the epoch",
        completion_guard: "fp_run_transition checks owner, epoch and expiry under the lease row lock",
        control: true,
    },
    Library {
        name: "procrastinate",
        version: "3.10.0",
        adapter: "lib_procrastinate.py",
        table: "public.procrastinate_jobs",
        status_column: "status",
        claimed: &["doing"],
        success: Success::Status("succeeded"),
        protocol_schema: false,
        stall_s: 2.0,
        recovery: "documented recipe: get_stalled_jobs(seconds_since_heartbeat=2) + retry_job, every 0.25 s; heartbeat every 0.5 s",
        completion_guard: "status check only (the job must be doing)",
        control: false,
    },
    Library {
        name: "pgqueuer",
        version: "1.6.0",
        adapter: "lib_pgqueuer.py",
        table: "public.pgqueuer",
        status_column: "status",
        claimed: &["picked"],
        success: Success::Deleted,
        protocol_schema: false,
        stall_s: 2.0,
        recovery: "built in: dequeue re-picks a picked job whose heartbeat is older than heartbeat_timeout=2 s",
        completion_guard: "none (the row is deleted by id)",
        control: false,
    },
    Library {
        name: "chancy",
        version: "0.26.0",
        adapter: "lib_chancy.py",
        table: "public.chancy_jobs",
        status_column: "state",
        claimed: &["running"],
        success: Success::Status("succeeded"),
        protocol_schema: false,
        stall_s: 2.0,
        recovery: "Recovery plugin (poll 1 s, leader only) with heartbeat_timeout=2 s; a new claim_id per claim",
        completion_guard: "claim_id (the update matches the claim it ran under)",
        control: false,
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
