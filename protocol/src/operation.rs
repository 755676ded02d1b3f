//! Side-effect intents (spec section 08): the operation_id and the request digest.
//!
//! An operation_id expresses one business intent: `<tenant>/<run_id>/<step_id>/v<effect_version>`.
//! By construction it never contains a worker id, an epoch, a retry count or a time, so a takeover
//! or a retry of the same step in the same run always names the same intent. A retry is a new
//! run, so it carries a new run_id and gets its own operation_ids.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::error::ProtocolError;

/// One business intent to call a tool, as registered in `tool_operations`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Intent {
    pub operation_id: String,
    pub run_id: Uuid,
    pub step_id: String,
    pub effect_version: i32,
    pub tool_name: String,
    pub request_body: Value,
}

fn component(name: &str, v: &str) -> Result<(), ProtocolError> {
    if v.is_empty() || v.contains('/') || v.chars().any(char::is_whitespace) {
        return Err(ProtocolError::InvalidIntent(format!("{name} {v:?} must be non-empty, without '/' or spaces")));
    }
    Ok(())
}

/// The operation_id of (tenant, run, step, effect_version).
pub fn operation_id(tenant: &str, run_id: Uuid, step_id: &str, effect_version: i32) -> Result<String, ProtocolError> {
    component("tenant", tenant)?;
    component("step_id", step_id)?;
    if effect_version <= 0 {
        return Err(ProtocolError::InvalidIntent(format!("effect_version {effect_version} must be > 0")));
    }
    Ok(format!("{tenant}/{run_id}/{step_id}/v{effect_version}"))
}

/// The (tenant, run, step, effect_version) an operation_id of [`operation_id`]'s form names;
/// `None` for any other string.
pub fn parse_operation_id(op: &str) -> Option<(String, Uuid, String, i32)> {
    let mut parts = op.split('/');
    let (tenant, run, step, version) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || tenant.is_empty() || step.is_empty() {
        return None;
    }
    let version: i32 = version.strip_prefix('v')?.parse().ok().filter(|v| *v > 0)?;
    Some((tenant.to_string(), run.parse().ok()?, step.to_string(), version))
}

/// SHA-256 (hex) of the RFC 8785 canonical JSON of `body`: key order and number spelling do not
/// change it.
pub fn request_digest(body: &Value) -> String {
    let canon = serde_json_canonicalizer::to_string(body).expect("a JSON value always canonicalizes");
    Sha256::digest(canon.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

impl Intent {
    pub fn new(
        tenant: &str,
        run_id: Uuid,
        step_id: &str,
        effect_version: i32,
        tool_name: &str,
        request_body: Value,
    ) -> Result<Intent, ProtocolError> {
        component("tool_name", tool_name)?;
        Ok(Intent {
            operation_id: operation_id(tenant, run_id, step_id, effect_version)?,
            run_id,
            step_id: step_id.into(),
            effect_version,
            tool_name: tool_name.into(),
            request_body,
        })
    }

    pub fn digest(&self) -> String {
        request_digest(&self.request_body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_operation_id_parses_back_into_its_intent() {
        let run = Uuid::new_v4();
        let op = operation_id("t1", run, "step-3", 2).unwrap();
        assert_eq!(parse_operation_id(&op), Some(("t1".into(), run, "step-3".into(), 2)));
        assert_eq!(parse_operation_id(&format!("t1/{run}/s/v0")), None);
        assert_eq!(parse_operation_id(&format!("t1/{run}/s/v1/x")), None);
        assert_eq!(parse_operation_id("t1/not-a-uuid/s/v1"), None);
    }

    #[test]
    fn operation_id_names_the_intent_only() {
        let run = Uuid::nil();
        let id = operation_id("acme", run, "charge", 1).unwrap();
        assert_eq!(id, format!("acme/{run}/charge/v1"));
        // Same intent, same id: nothing about who or when goes in.
        assert_eq!(id, operation_id("acme", run, "charge", 1).unwrap());
        assert_ne!(id, operation_id("acme", Uuid::new_v4(), "charge", 1).unwrap(), "a new run is a new intent");
        assert_ne!(id, operation_id("acme", run, "charge", 2).unwrap(), "a modified effect bumps effect_version");
        assert!(operation_id("ac/me", run, "charge", 1).is_err());
        assert!(operation_id("acme", run, "", 1).is_err());
        assert!(operation_id("acme", run, "charge", 0).is_err());
    }

    #[test]
    fn digest_is_canonical() {
        let a: Value = serde_json::from_str(r#"{"amount": 10, "to": {"iban": "X", "name": "Y"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"to": {"name": "Y", "iban": "X"}, "amount": 10.0}"#).unwrap();
        assert_eq!(request_digest(&a), request_digest(&b));
        assert_ne!(request_digest(&a), request_digest(&json!({"amount": 11, "to": {"iban": "X", "name": "Y"}})));
    }
}
