//! The lease's single-statement transactions (§05): the takeover, the renewal and the release,
//! each applied on the committed row once the row lock is free.

use crate::config::{Ablation, Config};
use crate::enabled::takeover_allowed;
use crate::state::{Belief, State};

use super::owner_id;

/// The takeover UPDATE: a free or expired lease gets a new owner, epoch + 1 and a fresh term.
pub fn acquire(cfg: &Config, s: &mut State, i: u8) -> bool {
    let checked = s.procs[i as usize].acquire_checked;
    let recheck = !cfg.ablated(Ablation::NoRecheck);
    if (recheck || !checked) && !takeover_allowed(s) {
        s.procs[i as usize].acquire_checked = false;
        return checked;
    }
    if !takeover_allowed(s) {
        s.ghost.took_live_lease = true;
    }
    if s.procs.iter().any(|p| p.txn == crate::state::Txn::Validated) {
        s.ghost.overtook_commit = true;
    }
    let p = &mut s.procs[i as usize];
    p.acquire_checked = false;
    p.sessions += 1;
    let owner = owner_id(cfg, i, p.sessions);
    let lease = &mut s.primary.lease;
    lease.owner = Some(owner);
    lease.epoch += 1;
    lease.expires = cfg.ttl;
    s.ghost.grants += 1;
    lease.grant = s.ghost.grants;
    let (epoch, grant) = (lease.epoch, lease.grant);
    if epoch <= s.ghost.max_epoch {
        s.ghost.epoch_reissued = true;
    }
    s.ghost.max_epoch = s.ghost.max_epoch.max(epoch);
    s.procs[i as usize].lease = Some(Belief { owner, epoch, expect: s.primary.revision, grant });
    true
}

/// Without the re-check: the condition was true when evaluated; the UPDATE now waits for the row.
pub fn acquire_check(s: &mut State, i: u8) -> bool {
    s.procs[i as usize].acquire_checked = true;
    true
}

/// The renewal UPDATE; zero rows mean the lease is lost and the execution is cancelled.
pub fn renew(cfg: &Config, s: &mut State, i: u8) -> bool {
    let Some(b) = s.procs[i as usize].lease else { return false };
    let l = s.primary.lease;
    let unexpired = !l.expired() || cfg.ablated(Ablation::RenewWithoutExpiry);
    if l.owner == Some(b.owner) && l.epoch == b.epoch && unexpired {
        if l.expired() {
            s.ghost.renewed_expired = true;
        }
        s.primary.lease.expires = cfg.ttl;
        if s.primary.lease == l {
            return false;
        }
    } else {
        s.procs[i as usize].lease = None;
    }
    true
}

/// The release UPDATE: the owner is cleared and the term ends now; the epoch stays.
pub fn release(cfg: &Config, s: &mut State, i: u8) -> bool {
    let Some(b) = s.procs[i as usize].lease.take() else { return false };
    let l = &mut s.primary.lease;
    if l.owner == Some(b.owner) && l.epoch == b.epoch {
        l.owner = None;
        l.expires = 0;
        if cfg.ablated(Ablation::ReleaseZeroesEpoch) {
            l.epoch = 0;
        }
    }
    true
}
