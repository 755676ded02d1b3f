//! Checks of the operation ledger against the remote side: the fake tools' fsynced ledger of what
//! they really created is the truth, the `tool_operations` rows are the protocol's claim about it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Check;

/// A checker's name (the rule catalogue links rules to it).
pub const SETTLED_AGREE: &str = "a settled operation's status agrees with the tools' ledger";

/// A checker's name (the rule catalogue links rules to it).
pub const EFFECTS_REGISTERED: &str = "every remote effect carries a registered operation_id and its request";

/// A `tool_operations` row as it stands at the end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct OperationRow {
    pub operation_id: String,
    pub tool_name: String,
    pub status: String,
    pub request_digest: String,
    /// Its registered request holds secret references: the tool receives the values, which the
    /// registered digest does not cover, so the effect's digest is not compared (the masking
    /// rule judges such requests).
    #[sqlx(default)]
    #[serde(default)]
    pub carries_secrets: bool,
}

/// The created entries of the tools' ledger, by operation id.
fn created(entries: &[Value]) -> BTreeMap<String, Vec<&Value>> {
    let mut m: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for e in entries.iter().filter(|e| e["kind"] == "created") {
        m.entry(e["operation_id"].as_str().unwrap_or_default().to_string()).or_default().push(e);
    }
    m
}

/// Every real side effect was made for a registered intent, under its operation_id (the
/// idempotency key) and with its request: nothing is sent under an invented key or a changed body.
pub fn effects_are_registered_intents(entries: &[Value], ops: &[OperationRow]) -> Check {
    let name = EFFECTS_REGISTERED;
    let by_id: BTreeMap<&str, &OperationRow> = ops.iter().map(|o| (o.operation_id.as_str(), o)).collect();
    let mut bad = Vec::new();
    let mut judged = 0;
    for (op, effects) in created(entries) {
        for e in effects {
            judged += 1;
            match by_id.get(op.as_str()) {
                None => bad.push(format!("{} effect {} under unregistered key '{op}'", e["tool"], e["seq"])),
                Some(row) if !row.carries_secrets && e["body_digest"].as_str() != Some(row.request_digest.as_str()) => {
                    bad.push(format!(
                        "{} effect {} of {op}: request digest {} differs from the registered {}",
                        e["tool"], e["seq"], e["body_digest"], row.request_digest
                    ))
                }
                Some(row) if e["tool"].as_str() != Some(row.tool_name.as_str()) => {
                    bad.push(format!("{op} registered for {} reached {}", row.tool_name, e["tool"]))
                }
                Some(_) => {}
            }
        }
    }
    if bad.is_empty() {
        Check::pass(name, format!("{judged} remote effects, each of a registered intent"))
    } else {
        Check::fail(name, bad.join("; "))
    }
}

/// A settled status agrees with the remote: `failed_final` only when nothing was created,
/// `succeeded` only when the remote holds the effect. (An effect that cannot be confirmed stays
/// `unknown`; declaring it failed is the bug of spec §01 and §09.3.)
pub fn settled_statuses_agree_with_the_remote(entries: &[Value], ops: &[OperationRow]) -> Check {
    let name = SETTLED_AGREE;
    let made = created(entries);
    let mut bad = Vec::new();
    let mut judged = 0;
    for o in ops {
        let n = made.get(&o.operation_id).map_or(0, Vec::len);
        match o.status.as_str() {
            "failed_final" => {
                judged += 1;
                if n > 0 {
                    bad.push(format!(
                        "{} is failed_final, but {} created it ({n} effect(s))",
                        o.operation_id, o.tool_name
                    ));
                }
            }
            "succeeded" => {
                judged += 1;
                if n == 0 {
                    bad.push(format!("{} is succeeded, but {} has no effect for it", o.operation_id, o.tool_name));
                }
            }
            _ => {}
        }
    }
    if bad.is_empty() {
        Check::pass(name, format!("{judged} settled operations, each as the remote recorded it"))
    } else {
        Check::fail(name, bad.join("; "))
    }
}

pub fn all(entries: &[Value], ops: &[OperationRow]) -> Vec<Check> {
    vec![effects_are_registered_intents(entries, ops), settled_statuses_agree_with_the_remote(entries, ops)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op(id: &str, status: &str) -> OperationRow {
        OperationRow {
            operation_id: id.into(),
            tool_name: "idem".into(),
            status: status.into(),
            request_digest: "d1".into(),
            carries_secrets: false,
        }
    }

    fn effect(id: &str, digest: &str) -> Value {
        json!({"seq": 1, "kind": "created", "tool": "idem", "operation_id": id, "body_digest": digest})
    }

    #[test]
    fn an_effect_under_an_invented_key_fails() {
        assert!(effects_are_registered_intents(&[effect("t/r/s/v1", "d1")], &[op("t/r/s/v1", "succeeded")]).passed());
        let c = effects_are_registered_intents(&[effect("t/r/s/v1-retry", "d1")], &[op("t/r/s/v1", "unknown")]);
        assert!(!c.passed() && c.evidence.contains("unregistered"), "{}", c.evidence);
        assert!(!effects_are_registered_intents(&[effect("t/r/s/v1", "d2")], &[op("t/r/s/v1", "succeeded")]).passed());
        // A request with secrets reaches the tool with the values: its digest is not the registered one.
        let secret = OperationRow { carries_secrets: true, ..op("t/r/s/v1", "succeeded") };
        assert!(effects_are_registered_intents(&[effect("t/r/s/v1", "d2")], std::slice::from_ref(&secret)).passed());
        assert!(!effects_are_registered_intents(&[effect("t/r/s/v1-x", "d2")], &[secret]).passed());
    }

    #[test]
    fn failed_with_an_effect_or_succeeded_without_one_fails() {
        let ops = [op("a", "failed_final")];
        assert!(settled_statuses_agree_with_the_remote(&[], &ops).passed());
        assert!(!settled_statuses_agree_with_the_remote(&[effect("a", "d1")], &ops).passed());
        assert!(!settled_statuses_agree_with_the_remote(&[], &[op("a", "succeeded")]).passed());
        assert!(settled_statuses_agree_with_the_remote(&[], &[op("a", "unknown")]).passed());
    }
}
