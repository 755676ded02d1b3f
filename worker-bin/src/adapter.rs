//! How this worker reaches the fake tools: the protocol's `ToolAdapter` over their HTTP client,
//! with each tool's capability class and the mapping of HTTP answers to remote facts.

use std::net::SocketAddr;
use std::time::Duration;

use fenceproof_fake_tools::client::ToolClient;
use fenceproof_fake_tools::http::CallError;
use fenceproof_protocol::dispatch::{Capability, RemoteAnswer, ToolAdapter};
use fenceproof_protocol::outbox::{Operation, Settled};
use fenceproof_protocol::secrets::{self, SecretError, SecretStore};
use serde_json::Value;

pub struct FakeTools {
    client: ToolClient,
    timeout: Duration,
    secrets: Option<SecretStore>,
}

impl FakeTools {
    pub fn new(addr: SocketAddr, timeout: Duration, secrets: Option<SecretStore>) -> FakeTools {
        FakeTools { client: ToolClient::new(addr), timeout, secrets }
    }

    /// The request as the tool must see it: secret references replaced by their values.
    fn unmasked(&self, operation_id: &str, request: &Value) -> Result<Value, SecretError> {
        let lookup = |name: &str| match &self.secrets {
            Some(store) => store.get(operation_id, name),
            None => Ok(None),
        };
        secrets::resolve(request, operation_id, &lookup)
    }
}

fn succeeded(v: Value) -> RemoteAnswer {
    let remote_id = v["resource_id"].as_str().unwrap_or_default().to_string();
    RemoteAnswer::Done(Settled::Succeeded { remote_id, result: v })
}

fn unknown(e: CallError) -> RemoteAnswer {
    RemoteAnswer::Unknown(e.to_string())
}

impl ToolAdapter for FakeTools {
    fn capability(&self, tool: &str) -> Option<Capability> {
        Some(match tool {
            "idem" => Capability::IdempotencyKey,
            "detid" => Capability::DeterministicId,
            "opquery" => Capability::OperationQuery,
            "plain" => Capability::Neither,
            _ => return None,
        })
    }

    async fn create(&self, tool: &str, operation_id: &str, request: &Value) -> RemoteAnswer {
        // A secret that cannot be resolved is never sent: the call is not made, so the outcome is
        // known (nothing happened remotely).
        let request = match self.unmasked(operation_id, request) {
            Ok(r) => r,
            Err(e) => {
                return RemoteAnswer::Done(Settled::FailedFinal {
                    result: serde_json::json!({"not_called": e.to_string()}),
                })
            }
        };
        match self.client.create(tool, operation_id, &request, self.timeout).await {
            Ok((200 | 201, v)) => succeeded(v),
            // The deterministic id exists: ours if it carries our operation_id, else someone else's.
            Ok((409, v)) if v["operation_id"] == operation_id => succeeded(v),
            Ok((s @ (400..=499), v)) => {
                RemoteAnswer::Done(Settled::FailedFinal { result: serde_json::json!({"status": s, "answer": v}) })
            }
            Ok((s, v)) => RemoteAnswer::Unknown(format!("HTTP {s}: {v}")),
            Err(e) => unknown(e),
        }
    }

    async fn query(&self, op: &Operation) -> RemoteAnswer {
        let answer = match self.capability(&op.tool_name) {
            Some(Capability::DeterministicId) => {
                let Some(id) = op.request_body["name"].as_str() else {
                    return RemoteAnswer::Unknown("request has no deterministic id".into());
                };
                self.client.query_resource(&op.tool_name, id, self.timeout).await
            }
            Some(Capability::IdempotencyKey | Capability::OperationQuery) => {
                self.client.query_operation(&op.tool_name, &op.operation_id, self.timeout).await
            }
            _ => return RemoteAnswer::Unknown("the tool offers no query".into()),
        };
        match answer {
            Ok((200, v)) => {
                let resource = v.get("resources").and_then(|r| r.get(0)).cloned().unwrap_or(v);
                if resource["operation_id"] == op.operation_id.as_str() {
                    succeeded(resource)
                } else {
                    RemoteAnswer::Done(Settled::FailedFinal {
                        result: serde_json::json!({"taken_by_other_intent": resource}),
                    })
                }
            }
            Ok((404, _)) => RemoteAnswer::Absent,
            Ok((s, v)) => RemoteAnswer::Unknown(format!("query answered HTTP {s}: {v}")),
            Err(e) => unknown(e),
        }
    }
}
