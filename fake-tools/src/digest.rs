//! The digest of a request body: SHA-256 over its canonical JSON (RFC 8785), hex-encoded, so two
//! bodies that differ only in key order or number spelling have the same digest.

use sha2::{Digest, Sha256};

pub fn canonical_digest(v: &serde_json::Value) -> String {
    let canon = serde_json_canonicalizer::to_string(v).expect("a JSON value always canonicalizes");
    let hash = Sha256::digest(canon.as_bytes());
    hash.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_does_not_change_the_digest() {
        let a: serde_json::Value = serde_json::from_str(r#"{"b": 1, "a": [1, 2, {"y": 2, "x": 1}]}"#).unwrap();
        let b: serde_json::Value = serde_json::from_str(r#"{"a": [1, 2, {"x": 1, "y": 2}], "b": 1.0}"#).unwrap();
        assert_eq!(canonical_digest(&a), canonical_digest(&b));
        assert_ne!(canonical_digest(&a), canonical_digest(&json!({"b": 2, "a": [1, 2, {"x": 1, "y": 2}]})));
        assert_eq!(canonical_digest(&a).len(), 64);
    }
}
