//! Faults of the remote side, injected into the fake tools over their admin API, and the harness
//! acting as another party on the tools: a resource created before the worker's call, under its
//! own operation_id (an earlier execution the database no longer knows of) or under another
//! intent's (a name already taken). One HTTP/1.1 request per connection, each with a deadline.
//!
//! A tool fault in the common shape is an [`ArmedToolFault`]: armed for the tool's next create,
//! healed by disarming (`DELETE /admin/faults`, which disarms every tool's faults).

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::fault::Fault;
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

fn request(method: &str, path: &str, body: Option<&Value>) -> String {
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    format!(
        "{method} {path} HTTP/1.1\r\nHost: tools\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    )
}

/// Send one request and read the whole answer: (status, JSON body or Null).
pub async fn call(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> Result<(u16, Value)> {
    let req = request(method, path, body);
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

/// `fault` armed for the next create of `tool` on the fake tools at `addr`.
pub struct ArmedToolFault {
    addr: SocketAddr,
    tool: String,
    pub fault: ToolFault,
    /// The operation it is armed for, for the timeline.
    operation: Option<String>,
    armed: bool,
}

impl ArmedToolFault {
    pub fn new(addr: SocketAddr, tool: &str, fault: ToolFault) -> ArmedToolFault {
        ArmedToolFault { addr, tool: tool.to_string(), fault, operation: None, armed: false }
    }

    /// Name the operation whose dispatch the fault is armed for (recorded with its steps).
    pub fn for_operation(mut self, operation_id: &str) -> ArmedToolFault {
        self.operation = Some(operation_id.to_string());
        self
    }
}

impl Fault for ArmedToolFault {
    fn name(&self) -> &'static str {
        "tool-fault"
    }

    fn target(&self) -> String {
        "tools".into()
    }

    fn actions(&self) -> (&'static str, &'static str) {
        ("tool_fault", "tool_fault_disarmed")
    }

    fn describe(&self) -> Value {
        match &self.operation {
            Some(op) => json!({"tool": self.tool, "mode": self.fault.mode(), "operation_id": op}),
            None => json!({"tool": self.tool, "mode": self.fault.mode()}),
        }
    }

    async fn inject(&mut self) -> Result<Value> {
        arm(self.addr, &self.tool, self.fault).await?;
        self.armed = true;
        Ok(json!({}))
    }

    /// Disarm (every tool's faults: the tools have no per-fault disarm). A fault that fired is
    /// gone already; disarming it again changes nothing.
    async fn heal(&mut self) -> Result<()> {
        if std::mem::take(&mut self.armed) {
            let (status, v) = call(self.addr, "DELETE", "/admin/faults", None).await?;
            if !(200..300).contains(&status) {
                return Err(HarnessError::Other(format!("the fake tools refused to disarm: {status} {v}")));
            }
        }
        Ok(())
    }

    fn heal_now(&mut self) {
        if std::mem::take(&mut self.armed) {
            let _ = call_blocking(self.addr, &request("DELETE", "/admin/faults", None));
        }
    }
}

/// One request without a runtime (a guard's drop), bounded by [`ANSWER`].
fn call_blocking(addr: SocketAddr, req: &str) -> std::io::Result<()> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, ANSWER)?;
    s.set_read_timeout(Some(ANSWER))?;
    s.set_write_timeout(Some(ANSWER))?;
    s.write_all(req.as_bytes())?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    Ok(())
}
