//! Faults of the remote side, injected into the fake tools over their admin API, and the harness
//! acting as another party on the tools: a resource created before the worker's call, under its
//! own operation_id (an earlier execution the database no longer knows of) or under another
//! intent's (a name already taken). One HTTP/1.1 request per connection, each with a deadline.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::{HarnessError, Result};

/// How long the tools may take to answer the harness.
pub const ANSWER: Duration = Duration::from_secs(5);

/// A tool fault (docs/fake-tools.md): what the next create of a tool does instead of answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFault {
    /// Answer 503 and do nothing.
    Error5xx,
    /// Never answer and do nothing.
    Hang,
    /// Create durably, then close the connection without an answer.
    DropAfterCommit,
    /// Create durably, then never answer.
    HangAfterCommit,
}

impl ToolFault {
    pub const ALL: &'static [ToolFault] =
        &[ToolFault::Error5xx, ToolFault::Hang, ToolFault::DropAfterCommit, ToolFault::HangAfterCommit];

    pub fn mode(self) -> &'static str {
        match self {
            ToolFault::Error5xx => "error5xx",
            ToolFault::Hang => "hang",
            ToolFault::DropAfterCommit => "drop_after_commit",
            ToolFault::HangAfterCommit => "hang_after_commit",
        }
    }

    /// Whether the tool really creates the resource under this fault.
    pub fn creates(self) -> bool {
        matches!(self, ToolFault::DropAfterCommit | ToolFault::HangAfterCommit)
    }
}

/// Send one request and read the whole answer: (status, JSON body or Null).
pub async fn call(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> Result<(u16, Value)> {
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: tools\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    );
    let raw = tokio::time::timeout(ANSWER, async move {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(req.as_bytes()).await?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&out).to_string())
    })
    .await
    .map_err(|_| HarnessError::Timeout {
        what: format!("the fake tools to answer {method} {path}"),
        after_ms: ANSWER.as_millis(),
    })??;
    let status = raw
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| HarnessError::Other(format!("the fake tools answered {method} {path} with {raw:?}")))?;
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
    Ok((status, serde_json::from_str(body).unwrap_or(Value::Null)))
}

/// Arm `fault` for the next create of `tool`.
pub async fn arm(addr: SocketAddr, tool: &str, fault: ToolFault) -> Result<()> {
    let (status, v) =
        call(addr, "POST", "/admin/faults", Some(&json!({"tool": tool, "mode": fault.mode(), "count": 1}))).await?;
    if !(200..300).contains(&status) {
        return Err(HarnessError::Other(format!("the fake tools refused fault {}: {status} {v}", fault.mode())));
    }
    Ok(())
}

/// Create a resource on `tool` as the harness, tagged with `operation_id`; answers the resource.
pub async fn plant(addr: SocketAddr, tool: &str, operation_id: &str, request: &Value) -> Result<Value> {
    let path = format!("/tools/{tool}/create");
    let (status, v) =
        call(addr, "POST", &path, Some(&json!({"operation_id": operation_id, "request": request}))).await?;
    if status != 200 && status != 201 {
        return Err(HarnessError::Other(format!("the fake tools refused the harness's create: {status} {v}")));
    }
    Ok(v)
}
