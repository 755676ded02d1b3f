//! The identities of the spec (section 02) as types: a lease is (run_id, owner, epoch).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::ProtocolError;

/// The platform ceiling on a lease TTL. A TTL above it is refused rather than silently clamped.
pub const TTL_CEILING_MS: i64 = 10 * 60 * 1000;

/// A validated lease TTL in whole milliseconds, passed to SQL as a bigint (never as interval text).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ttl(i64);

impl Ttl {
    pub fn from_millis(ms: i64) -> Result<Ttl, ProtocolError> {
        if ms <= 0 || ms > TTL_CEILING_MS {
            return Err(ProtocolError::InvalidTtl { ms, ceiling_ms: TTL_CEILING_MS });
        }
        Ok(Ttl(ms))
    }

    pub fn millis(self) -> i64 {
        self.0
    }
}

/// What a worker holds after an acquire: the fencing identity of its term.
/// `epoch` orders terms within one run only; it is incomparable across runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub run_id: Uuid,
    pub owner: String,
    pub epoch: i64,
}

/// A lease together with its expiry on the database clock, as returned by acquire / renew.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseTerms {
    pub lease: Lease,
    pub expires_at: chrono::DateTime<chrono::Utc>,
}

/// The run states of the spec's state machine (section 07).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Pending,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Pending => "pending",
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<RunStatus> {
        Some(match s {
            "pending" => RunStatus::Pending,
            "running" => RunStatus::Running,
            "succeeded" => RunStatus::Succeeded,
            "failed" => RunStatus::Failed,
            "cancelled" => RunStatus::Cancelled,
            _ => return None,
        })
    }

    /// Terminal states never return to running; a retry makes a new run_id.
    pub fn is_terminal(self) -> bool {
        matches!(self, RunStatus::Succeeded | RunStatus::Failed | RunStatus::Cancelled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_rejects_zero_negative_and_above_ceiling() {
        assert!(Ttl::from_millis(0).is_err());
        assert!(Ttl::from_millis(-5).is_err());
        assert!(Ttl::from_millis(TTL_CEILING_MS + 1).is_err());
        assert_eq!(Ttl::from_millis(250).unwrap().millis(), 250);
        assert_eq!(Ttl::from_millis(TTL_CEILING_MS).unwrap().millis(), TTL_CEILING_MS);
    }

    #[test]
    fn terminal_states() {
        for s in ["pending", "running", "succeeded", "failed", "cancelled"] {
            let st = RunStatus::parse(s).unwrap();
            assert_eq!(st.as_str(), s);
            assert_eq!(st.is_terminal(), matches!(s, "succeeded" | "failed" | "cancelled"));
        }
        assert!(RunStatus::parse("done").is_none());
    }
}
