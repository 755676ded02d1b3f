//! What trace validation reads: one committed row change as the oracle recorded it (times in
//! microseconds of the database's own clock), grouped into the transactions that committed them,
//! and what the row's timeline says about the environment.

use serde_json::Value;

/// The protocol table a change touched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    Runs,
    Leases,
    Operations,
    /// A table the protocol does not define (a team's own): not judged.
    Other,
}

impl Table {
    /// The table of a recorded `table_name`.
    pub fn of(name: &str) -> Table {
        match name {
            "agent_runs" => Table::Runs,
            "worker_leases" => Table::Leases,
            "tool_operations" => Table::Operations,
            _ => Table::Other,
        }
    }
}

/// One committed change of one row.
#[derive(Clone, Debug)]
pub struct Change {
    pub seq: i64,
    pub xid: String,
    pub table: Table,
    /// `INSERT`, `UPDATE` or `DELETE`.
    pub op: String,
    /// The writing session's application_name.
    pub writer: String,
    /// The writing transaction's start and commit, by the database's clock (µs since 1970).
    pub began: i64,
    pub at: i64,
    pub old: Option<Value>,
    pub new: Option<Value>,
}

impl Change {
    /// The row's key: a run's or lease's run_id, an operation's operation_id.
    pub fn key(&self) -> String {
        let f = if self.table == Table::Operations { "operation_id" } else { "run_id" };
        let row = self.new.as_ref().or(self.old.as_ref());
        row.and_then(|r| r.get(f)).and_then(Value::as_str).unwrap_or_default().to_string()
    }
}

/// One committed transaction: its changes in commit order.
#[derive(Clone, Debug)]
pub struct Txn {
    pub changes: Vec<Change>,
}

impl Txn {
    pub fn first(&self) -> &Change {
        &self.changes[0]
    }
    pub fn seq(&self) -> i64 {
        self.first().seq
    }
    pub fn writer(&self) -> &str {
        &self.first().writer
    }
    pub fn began(&self) -> i64 {
        self.changes.iter().map(|c| c.began).min().unwrap_or(0)
    }
    pub fn at(&self) -> i64 {
        self.changes.iter().map(|c| c.at).max().unwrap_or(0)
    }
    pub fn of(&self, t: Table) -> impl Iterator<Item = &Change> {
        self.changes.iter().filter(move |c| c.table == t)
    }
}

/// The changes grouped by transaction, ordered by each transaction's first change.
pub fn transactions(changes: &[Change]) -> Vec<Txn> {
    let mut out: Vec<Txn> = Vec::new();
    let mut index: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let mut sorted: Vec<&Change> = changes.iter().collect();
    sorted.sort_by_key(|c| c.seq);
    for c in sorted {
        let key = if c.xid.is_empty() { None } else { Some(c.xid.as_str()) };
        match key.and_then(|k| index.get(k)) {
            Some(&i) => out[i].changes.push(c.clone()),
            None => {
                if let Some(k) = key {
                    index.insert(k, out.len());
                }
                out.push(Txn { changes: vec![c.clone()] });
            }
        }
    }
    out
}

/// A remote effect the fake tools recorded: a resource created for an operation_id, at the
/// machine's clock (µs).
#[derive(Clone, Debug)]
pub struct Call {
    pub operation_id: String,
    pub at: i64,
}

/// What the row's timeline says about the environment the history ran in.
#[derive(Clone, Debug, Default)]
pub struct Env {
    /// Writers that are the harness or a writer the experiment runs outside the protocol (their
    /// steps are the environment's, not judged).
    pub control: Vec<String>,
    /// Application-name prefixes of the contract's control plane (create, cancel): judged.
    pub control_prefixes: Vec<String>,
    /// The resources the tools created, in the order they recorded them.
    pub calls: Vec<Call>,
    /// Each tool's capability, by tool_name.
    pub capabilities: std::collections::BTreeMap<String, crate::config::Capability>,
    /// The tools and the database read one clock (a server on this host, not under a faked clock).
    pub shared_clock: bool,
    /// The server's clock was moved back: a transaction's start no longer bounds its statements'
    /// clock readings from below, so time is not judged.
    pub clock_moved_back: bool,
    /// The database was restored or a standby promoted: rows may lose committed changes.
    pub rows_may_roll_back: bool,
    /// A standby was promoted: with asynchronous replication an acknowledged claim may be lost
    /// and its operation dispatched again, which the deployment's contract, not the model's
    /// default bound, decides.
    pub promoted: bool,
}

impl Env {
    /// Whether `writer` is the environment's (the harness, or a writer outside the protocol).
    pub fn is_control(&self, writer: &str) -> bool {
        self.control.iter().any(|c| c == writer)
    }

    /// Whether `writer` is the contract's control plane (its create and cancel are judged).
    pub fn is_control_plane(&self, writer: &str) -> bool {
        self.control_prefixes.iter().any(|p| writer.starts_with(p.as_str()))
    }
}
