//! Shrinking a failing schedule: remove chunks of operations, halving the chunk size down to one
//! (delta debugging), then single operations until none can go, keeping a candidate only when it
//! still fails, and fails again when played a second time: a reduction that fails once in a while
//! (a race the smaller schedule only sometimes wins) would make the saved schedule a flaky replay,
//! so it is kept out. A candidate counts as failing only when it breaks one of the checks the
//! original schedule broke: shrinking must not wander from the bug that was found to another one
//! (or to a rare false alarm) that a smaller schedule happens to show. Every operation can be removed because composites resolve their roles when
//! they run. Bounded by [`MAX_PLAYS`] replays.

use fenceproof_harness::HarnessError;

use super::ops::Op;
use super::{play, Played};
use crate::runner::Session;

/// At most this many replays while shrinking.
pub const MAX_PLAYS: u32 = 60;

/// The smallest still-failing schedule found, with what it played.
pub async fn shrink(
    session: &mut Session,
    label: &str,
    schedule: Vec<Op>,
    played: Played,
    worker_args: &[String],
) -> Result<(Vec<Op>, Played), HarnessError> {
    let target: std::collections::BTreeSet<String> = played.failed.iter().map(|c| c.name.clone()).collect();
    let same_bug = |p: &Played| p.failed.iter().any(|c| target.contains(&c.name));
    let mut best = (schedule, played);
    let mut plays = 0;
    let mut chunk = (best.0.len() / 2).max(1);
    loop {
        let mut removed = false;
        let mut i = 0;
        while i < best.0.len() && plays < MAX_PLAYS {
            let end = (i + chunk).min(best.0.len());
            let candidate: Vec<Op> = best.0[..i].iter().chain(&best.0[end..]).cloned().collect();
            if candidate.is_empty() {
                i = end;
                continue;
            }
            plays += 1;
            let p = play(session, &format!("{label}-shrink-{plays}"), &candidate, worker_args).await?;
            if !same_bug(&p) {
                if !p.failed.is_empty() {
                    let names: Vec<&str> = p.failed.iter().map(|c| c.name.as_str()).collect();
                    eprintln!(
                        "  shrink {plays}: {} operations fail another check ({}): kept out",
                        candidate.len(),
                        names.join("; ")
                    );
                }
                i = end;
                continue;
            }
            plays += 1;
            let again = play(session, &format!("{label}-shrink-{plays}"), &candidate, worker_args).await?;
            if !same_bug(&again) {
                eprintln!("  shrink {plays}: {} operations failed once, not twice: kept out", candidate.len());
                i = end;
            } else {
                eprintln!("  shrink {plays}: {} operations still fail (twice)", candidate.len());
                best = (candidate, p);
                removed = true;
            }
        }
        if plays >= MAX_PLAYS || (chunk == 1 && !removed) {
            break;
        }
        if chunk > 1 {
            chunk /= 2;
        }
    }
    Ok(best)
}
