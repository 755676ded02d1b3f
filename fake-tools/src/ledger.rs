//! The durable ledger: one JSON object per line, appended and fsynced before any response leaves.
//! Reloaded on start, so the tools' memory (idempotency keys, resources) survives their own restart.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A resource was really created.
    Created,
    /// A request was refused (bad input, unknown tool, key reuse with another body).
    Rejected,
    /// A call answered without a new effect (a replay, a conflict, a query), recorded only when
    /// the tools observe their callers' sessions: it carries that observation.
    Answered,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    pub seq: u64,
    pub at: String,
    pub kind: EntryKind,
    pub tool: String,
    pub operation_id: Option<String>,
    pub resource_id: Option<String>,
    pub body_digest: Option<String>,
    pub body: Option<serde_json::Value>,
    pub reason: Option<String>,
    /// The callers' database sessions with an open transaction when the call arrived
    /// ([`crate::observe`]); absent when the tools observe no database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<serde_json::Value>,
}

pub struct Ledger {
    path: PathBuf,
    file: File,
    entries: Vec<Entry>,
}

impl Ledger {
    /// Open (or create) the ledger at `path`, loading what is already there.
    pub fn open(path: &Path) -> std::io::Result<Ledger> {
        let entries = read(path)?;
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Ledger { path: path.to_path_buf(), file, entries })
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append durably; `seq` and `at` are filled in here.
    pub fn append(&mut self, mut e: Entry) -> std::io::Result<Entry> {
        e.seq = self.entries.len() as u64 + 1;
        e.at = now();
        let mut line = serde_json::to_string(&e).expect("entries serialize");
        line.push('\n');
        self.file.write_all(line.as_bytes())?;
        self.file.sync_data()?;
        self.entries.push(e.clone());
        Ok(e)
    }
}

/// Read a ledger file (missing file: empty). A torn last line (a crash mid-write) is ignored.
pub fn read(path: &Path) -> std::io::Result<Vec<Entry>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
}

fn now() -> String {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    format!("{}.{:06}", d.as_secs(), d.subsec_micros())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_survive_reopen() {
        let dir = std::env::temp_dir().join(format!("ledger-test-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("ledger.jsonl");
        {
            let mut l = Ledger::open(&p).unwrap();
            let e = Entry {
                seq: 0,
                at: String::new(),
                kind: EntryKind::Created,
                tool: "idem".into(),
                operation_id: Some("op".into()),
                resource_id: Some("r1".into()),
                body_digest: None,
                body: None,
                reason: None,
                observed: None,
            };
            assert_eq!(l.append(e).unwrap().seq, 1);
        }
        let again = Ledger::open(&p).unwrap();
        assert_eq!(again.entries().len(), 1);
        assert_eq!(again.entries()[0].resource_id.as_deref(), Some("r1"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
