//! The two workers are interchangeable: a state and the state with workers 0 and 1 swapped (their
//! slots, owner ids, the row lock and the claims renamed) have the same futures up to that
//! renaming, and every property reads them alike. Each step keeps the smaller of the two, which
//! roughly halves the states to explore. Only when no replacement can start (slot 2 and owner
//! reuse name worker 0 in particular) and the configuration asks for it.

use crate::state::{Owner, Rows, State};

/// The smaller of `s` and `s` with workers 0 and 1 swapped.
pub fn canonical(s: State) -> State {
    let t = swapped(&s);
    if t < s {
        t
    } else {
        s
    }
}

fn swap_slot(i: u8) -> u8 {
    match i {
        0 => 1,
        1 => 0,
        other => other,
    }
}

/// Owner ids are `slot * 16 + session`.
fn swap_owner(o: Owner) -> Owner {
    swap_slot(o / 16) * 16 + o % 16
}

fn swap_rows(r: &mut Rows) {
    r.lease.owner = r.lease.owner.map(swap_owner);
    for op in r.ops.iter_mut() {
        op.dispatch_owner = op.dispatch_owner.map(swap_slot);
    }
}

fn swapped(s: &State) -> State {
    let mut t = s.clone();
    t.procs.swap(0, 1);
    for p in t.procs.iter_mut() {
        if let Some(b) = p.lease.as_mut() {
            b.owner = swap_owner(b.owner);
        }
    }
    t.lock = t.lock.map(swap_slot);
    swap_rows(&mut t.primary);
    if let Some(r) = t.standby.as_mut() {
        swap_rows(r);
    }
    if let Some(r) = t.backup.as_mut() {
        swap_rows(r);
    }
    t
}
