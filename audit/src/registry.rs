//! A library's registry of live workers (`Library::registry`), watched by the commit triggers like
//! its job table, and what a cell's note says from it when the cell's outcome hangs on it:
//!
//! - under one worker name shared by A and a restarted B (the registry keyed by the name), the
//!   library sees the name alive while B's heartbeats commit in time; a recovery that takes back
//!   only the jobs of a silent name takes A's job only when the name's heartbeats lapse past the
//!   stall threshold, which with B alive only a stall of B itself brings (a loaded machine). The
//!   note gives the longest silence of the name after A's pause, so either outcome says why;
//! - A's registration deleted by another worker, in a registry that numbers its workers (a library
//!   that prunes stalled workers when one starts), leaves A unregistered when it comes back.

use chrono::{DateTime, Utc};
use serde_json::Value;

use fenceproof_harness::record::audit_commits::AuditCommit;

use super::experiments::AuditExperiment;
use super::libraries::{Library, Registry};

/// The registry key of a row, as text.
fn key_of(reg: &Registry, row: Option<&Value>) -> Option<String> {
    match row.map(|r| &r[reg.key])? {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        v => Some(v.to_string()),
    }
}

/// The keys of the registrations process `writer` ("A", "B") inserted or updated.
fn keys_written(reg: &Registry, commits: &[AuditCommit], writer: &str) -> Vec<String> {
    let app = format!("fp-audit-{writer}");
    let mut keys: Vec<String> = commits
        .iter()
        .filter(|c| c.table_name == reg.table && c.writer == app)
        .filter_map(|c| key_of(reg, c.new_row.as_ref()))
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// A silence of one registration: no heartbeat of it committed from `from` to `to`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gap {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
}

impl Gap {
    pub fn secs(&self) -> f64 {
        (self.to - self.from).num_milliseconds() as f64 / 1000.0
    }
}

