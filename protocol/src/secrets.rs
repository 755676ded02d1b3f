//! Masking of secret fields in request bodies (spec section 12: ledger request bodies are masked,
//! encrypted or stored per data policy).
//!
//! The policy: a caller marks a secret field of a planned request by wrapping its value as
//! `{"$secret": {"name": N, "value": V}}`. Before the intent is digested and registered, [`mask`]
//! replaces each marked value by the reference `{"$secret": N}` and hands the values back, so the
//! ledger table (and the digest, and every log) only ever sees the reference. The worker puts the
//! values into a [`SecretStore`] under the operation_id before the intent commits; the dispatcher
//! [`resolve`]s the references from the same store right before the remote call. A reference whose
//! value is missing is never sent: the call is not made.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The key marking a secret field.
pub const MARK: &str = "$secret";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    #[error("a secret field must be {{\"$secret\": {{\"name\": ..., \"value\": ...}}}} with string name and value; found {0}")]
    Malformed(String),
    #[error("secret '{0}' is marked twice in one request")]
    Duplicate(String),
    #[error("secret '{name}' of operation {operation_id} is not in the secret store")]
    Missing { operation_id: String, name: String },
    #[error("secret store: {0}")]
    Store(String),
}

/// One secret taken out of a request body.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    pub name: String,
    pub value: String,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({}, <masked>)", self.name)
    }
}

/// Replace every marked secret of `body` by its reference; returns the masked body and the values.
pub fn mask(body: &Value) -> Result<(Value, Vec<Secret>), SecretError> {
    let mut found = Vec::new();
    let masked = mask_into(body, &mut found)?;
    Ok((masked, found))
}

fn mask_into(v: &Value, found: &mut Vec<Secret>) -> Result<Value, SecretError> {
    Ok(match v {
        Value::Object(m) if m.contains_key(MARK) => {
            let inner = &m[MARK];
            let (Some(name), Some(value), 1, 2) = (
                inner.get("name").and_then(Value::as_str),
                inner.get("value").and_then(Value::as_str),
                m.len(),
                inner.as_object().map_or(0, |o| o.len()),
            ) else {
                return Err(SecretError::Malformed(describe(inner)));
            };
            if found.iter().any(|s: &Secret| s.name == name) {
                return Err(SecretError::Duplicate(name.into()));
            }
            found.push(Secret { name: name.into(), value: value.into() });
            reference(name)
        }
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| Ok((k.clone(), mask_into(v, found)?))).collect::<Result<_, _>>()?)
        }
        // MUTANT mask-skips-arrays: the masking walks objects but copies arrays as they are.
        Value::Array(a) if crate::mutant::active(crate::mutant::Mutant::MaskSkipsArrays) => Value::Array(a.clone()),
        Value::Array(a) => Value::Array(a.iter().map(|v| mask_into(v, found)).collect::<Result<_, _>>()?),
        other => other.clone(),
    })
}

/// The shape of a marked value without its contents (never print a secret in an error).
fn describe(v: &Value) -> String {
    match v {
        Value::Object(m) => format!("an object with keys {:?}", m.keys().collect::<Vec<_>>()),
        Value::String(_) => "a string".into(),
        other => format!("a {}", if other.is_array() { "list" } else { "scalar" }),
    }
}

/// The reference a masked field holds.
pub fn reference(name: &str) -> Value {
    let mut m = Map::new();
    m.insert(MARK.into(), Value::String(name.into()));
    Value::Object(m)
}

/// Replace every reference in `body` by the value `lookup` gives for its name.
pub fn resolve(
    body: &Value,
    operation_id: &str,
    lookup: &dyn Fn(&str) -> Result<Option<String>, SecretError>,
) -> Result<Value, SecretError> {
    Ok(match body {
        Value::Object(m) if m.len() == 1 && m.get(MARK).is_some_and(Value::is_string) => {
            let name = m[MARK].as_str().unwrap_or_default();
            match lookup(name)? {
                Some(v) => Value::String(v),
                None => return Err(SecretError::Missing { operation_id: operation_id.into(), name: name.into() }),
            }
        }
        Value::Object(m) => Value::Object(
            m.iter().map(|(k, v)| Ok((k.clone(), resolve(v, operation_id, lookup)?))).collect::<Result<_, _>>()?,
        ),
        Value::Array(a) => Value::Array(a.iter().map(|v| resolve(v, operation_id, lookup)).collect::<Result<_, _>>()?),
        other => other.clone(),
    })
}

