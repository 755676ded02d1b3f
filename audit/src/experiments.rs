//! The audit's fixed experiments. Each: worker A takes the one job and starts it (its START is in
//! the tools' ledger); the harness holds A past the library's stall threshold; the library's own
//! recovery hands the job to worker B (B's START); then A comes back early (while B still runs),
//! late (after B's outcome committed) or never (killed: the control of the fault), and A's
//! execution ends as the experiment says.

/// The experiment that holds A's write inside the database across the takeover.
pub const HELD_WRITE_EXPERIMENT: &str = "held-write-early";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldKind {
    /// SIGSTOP, then SIGCONT.
    Sigstop,
    /// The process's cgroup frozen, then thawed (nothing of it runs, not even signal handlers).
    Freeze,
    /// SIGKILL: it never comes back.
    Kill,
    /// SIGTERM mid-job (a deploy's graceful shutdown), not paused: A's job goes on past the stall
    /// threshold while A shuts down; a library that waits for running jobs keeps A alive until
    /// its gate opens, one that does not lets A exit (then it is judged as killed).
    Sigterm,
    /// Nothing: A stays alive and its job runs on past the stall threshold (a long job, not a
    /// paused worker). A takeover, if any, is a second live execution.
    Running,
    /// A's gate opens and its outcome write is held inside the database (a statement trigger or
    /// the harness's row hold: `Library::held_at`) before it touches a row; then A is paused
    /// (SIGSTOP) so its claim expires. The write is released after B took over, then A resumes.
    HeldWrite,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// While B still runs the job.
    Early,
    /// After B's outcome has committed.
    Late,
    /// Never (A was killed).
    Never,
}

#[derive(Debug, Clone, Copy)]
pub struct AuditExperiment {
    pub id: &'static str,
    pub hold: HoldKind,
    pub resume: Resume,
    /// How A's execution ends when it comes back: success, fail or retry.
    pub outcome: &'static str,
    /// How B's execution ends: success, or (the cells where a stale success would erase it) a
    /// final failure or a retry request.
    pub taker: &'static str,
    /// B starts under A's own worker name (a restarted pod keeps its name: §02).
    pub same_name: bool,
    pub title: &'static str,
}

