//! The four capability classes of spec section 09 and what each promises:
//!
//! | tool | capability | create | query |
//! |---|---|---|---|
//! | `idem` | durable idempotency key | same key + same body: the same resource again; same key + other body: 422 | by operation_id |
//! | `detid` | deterministic resource id + query | the id comes from the request's `name`; a second create of it: 409 with the existing resource and its tag | by resource id |
//! | `opquery` | operation query only | always a new resource | by operation_id |
//! | `plain` | neither | always a new resource | none |
//!
//! Every real creation and every refused request is written to the ledger before any answer.

use serde_json::{json, Value};

use crate::digest::canonical_digest;
use crate::ledger::{Entry, EntryKind, Ledger};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    IdempotencyKey,
    DeterministicId,
    OperationQuery,
    Neither,
}

pub const TOOLS: &[(&str, Capability)] = &[
    ("idem", Capability::IdempotencyKey),
    ("detid", Capability::DeterministicId),
    ("opquery", Capability::OperationQuery),
    ("plain", Capability::Neither),
];

pub fn capability(tool: &str) -> Option<Capability> {
    TOOLS.iter().find(|(t, _)| *t == tool).map(|(_, c)| *c)
}

/// An HTTP status and JSON body.
pub type Reply = (u16, Value);

pub struct Tools {
    ledger: Ledger,
    /// The observation of the call being handled ([`crate::observe`]), recorded in its entry.
    observing: Option<Value>,
}

fn resource_json(e: &Entry) -> Value {
    json!({ "tool": e.tool, "resource_id": e.resource_id, "operation_id": e.operation_id, "body_digest": e.body_digest })
}

impl Tools {
    pub fn new(ledger: Ledger) -> Tools {
        Tools { ledger, observing: None }
    }

    /// Append `e` with the observation of the call being handled, if any.
    fn record(&mut self, mut e: Entry) -> std::io::Result<Entry> {
        e.observed = self.observing.take();
        self.ledger.append(e)
    }

