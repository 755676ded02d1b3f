//! The class of rows an explained step was taken from: the facts the model's walk classifies
//! (`coverage::Facts`), read from the rows the history had reached, so a recorded history's steps
//! count as the transitions of the coverage denominator.

use super::history::{Change, Env, Table, Txn};
use super::rows::{Rows, Run};
use super::scene::run_of;
use crate::coverage::{Class, Facts, LeaseClass};
use crate::state::{OpStatus, RunStatus};

/// The kind of a control-plane change the coverage counts (cancel), if any.
pub fn control_kind(c: &Change) -> Option<&'static str> {
    let n = c.new.as_ref().map(Run::from)?;
    (c.table == Table::Runs && c.op == "UPDATE" && n.status == "cancelled").then_some("cancel")
}

/// The run-writing worker transactions of each run (protected commits), to tell whether another
/// process's validated commit was open.
#[derive(Default)]
pub struct Overlaps {
    /// Per run: each run-writing transaction's xid, writer, start and commit.
    spans: std::collections::BTreeMap<String, Vec<(String, String, i64, i64)>>,
}

impl Overlaps {
    pub fn of(txns: &[Txn], env: &Env) -> Overlaps {
        let mut o = Overlaps::default();
        // The harness's own writes and the control plane's cancels lock and validate no lease.
        for t in txns.iter().filter(|t| !env.is_control(t.writer()) && !env.is_control_plane(t.writer())) {
            for c in t.of(Table::Runs).filter(|c| c.op == "UPDATE") {
                o.spans.entry(c.key()).or_default().push((c.xid.clone(), c.writer.clone(), t.began(), t.at()));
            }
        }
        o
    }

    /// Another process's transaction writing `run` was open (begun, not yet committed) at `time`:
    /// another transaction, of another writer (a process's heartbeat and its own protected commit
    /// share its owner id, and the model's "open" is another process's commit).
    fn open(&self, run: &str, time: i64, xid: &str, writer: &str) -> bool {
        self.spans
            .get(run)
            .is_some_and(|s| s.iter().any(|(x, w, b, a)| x != xid && w != writer && *b <= time && time < *a))
    }
}

fn run_status(s: &str) -> RunStatus {
    match s {
        "running" => RunStatus::Running,
        "succeeded" => RunStatus::Succeeded,
        "failed" => RunStatus::Failed,
        "cancelled" => RunStatus::Cancelled,
        _ => RunStatus::Pending,
    }
}

fn op_status(s: &str) -> OpStatus {
    match s {
        "prepared" => OpStatus::Prepared,
        "dispatching" => OpStatus::Dispatching,
        "unknown" => OpStatus::Unknown,
        "succeeded" => OpStatus::Succeeded,
        "failed_final" => OpStatus::FailedFinal,
        "cancelled" => OpStatus::Cancelled,
        _ => OpStatus::Absent,
    }
}

/// The actions whose statement needs the lease row: the takeover, renewal and release UPDATE it,
/// and a protected commit locks it (`SELECT … FOR UPDATE`) before it validates.
pub const NEED_THE_LEASE_ROW: &[&str] = &["acquire", "renew", "release", "commit"];

/// The model's class of the rows `c` was committed over, for the step `kind` that explains it: the
/// facts the model's walk classifies, read from the rows (the operation `c` writes is the one acted
/// on; every operation of the run counts, not only the model's two).
///
/// Two facts are read as the step's own guard proves them, not from the commit's instant alone:
/// - a step that needs the lease row never commits while another process's validated commit is
///   open: that commit holds the row locked until it commits, so a transaction still open at this
///   commit had not yet locked it (PostgreSQL's row lock; the model's takeover waits the same way);
/// - a renewal commits only on a lease that was unexpired at its statement (§05.2), so its lease
///   was live there, though the commit may land after the old term's end.
pub fn class(rows: &Rows, c: &Change, t: &Txn, overlaps: &Overlaps, kind: &str) -> Class {
    let run = run_of(c);
    let lease = match rows.leases.get(&run) {
        None => LeaseClass::Free,
        Some(l) if kind == "renew" => LeaseClass::of(l.owner.is_some(), false),
        Some(l) => LeaseClass::of(l.owner.is_some(), l.expires <= t.at()),
    };
    let mut ids: Vec<&String> = rows.run_ops.get(&run).into_iter().flatten().collect();
    let key = c.key();
    if c.table == Table::Operations && !ids.contains(&&key) {
        ids.push(&key);
    }
    let ops: Vec<OpStatus> =
        ids.iter().map(|id| rows.ops.get(*id).map(|o| op_status(&o.status)).unwrap_or(OpStatus::Absent)).collect();
    Facts {
        lease,
        run: rows.runs.get(&run).map(|r| run_status(&r.status)).unwrap_or(RunStatus::Pending),
        ops: &ops,
        target: (c.table == Table::Operations).then(|| ids.iter().position(|id| **id == key)).flatten(),
        validated_open: !NEED_THE_LEASE_ROW.contains(&kind) && overlaps.open(&run, t.at(), &c.xid, &c.writer),
        stale_believer: rows.stale_believer(&run),
    }
    .class()
}
