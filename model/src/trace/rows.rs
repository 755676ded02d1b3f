//! The concrete rows trace validation follows: each run, its lease and its operations as the
//! committed history leaves them, read from the oracle's JSON rows (times in µs of the database's
//! clock). Only the protocol's columns are read; a team's extra columns are ignored.

use serde_json::Value;

/// A run row: status and revision, and when (database clock) it became terminal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    pub status: String,
    pub revision: i64,
    pub terminal_at: Option<i64>,
}

/// A lease row: owner, epoch and expiry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub owner: Option<String>,
    pub epoch: i64,
    pub expires: i64,
}

/// An operation's ledger row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    pub run: String,
    pub status: String,
    pub dispatch_owner: Option<String>,
    pub until: Option<i64>,
    pub revision: i64,
}

/// A run's terminal statuses.
pub fn terminal(status: &str) -> bool {
    matches!(status, "succeeded" | "failed" | "cancelled")
}

/// An operation's settled statuses.
pub fn settled(status: &str) -> bool {
    matches!(status, "succeeded" | "failed_final" | "cancelled")
}

fn text(v: &Value, f: &str) -> Option<String> {
    v.get(f).and_then(Value::as_str).map(str::to_string)
}

fn int(v: &Value, f: &str) -> i64 {
    v.get(f).and_then(Value::as_i64).unwrap_or(0)
}