/// The longest silence of registration `key` (no insert or update of its row committed, by anyone)
/// that ends after `after` and before `until`, counting the silence from its last heartbeat to
/// `until`. `None` when it has no heartbeat before `until`.
pub fn longest_gap(
    reg: &Registry,
    commits: &[AuditCommit],
    key: &str,
    after: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Option<Gap> {
    let mut beats: Vec<DateTime<Utc>> = commits
        .iter()
        .filter(|c| c.table_name == reg.table && c.committed_at < until)
        .filter(|c| key_of(reg, c.new_row.as_ref()).as_deref() == Some(key))
        .map(|c| c.committed_at)
        .collect();
    beats.sort();
    beats.push(until);
    beats.windows(2).map(|w| Gap { from: w[0], to: w[1] }).filter(|g| g.to > after).max_by_key(|g| g.to - g.from)
}

/// The note on a worker name shared by A and B (the same-name cells, a registry keyed by the
/// name): the name's longest silence after A's pause (`paused`) until the takeover (`taken`, B's
/// first commit of the job) or, without one, until `end`.
pub fn shared_name_note(
    lib: &Library,
    commits: &[AuditCommit],
    paused: DateTime<Utc>,
    taken: Option<DateTime<Utc>>,
    end: DateTime<Utc>,
    stall: f64,
) -> Option<String> {
    let reg = lib.registry.filter(|r| r.named)?;
    let shared: Vec<String> = keys_written(&reg, commits, "B");
    let key = shared.iter().find(|k| keys_written(&reg, commits, "A").contains(k))?;
    let gap = longest_gap(&reg, commits, key, paused, taken.unwrap_or(end))?;
    let secs = gap.secs();
    let span = format!("{:.1} s ({}-{})", secs, gap.from.format("%H:%M:%S%.3f"), gap.to.format("%H:%M:%S%.3f"));
    let name = format!("worker name `{key}`, shared by A and B ({}: {})", reg.table, reg.why);
    Some(match taken {
        Some(_) if secs > stall => format!(
            "{name}: its heartbeats lapsed {span} before the takeover, over the {stall} s threshold: B itself stalled, and the recovery took the job of a silent name; with B's heartbeats in time the job stays with A (NO TAKEOVER)"
        ),
        Some(_) => format!(
            "{name}: its longest silence before the takeover {span}, within the {stall} s threshold"
        ),
        None => format!(
            "{name}: B's heartbeats kept it alive (its longest silence after A's pause {span}, within the {stall} s threshold), so the job stays with A; only a lapse past the threshold (B itself stalled) lets the recovery take it"
        ),
    })
}

/// A's registrations deleted by another process, in a registry whose keys the library numbers (a
/// named registration comes back with the worker's next heartbeat): each named, with who deleted it
/// and when.
pub fn pruned_note(lib: &Library, commits: &[AuditCommit]) -> Option<String> {
    let reg = lib.registry.filter(|r| !r.named)?;
    let mine = keys_written(&reg, commits, "A");
    let pruned: Vec<String> = commits
        .iter()
        .filter(|c| c.table_name == reg.table && c.op == "DELETE" && c.writer != "fp-audit-A")
        .filter_map(|c| {
            let key = key_of(&reg, c.old_row.as_ref())?;
            mine.contains(&key).then(|| {
                let by = c.writer.strip_prefix("fp-audit-").unwrap_or(&c.writer);
                format!("{} {key} by {by} at {}", reg.key, c.committed_at.format("%H:%M:%S%.3f"))
            })
        })
        .collect();
    (!pruned.is_empty())
        .then(|| format!("A's worker registration deleted ({}: {}): {}", reg.table, reg.why, pruned.join(", ")))
}

/// Every registry note of the cell.
pub fn notes(
    lib: &Library,
    exp: &AuditExperiment,
    commits: &[AuditCommit],
    paused: Option<DateTime<Utc>>,
    taken: Option<DateTime<Utc>>,
    end: DateTime<Utc>,
    stall_s: f64,
) -> Vec<String> {
    let shared = match (exp.same_name, paused) {
        (true, Some(p)) => shared_name_note(lib, commits, p, taken, end, stall_s),
        _ => None,
    };
    shared.into_iter().chain(pruned_note(lib, commits)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_800_000_000_000 + ms).expect("a time")
    }

    fn commit(
        seq: i64,
        table: &str,
        op: &str,
        writer: &str,
        ms: i64,
        old: Option<Value>,
        new: Option<Value>,
    ) -> AuditCommit {
        AuditCommit {
            seq,
            table_name: table.into(),
            op: op.into(),
            writer: format!("fp-audit-{writer}"),
            backend_pid: 1,
            committed_at: at(ms),
            old_row: old,
            new_row: new,
        }
    }

    fn lib(name: &str) -> Library {
        *crate::libraries::LIBRARIES.iter().find(|l| l.name == name).expect("a library")
    }

    fn beat(seq: i64, writer: &str, ms: i64) -> AuditCommit {
        let row = json!({"worker_id": "A"});
        commit(seq, "public.chancy_workers", "UPDATE", writer, ms, Some(row.clone()), Some(row))
    }

    #[test]
    fn a_shared_name_kept_alive_says_so_and_a_lapse_before_the_takeover_is_named() {
        let chancy = lib("chancy");
        // A beats, is paused at 1.1 s; B beats under the same name from 1.5 s, every second.
        let mut commits = vec![beat(1, "A", 0), beat(2, "A", 1000), beat(3, "B", 1500), beat(4, "B", 2500)];
        let kept = shared_name_note(&chancy, &commits, at(1100), None, at(3000), chancy.fast.stall_s).expect("a note");
        assert!(kept.contains("kept it alive") && kept.contains("1.0 s"), "{kept}");
        // B's next heartbeat comes 2.6 s late: the takeover at 5.0 s follows a lapse.
        commits.push(beat(5, "B", 5100));
        let lapsed = shared_name_note(&chancy, &commits, at(1100), Some(at(5000)), at(6000), chancy.fast.stall_s)
            .expect("a note");
        assert!(lapsed.contains("lapsed 2.5 s") && lapsed.contains("B itself stalled"), "{lapsed}");
        let on_time = shared_name_note(&chancy, &commits, at(1100), Some(at(2600)), at(6000), chancy.fast.stall_s)
            .expect("a note");
        assert!(on_time.contains("within the 2 s threshold"), "{on_time}");
    }

    #[test]
    fn a_numbered_registry_has_no_shared_name_and_a_pruned_registration_of_a_is_named() {
        let procrastinate = lib("procrastinate");
        let row = |id: i64| Some(json!({"id": id, "last_heartbeat": "x"}));
        let table = "public.procrastinate_workers";
        let commits = vec![
            commit(1, table, "INSERT", "A", 0, None, row(1)),
            commit(2, table, "UPDATE", "A", 500, row(1), row(1)),
            commit(3, table, "DELETE", "B", 2600, row(1), None),
            commit(4, table, "INSERT", "B", 2600, None, row(2)),
        ];
        assert!(
            shared_name_note(&procrastinate, &commits, at(600), None, at(3000), procrastinate.fast.stall_s).is_none()
        );
        let note = pruned_note(&procrastinate, &commits).expect("A's registration pruned");
        assert!(note.contains("id 1 by B"), "{note}");
        assert!(pruned_note(&procrastinate, &commits[..2]).is_none(), "nothing deleted");
        assert!(pruned_note(&lib("pgqueuer"), &commits).is_none(), "no registry watched");
    }
}