pub const EXPERIMENTS: &[AuditExperiment] = &[
    AuditExperiment {
        id: "pause-early-success",
        hold: HoldKind::Sigstop,
        resume: Resume::Early,
        outcome: "success",
        taker: "success",
        same_name: false,
        title: "A paused (SIGSTOP), B takes over, A resumes while B runs and completes",
    },
    AuditExperiment {
        id: "pause-early-fail",
        hold: HoldKind::Sigstop,
        resume: Resume::Early,
        outcome: "fail",
        taker: "success",
        same_name: false,
        title: "A paused, B takes over, A resumes while B runs and fails the job",
    },
    AuditExperiment {
        id: "pause-early-retry",
        hold: HoldKind::Sigstop,
        resume: Resume::Early,
        outcome: "retry",
        taker: "success",
        same_name: false,
        title: "A paused, B takes over, A resumes while B runs and asks for a retry",
    },
    AuditExperiment {
        id: "pause-late-success",
        hold: HoldKind::Sigstop,
        resume: Resume::Late,
        outcome: "success",
        taker: "success",
        same_name: false,
        title: "A paused, B takes over and completes, then A resumes and completes",
    },
    AuditExperiment {
        id: "pause-late-fail",
        hold: HoldKind::Sigstop,
        resume: Resume::Late,
        outcome: "fail",
        taker: "success",
        same_name: false,
        title: "A paused, B takes over and completes, then A resumes and fails the job",
    },
    AuditExperiment {
        id: "late-success-over-fail",
        hold: HoldKind::Sigstop,
        resume: Resume::Late,
        outcome: "success",
        taker: "fail",
        same_name: false,
        title: "A paused, B takes over and fails the job for good, then A resumes and completes (a stale success over the current worker's failure)",
    },
    AuditExperiment {
        id: "late-success-over-retry",
        hold: HoldKind::Sigstop,
        resume: Resume::Late,
        outcome: "success",
        taker: "retry",
        same_name: false,
        title: "A paused, B takes over and asks for a retry, then A resumes and completes (a stale success over the current worker's retry request)",
    },
    AuditExperiment {
        id: "freeze-early-success",
        hold: HoldKind::Freeze,
        resume: Resume::Early,
        outcome: "success",
        taker: "success",
        same_name: false,
        title: "A frozen (cgroup freezer), B takes over, A thawed while B runs and completes",
    },
    AuditExperiment {
        id: "same-name-early-success",
        hold: HoldKind::Sigstop,
        resume: Resume::Early,
        outcome: "success",
        taker: "success",
        same_name: true,
        title: "A paused; B, started under A's own worker name (a restart), takes over; A resumes while B runs and completes",
    },
    AuditExperiment {
        id: "checkpoint-early",
        hold: HoldKind::Sigstop,
        resume: Resume::Early,
        outcome: "checkpoint",
        taker: "success",
        same_name: false,
        title: "A paused, B takes over, A resumes while B runs, writes the library's checkpoint/progress record, and completes",
    },
    AuditExperiment {
        id: HELD_WRITE_EXPERIMENT,
        hold: HoldKind::HeldWrite,
        resume: Resume::Early,
        outcome: "success",
        taker: "success",
        same_name: false,
        title: "A's completion held inside the database while A is paused, its claim expires and B takes over; then released (§05: valid at check, expired at commit)",
    },
    AuditExperiment {
        id: "long-job-success",
        hold: HoldKind::Running,
        resume: Resume::Early,
        outcome: "success",
        taker: "success",
        same_name: false,
        title: "A is not paused: its job runs past five stall thresholds while B's recovery runs; a takeover is a second live execution, and with none A's success must stand",
    },
    AuditExperiment {
        id: "sigterm-mid-job",
        hold: HoldKind::Sigterm,
        resume: Resume::Early,
        outcome: "success",
        taker: "success",
        same_name: false,
        title: "A gets SIGTERM mid-job (a deploy's graceful shutdown) while its job goes on past the stall threshold; a takeover while A still runs is a second live execution",
    },
    AuditExperiment {
        id: "restart-live-same-name",
        hold: HoldKind::Running,
        resume: Resume::Early,
        outcome: "success",
        taker: "success",
        same_name: true,
        title: "A keeps running its job; B starts under A's own worker name (a restarted pod keeping its name) and its startup recovery races A, the live executor",
    },
    AuditExperiment {
        id: "kill-control",
        hold: HoldKind::Kill,
        resume: Resume::Never,
        outcome: "success",
        taker: "success",
        same_name: false,
        title: "A killed (SIGKILL) instead of paused, B takes over and completes: the fault's control",
    },
];

impl AuditExperiment {
    /// The outcome the job is enqueued for (a library may shape the job for it: more attempts
    /// when a retry is asked for, by either worker).
    pub fn enqueue_outcome(&self) -> &'static str {
        if self.taker == "retry" {
            "retry"
        } else if self.taker == "fail" {
            "fail"
        } else {
            self.outcome
        }
    }

    /// Whether either worker asks its library for a retry.
    pub fn asks_retry(&self) -> bool {
        self.outcome == "retry" || self.taker == "retry"
    }
}

/// The experiments named in `ids` (all when `None`), or the unknown id.
pub fn select(ids: Option<&[String]>) -> Result<Vec<AuditExperiment>, String> {
    let Some(ids) = ids else { return Ok(EXPERIMENTS.to_vec()) };
    ids.iter()
        .map(|id| {
            EXPERIMENTS.iter().find(|e| e.id == id.as_str()).copied().ok_or_else(|| {
                format!(
                    "unknown audit experiment {id:?}; known: {}",
                    EXPERIMENTS.iter().map(|e| e.id).collect::<Vec<_>>().join(", ")
                )
            })
        })
        .collect()
}
