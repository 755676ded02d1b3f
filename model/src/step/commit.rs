//! The protected commit (§06): lock the lease row, validate owner, epoch and expiry by the
//! database clock, then CAS the run on its revision and commit; and the read-back after a lost reply.

use crate::config::{Ablation, Config};
use crate::state::{Belief, OpStatus, RunStatus, State, Txn, Write};

use super::end_txn;

/// `BEGIN; SELECT … FOR UPDATE` on the lease row.
pub fn lock(cfg: &Config, s: &mut State, i: u8) -> bool {
    if !cfg.ablated(Ablation::NoRowLock) {
        s.lock = Some(i);
    }
    s.procs[i as usize].txn = Txn::Locked;
    true
}

/// The validation SELECT; a lease that is not the process's, or has expired, is lost.
pub fn validate(cfg: &Config, s: &mut State, i: u8) -> bool {
    let Some(b) = s.procs[i as usize].lease else { return false };
    let l = s.primary.lease;
    let epoch_ok = l.epoch == b.epoch || cfg.ablated(Ablation::NoEpochCheck);
    if l.owner == Some(b.owner) && epoch_ok && !l.expired() {
        s.procs[i as usize].txn = Txn::Validated;
    } else {
        end_txn(s, i);
        s.procs[i as usize].lease = None;
    }
    true
}

/// The run's CAS and the commit. A refused CAS is a conflict: the process re-reads the revision.
pub fn commit(cfg: &Config, s: &mut State, i: u8, w: Write, lost_reply: bool) -> bool {
    let Some(mut b) = s.procs[i as usize].lease else { return false };
    let rows = s.primary;
    let revision_ok = rows.revision == b.expect || cfg.ablated(Ablation::NoRevisionCas);
    let status_ok = match w {
        Write::Start => rows.run == RunStatus::Pending,
        Write::Plan(n) => rows.run == RunStatus::Running && rows.ops[n as usize].status == OpStatus::Absent,
        Write::Checkpoint | Write::Complete => rows.run == RunStatus::Running,
    };
    end_txn(s, i);
    s.procs[i as usize].unknown = false;
    if !(revision_ok && status_ok) {
        b.expect = rows.revision;
        s.procs[i as usize].lease = Some(b);
        return true;
    }
    judge_writer(s, b);
    apply(s, w);
    if lost_reply {
        s.budget.lost_acks -= 1;
        s.procs[i as usize].unknown = true;
    } else {
        b.expect = s.primary.revision;
    }
    s.procs[i as usize].lease = Some(b);
    true
}

/// Notes a run write by a writer that is not the lease row's owner and epoch at its commit, or
/// over a revision it had not read.
fn judge_writer(s: &mut State, b: Belief) {
    let l = s.primary.lease;
    if l.owner != Some(b.owner) || l.epoch != b.epoch || l.grant != b.grant {
        s.ghost.stale_write = true;
    }
    if s.primary.revision != b.expect {
        s.ghost.lost_update = true;
    }
}

fn apply(s: &mut State, w: Write) {
    let r = &mut s.primary;
    if r.run.terminal() {
        s.ghost.terminal_left = true;
    }
    r.revision += 1;
    match w {
        Write::Start => r.run = RunStatus::Running,
        Write::Complete => r.run = RunStatus::Succeeded,
        Write::Checkpoint => {}
        Write::Plan(n) => r.ops[n as usize].status = OpStatus::Prepared,
    }
}

/// After a lost reply: the run and the lease read back from the primary.
pub fn read_back(s: &mut State, i: u8) -> bool {
    let p = &mut s.procs[i as usize];
    p.unknown = false;
    if let Some(mut b) = p.lease {
        let l = s.primary.lease;
        if l.owner == Some(b.owner) && l.epoch == b.epoch {
            b.expect = s.primary.revision;
            p.lease = Some(b);
        } else {
            p.lease = None;
        }
    }
    true
}
