//! Typed errors of the protocol and how a caller must treat each (spec section 07).

use uuid::Uuid;

/// Why a protected write was rejected; the `reason` label of `protected_write_rejected_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    /// The caller does not hold the current, unexpired lease (owner/epoch/expiry check failed).
    Lease,
    /// The run is not in the state the transition starts from.
    State,
    /// The run's revision moved on since the caller's snapshot.
    Revision,
}

impl RejectReason {
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::Lease => "lease",
            RejectReason::State => "state",
            RejectReason::Revision => "revision",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// Confirmed: the caller has no commit right. Cancel the execution, write no terminal state.
    #[error("lease lost for run {run_id} (owner {owner}, epoch {epoch})")]
    LeaseLost { run_id: Uuid, owner: String, epoch: i64 },

    /// Stale snapshot within the same epoch: read back and decide per step semantics.
    #[error("revision conflict on run {run_id}: expected {expected}, found {found:?}")]
    Conflict { run_id: Uuid, expected: i64, found: Option<i64> },

    /// The run is not in a state this transition may start from (e.g. it is already terminal).
    #[error("run {run_id} is {found}; transition needs {needed}")]
    InvalidState { run_id: Uuid, found: String, needed: String },

    /// The run (or its lease row) does not exist.
    #[error("run {0} not found")]
    RunNotFound(Uuid),

    /// A retry was requested while the task's active run is still live.
    #[error("task {task_id} still has a live run {run_id}; a retry needs it terminal first")]
    ActiveRunLive { task_id: String, run_id: Uuid },

    /// The lease is held by someone else and not yet expired.
    #[error("lease of run {run_id} is held by {holder} (epoch {epoch})")]
    LeaseBusy { run_id: Uuid, holder: String, epoch: i64 },

    /// TTL outside (0, ceiling].
    #[error("invalid lease TTL {ms} ms: must be > 0 and <= {ceiling_ms} ms")]
    InvalidTtl { ms: i64, ceiling_ms: i64 },

    /// The COMMIT (or a renewal) did not return a definite answer: the change may or may not have
    /// happened. Never treat as failure; read back from the primary.
    #[error("outcome of {operation} on run {run_id} is unknown; read back from the primary: {detail}")]
    OutcomeUnknown { operation: &'static str, run_id: Uuid, detail: String },

    /// SQLSTATE 40001 kept coming back after the whole budget of retries.
    #[error("serialization failures exhausted the retry budget of {attempts} attempts")]
    RetryBudgetExhausted { attempts: u32 },

    /// An intent that cannot be built (bad operation_id component).
    #[error("invalid intent: {0}")]
    InvalidIntent(String),

    /// An operation_id already registered with another run, tool or request digest: a bug or a
    /// corrupted request, never silently accepted.
    #[error("operation {operation_id} is registered with a different intent: {detail}")]
    IntentMismatch { operation_id: String, detail: String },

    /// A ledger write matched zero rows: someone else moved the operation (the reconciler marked it
    /// unknown, it was cancelled, or this claim is stale). Investigate; never ignore.
    #[error("ledger write on {operation_id} rejected; the operation now is {status} (owner {dispatch_owner:?}, revision {revision})")]
    LedgerWriteRejected { operation_id: String, status: String, dispatch_owner: Option<String>, revision: i64 },

    /// A workflow advance named an operation of another run.
    #[error("operation {operation_id} belongs to run {operation_run}, not to run {run_id}")]
    ForeignOperation { operation_id: String, operation_run: Uuid, run_id: Uuid },

    /// A workflow advance named an operation whose result is not verified (not succeeded).
    #[error("operation {operation_id} is {status}; only a verified (succeeded) result can advance the run")]
    OperationNotSettled { operation_id: String, status: String },

    /// The operation does not exist.
    #[error("operation {0} not found")]
    OperationNotFound(String),

    /// Any other database error: the transaction did not commit.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
}

impl ProtocolError {
    /// Whether the database had no connection to give ([`no_connection`]): the
    /// pool's wait ran out or the server refused the session for want of slots. Nothing was sent,
    /// so it says nothing of the protocol; a harness reads it as the machine out of a resource.
    pub fn out_of_connections(&self) -> bool {
        matches!(self, ProtocolError::Database(e) if no_connection(e))
    }

    /// The rejection reason when this error is a protected-write rejection.
    pub fn reject_reason(&self) -> Option<RejectReason> {
        match self {
            ProtocolError::LeaseLost { .. } => Some(RejectReason::Lease),
            ProtocolError::InvalidState { .. } => Some(RejectReason::State),
            ProtocolError::Conflict { .. } => Some(RejectReason::Revision),
            _ => None,
        }
    }

    /// A short stable label for event logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            ProtocolError::LeaseLost { .. } => "lease_lost",
            ProtocolError::Conflict { .. } => "conflict",
            ProtocolError::InvalidState { .. } => "invalid_state",
            ProtocolError::RunNotFound(_) => "not_found",
            ProtocolError::ActiveRunLive { .. } => "active_run_live",
            ProtocolError::LeaseBusy { .. } => "busy",
            ProtocolError::InvalidTtl { .. } => "invalid_ttl",
            ProtocolError::OutcomeUnknown { .. } => "outcome_unknown",
            ProtocolError::RetryBudgetExhausted { .. } => "retry_budget_exhausted",
            ProtocolError::InvalidIntent(_) => "invalid_intent",
            ProtocolError::IntentMismatch { .. } => "intent_mismatch",
            ProtocolError::LedgerWriteRejected { .. } => "ledger_write_rejected",
            ProtocolError::ForeignOperation { .. } => "foreign_operation",
            ProtocolError::OperationNotSettled { .. } => "operation_not_settled",
            ProtocolError::OperationNotFound(_) => "operation_not_found",
            ProtocolError::Database(_) => "db_error",
        }
    }
}

/// True when the database had no connection to give: the pool's wait for one ran out
/// (`PoolTimedOut`: no statement was sent), or the server refused a new session for want of slots
/// (SQLSTATE 53300 `too_many_connections`, also sent as "remaining connection slots are reserved
/// for …"). The machine was out of a resource; the database answered nothing about the protocol.
pub fn no_connection(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut => true,
        sqlx::Error::Database(db) => db.code().as_deref() == Some(TOO_MANY_CONNECTIONS),
        _ => false,
    }
}

/// SQLSTATE `too_many_connections`.
pub const TOO_MANY_CONNECTIONS: &str = "53300";
