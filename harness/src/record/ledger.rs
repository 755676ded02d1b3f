//! Reading the fake tools' ledger file: the side effects that really happened. Parsed here on its
//! own terms (JSON lines), not through the tools' code.

use std::path::Path;

use serde_json::Value;

use crate::error::Result;

/// Every entry of the ledger, in order (a torn last line is ignored).
pub fn entries(path: &Path) -> Result<Vec<Value>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    Ok(text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
}

/// Resources really created for `operation_id`.
pub fn created_for<'a>(entries: &'a [Value], operation_id: &str) -> Vec<&'a Value> {
    entries.iter().filter(|e| e["kind"] == "created" && e["operation_id"] == operation_id).collect()
}
