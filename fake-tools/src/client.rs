//! A client for the fake tools: what a dispatcher uses to call them, and what the harness uses to
//! arm faults. Every call has a deadline.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};

use crate::http::{call, encode_segment, CallError};

#[derive(Debug, Clone, Copy)]
pub struct ToolClient {
    pub addr: SocketAddr,
}

pub type Answer = Result<(u16, Value), CallError>;

impl ToolClient {
    pub fn new(addr: SocketAddr) -> ToolClient {
        ToolClient { addr }
    }

    /// Ask `tool` to create the resource of `operation_id`.
    pub async fn create(&self, tool: &str, operation_id: &str, request: &Value, timeout: Duration) -> Answer {
        let body = json!({ "operation_id": operation_id, "request": request });
        call(self.addr, "POST", &format!("/tools/{}/create", encode_segment(tool)), &[], Some(&body), timeout).await
    }

    pub async fn query_operation(&self, tool: &str, operation_id: &str, timeout: Duration) -> Answer {
        call(
            self.addr,
            "GET",
            &format!("/tools/{}/operations/{}", encode_segment(tool), encode_segment(operation_id)),
            &[],
            None,
            timeout,
        )
        .await
    }

    pub async fn query_resource(&self, tool: &str, resource_id: &str, timeout: Duration) -> Answer {
        call(
            self.addr,
            "GET",
            &format!("/tools/{}/resources/{}", encode_segment(tool), encode_segment(resource_id)),
            &[],
            None,
            timeout,
        )
        .await
    }

    /// Arm a fault for the next `count` creates of `tool` (`mode` as in [`crate::faults::Fault`]).
    pub async fn arm(&self, tool: &str, mode: &str, count: u32) -> Answer {
        let body = json!({ "tool": tool, "mode": mode, "count": count });
        call(self.addr, "POST", "/admin/faults", &[], Some(&body), Duration::from_secs(5)).await
    }

    pub async fn health(&self) -> Answer {
        call(self.addr, "GET", "/health", &[], None, Duration::from_secs(2)).await
    }
}
