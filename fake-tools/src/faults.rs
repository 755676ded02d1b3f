//! Fault knobs, per tool (armed through `POST /admin/faults`) or per call (the `x-fault` header).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum Fault {
    /// Wait this long before handling the request.
    Latency { ms: u64 },
    /// Never answer, and do nothing (the request is not processed).
    Hang,
    /// Process the request durably, then close the connection without a response.
    DropAfterCommit,
    /// Process the request durably, then never answer.
    HangAfterCommit,
    /// Answer 503 without processing.
    Error5xx,
}

impl Fault {
    /// Parse the per-call header value: `hang`, `drop_after_commit`, `hang_after_commit`, `5xx`,
    /// `latency=<ms>`.
    pub fn from_header(v: &str) -> Option<Fault> {
        Some(match v.trim() {
            "hang" => Fault::Hang,
            "drop_after_commit" => Fault::DropAfterCommit,
            "hang_after_commit" => Fault::HangAfterCommit,
            "5xx" => Fault::Error5xx,
            other => Fault::Latency { ms: other.strip_prefix("latency=")?.parse().ok()? },
        })
    }
}

/// A fault armed for a tool for the next `remaining` calls.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Armed {
    pub tool: String,
    #[serde(flatten)]
    pub fault: Fault,
    #[serde(default = "one")]
    pub count: u32,
}

fn one() -> u32 {
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_parse() {
        assert_eq!(Fault::from_header("latency=25"), Some(Fault::Latency { ms: 25 }));
        assert_eq!(Fault::from_header("hang_after_commit"), Some(Fault::HangAfterCommit));
        assert_eq!(Fault::from_header("nonsense"), None);
        let a: Armed = serde_json::from_str(r#"{"tool": "idem", "mode": "drop_after_commit"}"#).unwrap();
        assert_eq!((a.fault, a.count), (Fault::DropAfterCommit, 1));
    }
}
