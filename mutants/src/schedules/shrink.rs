//! Shrinking a failing schedule: remove chunks of operations, halving the chunk size down to one
//! (delta debugging), then single operations until none can go, keeping a candidate only when it
//! still fails, and fails again when played a second time: a reduction that fails once in a while
//! (a race the smaller schedule only sometimes wins) would make the saved schedule a flaky replay,
//! so it is kept out. A candidate counts as failing only when it breaks one of the checks the
//! original schedule broke: shrinking must not wander from the bug that was found to another one
//! (or to a rare false alarm) that a smaller schedule happens to show. Every operation can be
//! removed because composites resolve their roles when they run. Bounded by [`MAX_PLAYS`] replays.

use std::collections::BTreeSet;

use fenceproof_harness::check::Check;
use fenceproof_harness::HarnessError;

use super::ops::Op;
use super::{play, Played};
use fenceproof_scenarios::runner::Session;

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
    let target: BTreeSet<String> = played.failed.iter().map(|c| c.name.clone()).collect();
    let same_bug = |p: &Played| breaks_one_of(&target, &p.failed);
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

/// Whether a candidate's failed checks include one of the original failure's (`target`).
fn breaks_one_of(target: &BTreeSet<String>, failed: &[Check]) -> bool {
    failed.iter().any(|c| target.contains(&c.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_candidate_keeps_the_bug_only_by_breaking_one_of_the_original_checks() {
        let target: BTreeSet<String> = ["revisions rise by one".to_string()].into();
        let original = Check::fail("revisions rise by one", "#3 skipped a revision");
        let other = Check::fail("nothing commits while only a stale process of an owner acts", "#7");
        assert!(breaks_one_of(&target, &[other.clone(), original]));
        assert!(!breaks_one_of(&target, &[other]), "another check's failure is not the bug that was found");
        assert!(!breaks_one_of(&target, &[]), "a passing candidate is not kept");
    }
}
