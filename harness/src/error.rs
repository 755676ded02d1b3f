//! The harness's error type. Each variant reads as one line a user can act on.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("PostgreSQL server binaries not found (looked in: {looked}); install them (Debian/Ubuntu: apt-get install postgresql) or pass --pg-bin DIR")]
    PgBinariesNotFound { looked: String },

    #[error("--pg-bin {0} has no initdb and postgres in it")]
    PgBinDirInvalid(PathBuf),

    #[error("running as root needs the unprivileged user '{0}' to own the throwaway cluster (Debian's postgresql package creates it; or run as a non-root user)")]
    NoUnprivilegedUser(String),

    #[error("initdb failed: {0}")]
    Initdb(String),

    #[error("PostgreSQL did not start: {0}")]
    ServerStart(String),

    #[error("{what} timed out after {after_ms} ms")]
    Timeout { what: String, after_ms: u128 },

    /// A wait that ran out although it was granted the harness's own measured delay: the machine
    /// starved the harness (see [`crate::lag`]). The row is STARVED, not ERROR.
    #[error("{what} timed out after {after_ms} ms, while {lag}")]
    Starved { what: String, after_ms: u128, lag: String },

    /// A probe that could not reach a verdict because its moment passed before it was tried (a
    /// short lease that lapsed before the harness's command came): no verdict either way.
    #[error("no verdict: {0}")]
    Inconclusive(String),

    /// The server had no connection to give to something the harness or its own driver needed
    /// (a pool's wait ran out, or SQLSTATE 53300): the machine was out of a resource, so the row is
    /// STARVED, never a verdict ([`crate::db::connections`]).
    #[error("no connection to be had for {what}: {detail}")]
    OutOfConnections { what: String, detail: String },

    #[error("worker {name}: {detail}")]
    Worker { name: String, detail: String },

    /// The worker's own output breaks the worker contract (a line that is not JSON or longer than
    /// its limit, an event outside the schema, a flood of unasked-for events): it deviates.
    #[error("worker {name}: {detail}")]
    WorkerContract { name: String, detail: String },

    #[error("container backend: {0}")]
    Container(String),

    #[error("process control: {0}")]
    Process(String),

    #[error("database: {0}")]
    Database(#[from] sqlx::Error),

    #[error("io: {0}")]
    Io(#[from] std::io::Error),

    /// A step the harness set up legally was refused or failed by the code under test: the
    /// protocol broke a rule (it must allow that step), so the runner turns this into a FAIL check.
    #[error("setup step {step} did not succeed: {answer}")]
    StepRefused { step: String, answer: String },

    /// The team's own schema (the contract's `database.migrations`) cannot be used: a migration
    /// failed, or a protocol table or column is missing. Bad input, not a harness failure.
    #[error("{0}")]
    TeamSchema(String),

    #[error("{0}")]
    Other(String),
}

impl HarnessError {
    /// Whether this error is a wait that ran out or a probe whose moment passed: on a starved
    /// machine such a row is STARVED, not ERROR.
    pub fn is_wait(&self) -> bool {
        matches!(self, HarnessError::Timeout { .. } | HarnessError::Starved { .. } | HarnessError::Inconclusive(_))
    }

    /// Whether this error is the want of a server connection, not an answer of anything under
    /// test: [`HarnessError::OutOfConnections`], or a database error of the harness's own pools
    /// that [`crate::db::connections::refused`] names.
    pub fn out_of_connections(&self) -> bool {
        match self {
            HarnessError::OutOfConnections { .. } => true,
            HarnessError::Database(e) => crate::db::connections::refused(e),
            _ => false,
        }
    }

    /// The error of a wait for `what` that ran out after `after`, having lost `lag` of it to the
    /// harness's own scheduling delay.
    pub fn timed_out(what: String, after: std::time::Duration, lag: crate::lag::Lag) -> HarnessError {
        let after_ms = after.as_millis();
        if lag.starved() {
            HarnessError::Starved { what, after_ms, lag: lag.describe() }
        } else {
            HarnessError::Timeout { what, after_ms }
        }
    }
}

pub type Result<T> = std::result::Result<T, HarnessError>;