    /// Handle one call with `observed` (what the tools saw of their callers' sessions) recorded in
    /// its ledger entry: the created or rejected entry, else an `answered` one (a replay, a
    /// conflict, a query), under `operation_id` (the caller's; else the answered resource's tag).
    /// Without an observation it is `call` itself and records nothing more.
    pub fn observed_call(
        &mut self,
        observed: Option<Value>,
        operation_id: Option<&str>,
        tool: &str,
        call: impl FnOnce(&mut Tools) -> std::io::Result<Reply>,
    ) -> std::io::Result<Reply> {
        self.observing = observed;
        let reply = call(self);
        if let (Some(o), Ok((status, body))) = (self.observing.take(), &reply) {
            let op = operation_id.or(body["operation_id"].as_str()).map(str::to_string);
            self.ledger.append(Entry {
                seq: 0,
                at: String::new(),
                kind: EntryKind::Answered,
                tool: tool.into(),
                operation_id: op,
                resource_id: body["resource_id"].as_str().map(str::to_string),
                body_digest: None,
                body: None,
                reason: Some(format!("answered {status}")),
                observed: Some(o),
            })?;
        }
        self.observing = None;
        reply
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    fn created(&self) -> impl Iterator<Item = &Entry> {
        self.ledger.entries().iter().filter(|e| e.kind == EntryKind::Created)
    }

    /// Refuse a request, recording why. Never panics on bad input.
    pub fn reject(
        &mut self,
        tool: &str,
        operation_id: Option<String>,
        status: u16,
        reason: &str,
    ) -> std::io::Result<Reply> {
        self.record(Entry {
            seq: 0,
            at: String::new(),
            kind: EntryKind::Rejected,
            tool: tool.into(),
            operation_id,
            resource_id: None,
            body_digest: None,
            body: None,
            reason: Some(reason.into()),
            observed: None,
        })?;
        Ok((status, json!({ "error": reason })))
    }

    /// `POST /tools/<tool>/create` with body `{"operation_id": "...", "request": {...}}`.
    pub fn create(&mut self, tool: &str, body: &[u8]) -> std::io::Result<Reply> {
        let Some(cap) = capability(tool) else {
            return self.reject(tool, None, 404, &format!("unknown tool '{tool}'"));
        };
        let parsed: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => return self.reject(tool, None, 400, &format!("malformed JSON: {e}")),
        };
        let Some(op) = parsed.get("operation_id").and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string)
        else {
            return self.reject(tool, None, 400, "operation_id (a non-empty string) is required");
        };
        let Some(request) = parsed.get("request").filter(|r| r.is_object()).cloned() else {
            return self.reject(tool, Some(op), 400, "request (an object) is required");
        };
        let digest = canonical_digest(&request);
        let resource_id = match cap {
            Capability::IdempotencyKey => {
                let seen = self
                    .created()
                    .find(|e| e.tool == tool && e.operation_id.as_deref() == Some(&op))
                    .map(|e| (e.body_digest.as_deref() == Some(&digest), resource_json(e)));
                if let Some((same_body, mut r)) = seen {
                    if same_body {
                        r["replayed"] = json!(true);
                        return Ok((200, r));
                    }
                    return self.reject(tool, Some(op), 422, "idempotency key reused with a different body");
                }
                format!("idem-{}", uuid::Uuid::new_v4().simple())
            }
            Capability::DeterministicId => {
                let Some(name) =
                    request.get("name").and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string)
                else {
                    return self.reject(tool, Some(op), 400, "request.name (the resource id) is required");
                };
                if let Some(e) = self.created().find(|e| e.tool == tool && e.resource_id.as_deref() == Some(&name)) {
                    let mut r = resource_json(e);
                    r["error"] = json!("resource exists");
                    return Ok((409, r));
                }
                name
            }
            Capability::OperationQuery | Capability::Neither => format!("{tool}-{}", uuid::Uuid::new_v4().simple()),
        };
        let e = self.record(Entry {
            seq: 0,
            at: String::new(),
            kind: EntryKind::Created,
            tool: tool.into(),
            operation_id: Some(op),
            resource_id: Some(resource_id),
            body_digest: Some(digest),
            body: Some(request),
            reason: None,
            observed: None,
        })?;
        Ok((201, resource_json(&e)))
    }

    /// `GET /tools/<tool>/operations/<operation_id>`.
    pub fn query_operation(&mut self, tool: &str, op: &str) -> std::io::Result<Reply> {
        match capability(tool) {
            None => self.reject(tool, Some(op.into()), 404, &format!("unknown tool '{tool}'")),
            Some(Capability::IdempotencyKey | Capability::OperationQuery) => {
                let found: Vec<Value> = self
                    .created()
                    .filter(|e| e.tool == tool && e.operation_id.as_deref() == Some(op))
                    .map(resource_json)
                    .collect();
                Ok(if found.is_empty() {
                    (404, json!({ "error": "no such operation" }))
                } else {
                    (200, json!({ "resources": found }))
                })
            }
            Some(_) => Ok((405, json!({ "error": format!("{tool} offers no query by operation") }))),
        }
    }

    /// `GET /tools/<tool>/resources/<resource_id>`.
    pub fn query_resource(&mut self, tool: &str, id: &str) -> std::io::Result<Reply> {
        match capability(tool) {
            None => self.reject(tool, None, 404, &format!("unknown tool '{tool}'")),
            Some(Capability::DeterministicId) => {
                Ok(match self.created().find(|e| e.tool == tool && e.resource_id.as_deref() == Some(id)) {
                    Some(e) => (200, resource_json(e)),
                    None => (404, json!({ "error": "no such resource" })),
                })
            }
            Some(_) => Ok((405, json!({ "error": format!("{tool} offers no query by resource id") }))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> (Tools, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("tools-test-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        (Tools::new(Ledger::open(&dir.join("l.jsonl")).unwrap()), dir)
    }

    fn body(op: &str, req: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({ "operation_id": op, "request": req })).unwrap()
    }

    fn created(t: &Tools) -> usize {
        t.created().count()
    }

    #[test]
    fn idempotency_key_replays_and_refuses_a_changed_body() {
        let (mut t, dir) = tools();
        let (s1, r1) = t.create("idem", &body("op1", json!({"n": 1}))).unwrap();
        let (s2, r2) = t.create("idem", &body("op1", json!({"n": 1}))).unwrap();
        assert_eq!((s1, s2), (201, 200));
        assert_eq!(r1["resource_id"], r2["resource_id"]);
        assert_eq!(t.create("idem", &body("op1", json!({"n": 2}))).unwrap().0, 422);
        assert_eq!(created(&t), 1);
        assert_eq!(t.query_operation("idem", "op1").unwrap().0, 200);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn deterministic_id_conflicts_with_its_tag() {
        let (mut t, dir) = tools();
        assert_eq!(t.create("detid", &body("op1", json!({"name": "vm-1"}))).unwrap().0, 201);
        let (s, r) = t.create("detid", &body("op2", json!({"name": "vm-1"}))).unwrap();
        assert_eq!((s, r["operation_id"].as_str()), (409, Some("op1")));
        assert_eq!(t.query_resource("detid", "vm-1").unwrap().0, 200);
        assert_eq!(t.query_operation("detid", "op1").unwrap().0, 405);
        assert_eq!(created(&t), 1);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn plain_and_opquery_create_every_time() {
        let (mut t, dir) = tools();
        for tool in ["plain", "opquery"] {
            t.create(tool, &body("op1", json!({}))).unwrap();
            t.create(tool, &body("op1", json!({}))).unwrap();
        }
        assert_eq!(created(&t), 4);
        assert_eq!(t.query_operation("opquery", "op1").unwrap().1["resources"].as_array().unwrap().len(), 2);
        assert_eq!(t.query_operation("plain", "op1").unwrap().0, 405);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn an_observation_goes_into_the_calls_entry_or_an_answered_one() {
        let (mut t, dir) = tools();
        let seen = || Some(json!({"sessions": [{"application_name": "worker-d-1", "held": true}]}));
        let b = body("op1", json!({"n": 1}));
        assert_eq!(t.observed_call(seen(), Some("op1"), "idem", |t| t.create("idem", &b)).unwrap().0, 201);
        assert_eq!(t.observed_call(seen(), Some("op1"), "idem", |t| t.create("idem", &b)).unwrap().0, 200);
        assert_eq!(t.observed_call(seen(), Some("op1"), "idem", |t| t.query_operation("idem", "op1")).unwrap().0, 200);
        assert_eq!(t.observed_call(None, Some("op1"), "idem", |t| t.create("idem", &b)).unwrap().0, 200);
        let kinds: Vec<_> = t.ledger().entries().iter().map(|e| (e.kind.clone(), e.observed.is_some())).collect();
        assert_eq!(
            kinds,
            [(EntryKind::Created, true), (EntryKind::Answered, true), (EntryKind::Answered, true)],
            "an unobserved call adds nothing"
        );
        assert!(t.ledger().entries().iter().all(|e| e.operation_id.as_deref() == Some("op1")));
        assert_eq!(created(&t), 1);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn bad_input_is_refused_and_recorded() {
        let (mut t, dir) = tools();
        assert_eq!(t.create("nope", &body("op", json!({}))).unwrap().0, 404);
        assert_eq!(t.create("idem", b"{not json").unwrap().0, 400);
        assert_eq!(t.create("idem", &serde_json::to_vec(&json!({"request": {}})).unwrap()).unwrap().0, 400);
        assert_eq!(t.create("detid", &body("op", json!({}))).unwrap().0, 400);
        assert_eq!(created(&t), 0);
        assert_eq!(t.ledger().entries().iter().filter(|e| e.kind == EntryKind::Rejected).count(), 4);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
