//! Which model action a committed change is: its effect decides the action, the rows the history
//! had reached decide whether that action was enabled. Time guards use the database's clock the
//! only way that cannot misread it: every clock reading of a statement lies between its
//! transaction's start (`began`) and its commit (`at`), so "expired at the statement" is proven
//! by `expires <= began` and "live at the statement" by `expires > at`.

use super::history::{Change, Env, Table, Txn};
use super::rows::{settled, short, terminal, Lease, Op, Rows, Run};
use crate::coverage::{Class, Facts, LeaseClass};
use crate::state::{OpStatus, RunStatus};

/// How a change is explained.
pub enum Explained {
    /// By a model action of this kind.
    Step(&'static str),
    /// By none: what was committed, and what the model allows here.
    No { observed: String, allowed: String },
}

fn no(observed: impl Into<String>, allowed: impl Into<String>) -> Explained {
    Explained::No { observed: observed.into(), allowed: allowed.into() }
}

/// The time between a commit and its becoming visible that a claim is granted (a commit's WAL flush
/// follows its deferred triggers): a cancel counts as seen by a claim only when it committed this
/// long before the claim's transaction began.
pub const VISIBLE_AFTER_US: i64 = 1_000_000;

/// The action explaining change `c` of worker transaction `t`, judged on `rows`.
pub fn explain(rows: &Rows, c: &Change, t: &Txn, env: &Env) -> Explained {
    let clock = Clock { began: t.began(), at: t.at(), judged: !env.clock_moved_back };
    if env.is_control_plane(&c.writer) {
        if let Some(e) = control_plane(rows, c) {
            return e;
        }
    }
    match (c.table, c.op.as_str()) {
        (Table::Operations, "UPDATE") if unknown_settled_without_capability(c, env) => no(
            format!("{} settled operation {} of a tool with neither query nor idempotency", c.writer, c.key()),
            "such an operation stays unknown until a person confirms it (an alert, not a reconciliation)",
        ),
        (Table::Leases, "UPDATE") => lease_update(c, &clock, rows),
        (Table::Runs, "UPDATE") => run_update(c, &clock, rows),
        (Table::Operations, "INSERT") => op_insert(c),
        (Table::Operations, "UPDATE") => op_update(c, &clock, rows),
        (table, op) => no(
            format!("{op} of {table:?} by {}", c.writer),
            "only the control plane creates or deletes runs, leases and operations (a retry is a new run)",
        ),
    }
}

/// A statement's clock bounds.
struct Clock {
    began: i64,
    at: i64,
    judged: bool,
}

impl Clock {
    /// `t` had passed at every reading the transaction's statements could make.
    fn surely_passed(&self, t: i64) -> bool {
        self.judged && t <= self.began
    }
    /// `t` was still ahead at every reading.
    fn surely_ahead(&self, t: i64) -> bool {
        self.judged && t > self.at
    }
}

/// A database-clock time for messages.
pub fn ts_of(us: i64) -> String {
    ts(us)
}

fn ts(us: i64) -> String {
    chrono::DateTime::from_timestamp_micros(us).map(|t| t.format("%H:%M:%S%.6f").to_string()).unwrap_or_default()
}

fn pair<T>(c: &Change, f: impl Fn(&serde_json::Value) -> T) -> Option<(T, T)> {
    Some((f(c.old.as_ref()?), f(c.new.as_ref()?)))
}

fn lease_update(c: &Change, clock: &Clock, rows: &Rows) -> Explained {
    let Some((o, n)) = pair(c, Lease::from) else { return no("a lease UPDATE without rows", "") };
    let run = short(&c.key()).to_string();
    let max = rows.max_epoch.get(&c.key()).copied().unwrap_or(o.epoch);
    if n.owner.is_some() && (n.owner != o.owner || n.epoch != o.epoch) {
        return takeover(&o, &n, max, clock, &run);
    }
    if o.owner.is_some() && o.owner.as_deref() != Some(c.writer.as_str()) {
        return not_the_owner(c, &o, &n, &run);
    }
    if n.owner.is_some() && n.epoch == o.epoch {
        if clock.surely_passed(o.expires) {
            return no(
                format!(
                    "{} renewed run {run}'s lease (epoch {}) that had expired at {}",
                    c.writer,
                    o.epoch,
                    ts(o.expires)
                ),
                format!("a renewal only of an unexpired lease; its transaction began at {}", ts(clock.began)),
            );
        }
        return Explained::Step("renew");
    }
    if n.owner.is_none() && o.owner.is_some() && n.epoch == o.epoch {
        return Explained::Step("release");
    }
    no(
        format!("run {run}'s lease moved {:?}/epoch {} → {:?}/epoch {}", o.owner, o.epoch, n.owner, n.epoch),
        "a takeover (new owner, epoch + 1), a renewal (same owner and epoch) or a release (owner cleared, epoch kept)",
    )
}

/// A renewal or release by a session that is not the lease's owner: both statements name the
/// owner and its epoch (§05.2), and a session writes under its own owner id (its application_name),
/// so another session's renewal or release matches no row.
fn not_the_owner(c: &Change, o: &Lease, n: &Lease, run: &str) -> Explained {
    let what = if n.owner.is_some() { "renewed" } else { "released" };
    no(
        format!("{} {what} run {run}'s lease held by {:?} (epoch {})", c.writer, o.owner, o.epoch),
        "only the lease's owner renews or releases it (the statement names its owner and epoch)",
    )
}

fn takeover(o: &Lease, n: &Lease, max: i64, clock: &Clock, run: &str) -> Explained {
    let who = n.owner.clone().unwrap_or_default();
    if n.epoch != o.epoch + 1 {
        return no(
            format!("{who} took run {run}'s lease at epoch {} over epoch {}", n.epoch, o.epoch),
            "a takeover raises the epoch by exactly one",
        );
    }
    if n.epoch <= max {
        return no(
            format!("{who} was granted epoch {} of run {run} a second time", n.epoch),
            format!("epochs only rise: the lease had reached epoch {max}"),
        );
    }
    if o.owner.is_some() && clock.surely_ahead(o.expires) {
        return no(
            format!(
                "{who} took run {run}'s lease from {:?} (epoch {}), live until {}",
                o.owner,
                o.epoch,
                ts(o.expires)
            ),
            format!("a takeover only of a free or expired lease; it committed at {}", ts(clock.at)),
        );
    }
    Explained::Step("acquire")
}

const WORKER_MOVES: &[(&str, &str)] =
    &[("pending", "running"), ("running", "running"), ("running", "succeeded"), ("running", "failed")];

fn run_update(c: &Change, clock: &Clock, rows: &Rows) -> Explained {
    let Some((o, n)) = pair(c, Run::from) else { return no("a run UPDATE without rows", "") };
    let run = short(&c.key()).to_string();
    if !WORKER_MOVES.contains(&(o.status.as_str(), n.status.as_str())) {
        return no(
            format!("{} moved run {run} {} → {}", c.writer, o.status, n.status),
            "a worker's protected commit moves pending → running, running → running, succeeded or failed; \
             cancel is the control plane's; a terminal run never moves",
        );
    }
    if n.revision != o.revision + 1 {
        return no(
            format!("{} wrote run {run} at revision {} over {}", c.writer, n.revision, o.revision),
            "a protected commit raises the revision by exactly one (a CAS on the revision read)",
        );
    }
    let lease = rows.leases.get(&c.key());
    match lease {
        Some(l) if l.owner.as_deref() == Some(c.writer.as_str()) => {
            if clock.surely_passed(l.expires) {
                return no(
                    format!(
                        "{} committed run {run} r{} on a lease that expired at {}",
                        c.writer,
                        n.revision,
                        ts(l.expires)
                    ),
                    format!(
                        "validation passes only on an unexpired lease; its transaction began at {}",
                        ts(clock.began)
                    ),
                );
            }
            Explained::Step("commit")
        }
        _ => no(
            format!(
                "{} committed run {run} r{} while the lease was {:?}/epoch {:?}",
                c.writer,
                n.revision,
                lease.and_then(|l| l.owner.clone()),
                lease.map(|l| l.epoch)
            ),
            "only the lease's owner commits, with its row locked and validated in the same transaction",
        ),
    }
}

fn op_insert(c: &Change) -> Explained {
    let status = c.new.as_ref().map(Op::from).map(|o| o.status).unwrap_or_default();
    if status != "prepared" {
        return no(
            format!("{} registered operation {} as {status}", c.writer, c.key()),
            "an intent is registered as prepared",
        );
    }
    Explained::Step("plan")
}

fn op_update(c: &Change, clock: &Clock, rows: &Rows) -> Explained {
    let Some((o, n)) = pair(c, Op::from) else { return no("an operation UPDATE without rows", "") };
    let id = c.key();
    let moved =
        format!("{} moved operation {id} {} r{} → {} r{}", c.writer, o.status, o.revision, n.status, n.revision);
    // The spec's statements raise the revision by one; a reconciler that records a retry's evidence
    // on an operation that stays unknown is not given one, so only its order is held there.
    let same_unknown = o.status == "unknown" && n.status == "unknown";
    if n.revision != o.revision + 1 && !(same_unknown && n.revision >= o.revision) {
        return no(moved, "every ledger write raises the operation's revision by one");
    }
    match (o.status.as_str(), n.status.as_str()) {
        ("prepared", "dispatching") => claim(&o, &n, clock, rows, moved),
        ("dispatching", s) if settled(s) && s != "cancelled" && holder(rows, c, &o) => Explained::Step("write-result"),
        ("dispatching", s) if settled(s) && s != "cancelled" => no(
            moved,
            format!(
                "a result only by the claim's holder ({}); another session's result, or a convergence, \
                 matches no row while the operation is dispatching",
                rows.claimer.get(&id).or(o.dispatch_owner.as_ref()).map_or("none named", String::as_str)
            ),
        ),
        ("dispatching", "unknown") if holder(rows, c, &o) => Explained::Step("give-up-unknown"),
        ("dispatching", "unknown") => match o.until {
            Some(u) if clock.surely_ahead(u) => {
                no(moved, format!("only an expired claim becomes unknown; the claim was live until {}", ts(u)))
            }
            _ => Explained::Step("mark-unknown"),
        },
        ("unknown", s) if s == "unknown" || (settled(s) && s != "cancelled") => Explained::Step("reconcile"),
        ("prepared", "cancelled") => match rows.runs.get(&o.run) {
            Some(r) if r.status == "cancelled" => Explained::Step("cancel"),
            _ => no(moved, "a prepared operation is cancelled only with its cancelled run"),
        },
        _ => no(
            moved,
            "prepared → dispatching (claim), dispatching → succeeded/failed_final (result) or unknown (its holder gives it up, or it expired), \
             unknown → succeeded/failed_final (reconciliation), prepared → cancelled (run cancelled); \
             never back to prepared, never from a settled status",
        ),
    }
}

/// Whether `c`'s writer holds the operation's claim: the session that claimed it, or the dispatch
/// owner it named. Only the holder writes the claim's result (§09.3: the statement names the
/// claim's owner and revision). The holder may give its own claim up as unknown at any time (a
/// remote timeout, §07: the model's `give-up-unknown`); only another session must wait for the
/// claim to expire (`mark-unknown`).
fn holder(rows: &Rows, c: &Change, o: &Op) -> bool {
    rows.claimer.get(&c.key()) == Some(&c.writer) || o.dispatch_owner.as_deref() == Some(c.writer.as_str())
}

fn claim(o: &Op, n: &Op, clock: &Clock, rows: &Rows, moved: String) -> Explained {
    if n.dispatch_owner.is_none() || n.until.is_none_or(|u| clock.surely_passed(u)) {
        return no(moved, "a claim names its dispatch owner and a deadline after it");
    }
    match rows.runs.get(&o.run) {
        Some(Run { status, terminal_at: Some(t), .. })
            if terminal(status) && clock.judged && *t + VISIBLE_AFTER_US <= clock.began =>
        {
            no(moved, format!("a claim only while its run is pending or running; the run was {status} at {}", ts(*t)))
        }
        _ => Explained::Step("claim"),
    }
}

/// The contract's control plane: it creates a run (pending, revision 0) with a free lease, and
/// cancels a pending or running run with its prepared operations. `None`: judge as a worker's.
fn control_plane(rows: &Rows, c: &Change) -> Option<Explained> {
    let new = c.new.as_ref();
    Some(match (c.table, c.op.as_str()) {
        (Table::Runs, "INSERT") => match new.map(Run::from) {
            Some(r) if r.status == "pending" => Explained::Step("create"),
            _ => no(format!("{} created a run that is not pending", c.writer), "a new run starts pending"),
        },
        (Table::Leases, "INSERT") => match new.map(Lease::from) {
            Some(l) if l.owner.is_none() => Explained::Step("create"),
            _ => no(format!("{} created a lease with an owner", c.writer), "a new run's lease starts free"),
        },
        (Table::Runs, "UPDATE") => {
            let (o, n) = pair(c, Run::from)?;
            if matches!(o.status.as_str(), "pending" | "running") && n.status == "cancelled" {
                cancel_raises_revision(c, o.revision, n.revision)
            } else {
                no(
                    format!("{} moved run {} {} → {}", c.writer, short(&c.key()), o.status, n.status),
                    "the control plane cancels a pending or running run; a terminal run never moves (a retry is a new run)",
                )
            }
        }
        (Table::Operations, "UPDATE") => {
            let (o, n) = pair(c, Op::from)?;
            let run_cancelled = rows.runs.get(&o.run).is_some_and(|r| r.status == "cancelled");
            if o.status == "prepared" && n.status == "cancelled" && run_cancelled {
                cancel_raises_revision(c, o.revision, n.revision)
            } else {
                return None;
            }
        }
        _ => return None,
    })
}

/// A cancel is a committed write like any other: the run's revision (the CAS every protected
/// commit compares) and the operation's ledger revision rise by exactly one with it.
fn cancel_raises_revision(c: &Change, old: i64, new: i64) -> Explained {
    if new == old + 1 {
        return Explained::Step("cancel");
    }
    let row =
        if c.table == Table::Runs { format!("run {}", short(&c.key())) } else { format!("operation {}", c.key()) };
    no(
        format!("{} cancelled {row} at revision {new} over {old}", c.writer),
        "every committed write of a run or an operation, a cancel too, raises its revision by exactly one",
    )
}

fn unknown_settled_without_capability(c: &Change, env: &Env) -> bool {
    let Some((o, n)) = pair(c, Op::from) else { return false };
    let tool = c.old.as_ref().and_then(|v| v.get("tool_name")).and_then(serde_json::Value::as_str).unwrap_or_default();
    o.status == "unknown"
        && matches!(n.status.as_str(), "succeeded" | "failed_final")
        && env.capabilities.get(tool) == Some(&crate::config::Capability::None)
}

/// The kind of a control-plane change the coverage counts (cancel), if any.
pub fn control_kind(c: &Change) -> Option<&'static str> {
    let n = c.new.as_ref().map(Run::from)?;
    (c.table == Table::Runs && c.op == "UPDATE" && n.status == "cancelled").then_some("cancel")
}

/// An intent registered without a run commit of the same run in its transaction (§09.1).
pub fn outside_protected(t: &Txn, _rows: &Rows) -> Option<super::Unexplained> {
    let ins = t.of(Table::Operations).find(|c| c.op == "INSERT")?;
    let run = ins.new.as_ref().map(Op::from)?.run;
    let with_run = t.of(Table::Runs).any(|c| c.op == "UPDATE" && c.key() == run);
    (!with_run).then(|| super::Unexplained {
        seq: ins.seq,
        writer: ins.writer.clone(),
        observed: format!("{} registered operation {} with no commit of run {}", ins.writer, ins.key(), short(&run)),
        allowed: "an intent is registered in the protected transaction that advances its run".into(),
    })
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

/// The run a change bears on.
fn run_of(c: &Change) -> String {
    if c.table != Table::Operations {
        return c.key();
    }
    c.new.as_ref().or(c.old.as_ref()).map(Op::from).map(|o| o.run).unwrap_or_default()
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
