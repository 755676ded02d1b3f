//! Who made a tool call, as the harness can prove it: the tools record the calling process's
//! group (from the kernel's socket tables, see the fake tools' `caller` module) and the harness's
//! timeline records each worker process it started (its pid, which leads a process group of its
//! own, and its owner id, the application_name of its database sessions). Together they name the
//! owner whose process made the call, so a check blames a session only for its own calls.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::record::timeline::Entry;

/// The worker processes of a row, by process group.
#[derive(Debug, Clone, Default)]
pub struct Callers {
    by_group: BTreeMap<i64, String>,
}

/// Whose a call was, or why it cannot be said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The call came from the process group of the worker started with this owner id.
    Owner(String),
    /// The tools did not record the caller, or it is no worker the harness started.
    Unknown(String),
}

impl Callers {
    /// From the timeline's `spawn` entries that name an owner (or an application_name).
    pub fn from_timeline(entries: &[Entry]) -> Callers {
        let mut by_group = BTreeMap::new();
        for e in entries.iter().filter(|e| e.action == "spawn") {
            let owner = e.detail["owner"].as_str().or(e.detail["application_name"].as_str());
            if let (Some(pid), Some(owner)) = (e.detail["pid"].as_i64(), owner) {
                by_group.insert(pid, owner.to_string());
            }
        }
        Callers { by_group }
    }

    /// From explicit (process group, owner) pairs.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (i64, &'a str)>) -> Callers {
        Callers { by_group: pairs.into_iter().map(|(g, o)| (g, o.to_string())).collect() }
    }

    /// The owner whose process made the call of a ledger entry (its `observed.caller`).
    pub fn of(&self, entry: &Value) -> Caller {
        let c = &entry["observed"]["caller"];
        match c["pgid"].as_i64() {
            Some(g) => match self.by_group.get(&g) {
                Some(o) => Caller::Owner(o.clone()),
                None => Caller::Unknown(format!("process group {g} (pid {}) is no worker of this row", c["pid"])),
            },
            None => Caller::Unknown(c["error"].as_str().unwrap_or("the tools did not record the caller").to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spawn(detail: Value) -> Entry {
        Entry {
            at_ms: 0.0,
            wall: chrono::Utc::now(),
            actor: "harness".into(),
            action: "spawn".into(),
            target: "w".into(),
            detail,
            fault: None,
        }
    }

    #[test]
    fn a_call_is_its_process_groups_owner() {
        let c = Callers::from_timeline(&[
            spawn(json!({"pid": 100, "owner": "worker-d1-aa"})),
            spawn(json!({"pid": 200, "application_name": "lib-b"})),
            spawn(json!({"pid": 300, "addr": "127.0.0.1:1"})),
        ]);
        let call = |g: i64| json!({"observed": {"caller": {"pid": g + 1, "pgid": g}}});
        assert_eq!(c.of(&call(100)), Caller::Owner("worker-d1-aa".into()));
        assert_eq!(c.of(&call(200)), Caller::Owner("lib-b".into()));
        assert!(matches!(c.of(&call(300)), Caller::Unknown(w) if w.contains("process group 300")));
        let lost = json!({"observed": {"caller": {"error": "no socket"}}});
        assert_eq!(c.of(&lost), Caller::Unknown("no socket".into()));
        assert!(matches!(c.of(&json!({"observed": {}})), Caller::Unknown(_)));
    }
}