/// A secret store shared by the workers and dispatchers of one deployment: here a directory with
/// one 0600 file per (operation_id, name); in production a vault with the same two calls.
#[derive(Debug, Clone)]
pub struct SecretStore {
    dir: PathBuf,
}

impl SecretStore {
    pub fn new(dir: &Path) -> Result<SecretStore, SecretError> {
        std::fs::create_dir_all(dir).map_err(|e| SecretError::Store(format!("{}: {e}", dir.display())))?;
        Ok(SecretStore { dir: dir.to_path_buf() })
    }

    fn path(&self, operation_id: &str, name: &str) -> PathBuf {
        let key = Sha256::digest(format!("{operation_id}\n{name}").as_bytes());
        self.dir.join(key.iter().map(|b| format!("{b:02x}")).collect::<String>())
    }

    /// Store a value (before the intent that references it commits).
    pub fn put(&self, operation_id: &str, s: &Secret) -> Result<(), SecretError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.path(operation_id, &s.name);
        let tmp = path.with_extension("tmp");
        let err = |e: std::io::Error| SecretError::Store(format!("{}: {e}", tmp.display()));
        let mut f =
            std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp).map_err(err)?;
        f.write_all(s.value.as_bytes()).map_err(err)?;
        f.sync_all().map_err(err)?;
        std::fs::rename(&tmp, &path).map_err(err)
    }

    /// Read a value back (the dispatcher, right before the call).
    pub fn get(&self, operation_id: &str, name: &str) -> Result<Option<String>, SecretError> {
        match std::fs::read_to_string(self.path(operation_id, name)) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(SecretError::Store(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn masking_keeps_references_and_drops_every_value() {
        let body = json!({"amount": 5, "auth": {"$secret": {"name": "api-key", "value": "sk_live_123"}},
                          "cards": [{"$secret": {"name": "pan", "value": "4111111111111111"}}]});
        let (masked, secrets) = mask(&body).unwrap();
        assert_eq!(masked, json!({"amount": 5, "auth": {"$secret": "api-key"}, "cards": [{"$secret": "pan"}]}));
        let text = masked.to_string();
        assert!(!text.contains("sk_live_123") && !text.contains("4111111111111111"));
        assert_eq!(secrets.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), vec!["api-key", "pan"]);
        assert!(!format!("{secrets:?}").contains("sk_live"), "Debug never prints a value");
    }

    #[test]
    fn malformed_or_duplicate_marks_are_refused_without_echoing_the_value() {
        let e = mask(&json!({"a": {"$secret": "sk_live_raw"}})).unwrap_err();
        assert!(matches!(e, SecretError::Malformed(_)) && !e.to_string().contains("sk_live_raw"), "{e}");
        let e = mask(&json!({"a": {"$secret": {"name": "k", "value": 7}}})).unwrap_err();
        assert!(matches!(e, SecretError::Malformed(_)));
        let dup = json!([{"$secret": {"name": "k", "value": "1"}}, {"$secret": {"name": "k", "value": "2"}}]);
        assert_eq!(mask(&dup).unwrap_err(), SecretError::Duplicate("k".into()));
    }

    #[test]
    fn store_round_trip_and_resolution() {
        let dir = std::env::temp_dir().join(format!("fp-secrets-{}", uuid::Uuid::new_v4()));
        let store = SecretStore::new(&dir).unwrap();
        let body = json!({"auth": {"$secret": {"name": "api-key", "value": "sk_live_9"}}, "n": 1});
        let (masked, secrets) = mask(&body).unwrap();
        for s in &secrets {
            store.put("op/1", s).unwrap();
        }
        let lookup = |name: &str| store.get("op/1", name);
        assert_eq!(resolve(&masked, "op/1", &lookup).unwrap(), json!({"auth": "sk_live_9", "n": 1}));
        let other = |name: &str| store.get("op/2", name);
        assert_eq!(
            resolve(&masked, "op/2", &other).unwrap_err(),
            SecretError::Missing { operation_id: "op/2".into(), name: "api-key".into() }
        );
        let mode = std::fs::metadata(store.path("op/1", "api-key")).unwrap().permissions();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777, 0o600);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
