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

    #[error("{0}")]
    Other(String),
}

pub type Result<T> = std::result::Result<T, HarnessError>;