/// A `timestamptz` as `to_jsonb` writes it, in µs since 1970.
pub fn micros(v: &Value, f: &str) -> Option<i64> {
    let s = v.get(f)?.as_str()?;
    let t = chrono::DateTime::parse_from_rfc3339(s)
        .or_else(|_| chrono::DateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f%#z"))
        .ok()?;
    Some(t.timestamp_micros())
}

impl Run {
    pub fn from(v: &Value) -> Run {
        Run { status: text(v, "status").unwrap_or_default(), revision: int(v, "revision"), terminal_at: None }
    }
}

impl Lease {
    pub fn from(v: &Value) -> Lease {
        Lease { owner: text(v, "owner"), epoch: int(v, "epoch"), expires: micros(v, "expires_at").unwrap_or(i64::MIN) }
    }
}

impl Op {
    pub fn from(v: &Value) -> Op {
        Op {
            run: text(v, "run_id").unwrap_or_default(),
            status: text(v, "status").unwrap_or_default(),
            dispatch_owner: text(v, "dispatch_owner"),
            until: micros(v, "dispatch_until"),
            revision: int(v, "revision"),
        }
    }
}

/// Every row the history has shown so far, by key.
#[derive(Clone, Debug, Default)]
pub struct Rows {
    pub runs: std::collections::BTreeMap<String, Run>,
    pub leases: std::collections::BTreeMap<String, Lease>,
    pub ops: std::collections::BTreeMap<String, Op>,
    /// The operations of each run, in the order their intents were registered.
    pub run_ops: std::collections::BTreeMap<String, Vec<String>>,
    /// The highest epoch each run's lease has reached.
    pub max_epoch: std::collections::BTreeMap<String, i64>,
    /// Each run's grants (owner, epoch) that were never released: a holder of an older one still
    /// believes in it until it learns otherwise (no commit shows when).
    pub unreleased: std::collections::BTreeMap<String, Vec<(String, i64)>>,
    /// The session (application_name) whose claim each dispatching operation is under.
    pub claimer: std::collections::BTreeMap<String, String>,
    /// When each operation first left prepared (claimed, or set up past it by the environment).
    pub left_prepared_at: std::collections::BTreeMap<String, i64>,
}

impl Rows {
    /// The rows after committed change `c` (a transaction committing at `at`).
    pub fn apply(&mut self, c: &super::Change, at: i64) {
        use super::Table;
        let key = c.key();
        match (c.table, &c.new) {
            (Table::Runs, Some(v)) => {
                let mut run = Run::from(v);
                let before = self.runs.get(&key);
                run.terminal_at = match before {
                    Some(b) if terminal(&b.status) => b.terminal_at,
                    _ => terminal(&run.status).then_some(at),
                };
                self.runs.insert(key, run);
            }
            (Table::Leases, Some(v)) => {
                let lease = Lease::from(v);
                self.note_grant(&key, self.leases.get(&key).cloned(), &lease);
                let max = self.max_epoch.entry(key.clone()).or_insert(0);
                *max = (*max).max(lease.epoch);
                self.leases.insert(key, lease);
            }
            (Table::Operations, Some(v)) => {
                let op = Op::from(v);
                let was = self.ops.get(&key).map(|o| o.status.as_str());
                if op.status == "dispatching" && was != Some("dispatching") {
                    self.claimer.insert(key.clone(), c.writer.clone());
                }
                if op.status != "prepared" {
                    self.left_prepared_at.entry(key.clone()).or_insert(at);
                }
                let list = self.run_ops.entry(op.run.clone()).or_default();
                if !list.contains(&key) {
                    list.push(key.clone());
                }
                self.ops.insert(key, op);
            }
            (Table::Runs, None) => drop(self.runs.remove(&key)),
            (Table::Leases, None) => drop(self.leases.remove(&key)),
            (Table::Operations, None) => drop(self.ops.remove(&key)),
            (Table::Other, _) => {}
        }
    }

    fn note_grant(&mut self, key: &str, before: Option<Lease>, after: &Lease) {
        let list = self.unreleased.entry(key.to_string()).or_default();
        match (&after.owner, before) {
            (Some(o), Some(b)) if b.owner.as_ref() != Some(o) || b.epoch != after.epoch => {
                list.push((o.clone(), after.epoch))
            }
            (Some(o), None) => list.push((o.clone(), after.epoch)),
            (None, Some(b)) => list.retain(|(o, e)| Some(o) != b.owner.as_ref() || *e != b.epoch),
            _ => {}
        }
    }

    /// Whether someone holds a grant of `run`'s lease older than its current epoch, unreleased.
    pub fn stale_believer(&self, run: &str) -> bool {
        let Some(l) = self.leases.get(run) else { return false };
        self.unreleased.get(run).is_some_and(|g| g.iter().any(|(_, e)| *e < l.epoch))
    }

    /// When `c`'s old row differs from the row the history had reached: what differs.
    pub fn stale(&self, c: &super::Change) -> Option<String> {
        use super::Table;
        let old = c.old.as_ref()?;
        let key = c.key();
        let differs = match c.table {
            Table::Runs => self.runs.get(&key).map(|r| {
                let o = Run::from(old);
                (r.status != o.status || r.revision != o.revision)
                    .then(|| format!("run {} was {} r{}", short(&key), o.status, o.revision))
                    .map(|s| format!("{s}, the history had left it {} r{}", r.status, r.revision))
            }),
            Table::Leases => self.leases.get(&key).map(|l| {
                let o = Lease::from(old);
                let who = |o: &Option<String>| o.clone().unwrap_or_else(|| "free".into());
                (l.owner != o.owner || l.epoch != o.epoch).then(|| {
                    format!(
                        "lease of run {} was {}/epoch {}, the history had left it {}/epoch {}",
                        short(&key),
                        who(&o.owner),
                        o.epoch,
                        who(&l.owner),
                        l.epoch
                    )
                })
            }),
            Table::Operations => self.ops.get(&key).map(|p| {
                let o = Op::from(old);
                (p.status != o.status || p.revision != o.revision).then(|| {
                    format!(
                        "operation {key} was {} r{}, the history had left it {} r{}",
                        o.status, o.revision, p.status, p.revision
                    )
                })
            }),
            Table::Other => None,
        };
        differs.flatten()
    }

    /// The rows take `c`'s old row as the truth (a hidden restore or promotion, or after a finding).
    pub fn resync(&mut self, c: &super::Change) {
        if let Some(old) = &c.old {
            let before = super::Change { new: Some(old.clone()), old: None, ..c.clone() };
            self.apply(&before, c.at);
        }
    }
}

/// The first eight characters of a key, for messages.
pub fn short(key: &str) -> &str {
    key.get(..8).unwrap_or(key)
}
