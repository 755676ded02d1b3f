//! Shrinking a failing schedule: a long one first tries each of its operations alone
//! ([`SINGLES_ABOVE`]); then remove chunks of operations, halving the chunk size down to one
//! (delta debugging), then single operations until none can go, keeping a candidate only when it
//! still fails, and fails again when played a second time: a reduction that fails once in a while
//! (a race the smaller schedule only sometimes wins) would make the saved schedule a flaky replay,
//! so it is kept out. A candidate counts as failing only when it breaks one of the checks the
//! original schedule broke: shrinking must not wander from the bug that was found to another one
//! (or to a rare false alarm) that a smaller schedule happens to show. Every operation can be
//! removed because composites resolve their roles when they run. Each of a candidate's two plays
//! that held while the machine was starved is played again ([`super::starved`], as `--replay` does):
//! on a loaded machine the race may not have been made, and a good candidate would be dropped. The
//! load decides only whether to play again; a candidate is kept only on two real FAILs. Bounded by
//! [`MAX_PLAYS`] plays of candidates and [`MAX_STARVED_PLAYS`] plays again.

use std::collections::BTreeSet;

use fenceproof_harness::check::Check;
use fenceproof_harness::HarnessError;

use super::ops::Op;
use super::starved::{again_while_starved, Player, SessionPlayer};
use super::Played;
use fenceproof_scenarios::runner::Session;

/// At most this many plays of candidates while shrinking (a candidate's first and second play).
pub const MAX_PLAYS: u32 = 60;

/// A failing schedule longer than this first has each of its operations tried alone: a bug one
/// operation shows is found in a few short plays, where halving a long schedule plays it long
/// (and, on a loaded machine, a race a long candidate only sometimes makes drops good candidates).
pub const SINGLES_ABOVE: usize = 8;

/// At most this many plays again, in all, of candidates' plays that held on a starved machine.
pub const MAX_STARVED_PLAYS: u32 = 40;

/// The plays a shrink made so far.
#[derive(Debug, Default)]
struct Spent {
    /// Candidates' plays ([`MAX_PLAYS`]).
    plays: u32,
    /// Plays again of those that held on a starved machine ([`MAX_STARVED_PLAYS`]).
    again: u32,
}

/// The smallest still-failing schedule found, with what it played.
pub async fn shrink(
    session: &mut Session,
    label: &str,
    schedule: Vec<Op>,
    played: Played,
    worker_args: &[String],
) -> Result<(Vec<Op>, Played), HarnessError> {
    shrink_with(&mut SessionPlayer { session, worker_args }, label, schedule, played).await
}

/// [`shrink`] with `player` playing the candidates.
async fn shrink_with<P: Player>(
    player: &mut P,
    label: &str,
    schedule: Vec<Op>,
    played: Played,
) -> Result<(Vec<Op>, Played), HarnessError> {
    let target: BTreeSet<String> = played.failed.iter().map(|c| c.name.clone()).collect();
    let mut spent = Spent::default();
    if schedule.len() > SINGLES_ABOVE {
        if let Some(single) = alone(player, label, &schedule, &target, &mut spent).await? {
            return Ok(single);
        }
    }
    let mut best = (schedule, played);
    let mut chunk = (best.0.len() / 2).max(1);
    loop {
        let mut removed = false;
        let mut i = 0;
        while i < best.0.len() && spent.plays < MAX_PLAYS {
            let end = (i + chunk).min(best.0.len());
            let candidate: Vec<Op> = best.0[..i].iter().chain(&best.0[end..]).cloned().collect();
            if candidate.is_empty() {
                i = end;
                continue;
            }
            match still_fails(player, label, &candidate, &target, &mut spent).await? {
                Some(p) => {
                    best = (candidate, p);
                    removed = true;
                }
                None => i = end,
            }
        }
        if spent.plays >= MAX_PLAYS || (chunk == 1 && !removed) {
            break;
        }
        if chunk > 1 {
            chunk /= 2;
        }
    }
    Ok(best)
}

/// The first operation of `schedule` that still fails alone (twice, as every candidate), played
/// each in turn within [`MAX_PLAYS`]; `None` when none does.
async fn alone<P: Player>(
    player: &mut P,
    label: &str,
    schedule: &[Op],
    target: &BTreeSet<String>,
    spent: &mut Spent,
) -> Result<Option<(Vec<Op>, Played)>, HarnessError> {
    let mut tried: Vec<&Op> = Vec::new();
    for op in schedule {
        if spent.plays >= MAX_PLAYS {
            break;
        }
        if tried.contains(&op) {
            continue;
        }
        tried.push(op);
        let single = vec![op.clone()];
        if let Some(p) = still_fails(player, label, &single, target, spent).await? {
            return Ok(Some((single, p)));
        }
    }
    Ok(None)
}

/// The first play of `candidate` when it broke one of the `target` checks, and did again when
/// played a second time; `None` when it held (also after its plays again, if starved), broke only
/// other checks, or failed once only.
async fn still_fails<P: Player>(
    player: &mut P,
    label: &str,
    candidate: &[Op],
    target: &BTreeSet<String>,
    spent: &mut Spent,
) -> Result<Option<Played>, HarnessError> {
    let p = play_candidate(player, label, candidate, spent).await?;
    if !breaks_one_of(target, &p.failed) {
        if !p.failed.is_empty() {
            let names: Vec<&str> = p.failed.iter().map(|c| c.name.as_str()).collect();
            eprintln!(
                "  shrink {}: {} operations fail another check ({}): kept out",
                spent.plays,
                candidate.len(),
                names.join("; ")
            );
        }
        return Ok(None);
    }
    let again = play_candidate(player, label, candidate, spent).await?;
    if !breaks_one_of(target, &again.failed) {
        eprintln!("  shrink {}: {} operations failed once, not twice: kept out", spent.plays, candidate.len());
        return Ok(None);
    }
    eprintln!("  shrink {}: {} operations still fail (twice)", spent.plays, candidate.len());
    Ok(Some(p))
}

/// One play of `candidate` (`{label}-shrink-N`), played again while it held on a starved machine,
/// within what is left of [`MAX_STARVED_PLAYS`]; the play that decides.
async fn play_candidate<P: Player>(
    player: &mut P,
    label: &str,
    candidate: &[Op],
    spent: &mut Spent,
) -> Result<Played, HarnessError> {
    spent.plays += 1;
    let label = format!("{label}-shrink-{}", spent.plays);
    let first = player.play(&label, candidate).await?;
    let allowance = MAX_STARVED_PLAYS.saturating_sub(spent.again);
    let (decides, again) = again_while_starved(player, &label, candidate, first, allowance).await?;
    spent.again += again;
    Ok(decides.played)
}

/// Whether a candidate's failed checks include one of the original failure's (`target`).
fn breaks_one_of(target: &BTreeSet<String>, failed: &[Check]) -> bool {
    failed.iter().any(|c| target.contains(&c.name))
}

#[cfg(test)]
mod tests {
    use super::super::starved::tests::{scripted, Script};
    use super::super::starved::STARVED_REPLAYS;
    use super::*;

    /// Shrink a two-operation schedule that failed, its candidates' plays answered by `answers`:
    /// the schedule kept, and the labels played.
    async fn shrink_two(answers: Vec<super::super::starved::Measured>) -> (Vec<Op>, Vec<String>) {
        let mut script = Script::new(answers);
        let schedule = vec![Op::Acquire { w: 0 }, Op::Renew { w: 1 }];
        let (best, _) = shrink_with(&mut script, "c", schedule, scripted(true, false).played).await.expect("scripted");
        (best, script.labels().iter().map(|l| l.to_string()).collect())
    }

    #[tokio::test]
    async fn a_candidate_that_held_on_a_starved_machine_is_played_again_and_kept_on_two_real_fails() {
        let (best, labels) = shrink_two(vec![scripted(false, true), scripted(true, true), scripted(true, false)]).await;
        assert_eq!(best, vec![Op::Renew { w: 1 }], "the first candidate (the first operation removed) is kept");
        assert_eq!(labels, ["c-shrink-1", "c-shrink-1-again-1", "c-shrink-2"]);
        // The same for its second play: held starved, then failed again.
        let (best, labels) = shrink_two(vec![scripted(true, false), scripted(false, true), scripted(true, true)]).await;
        assert_eq!(best, vec![Op::Renew { w: 1 }]);
        assert_eq!(labels, ["c-shrink-1", "c-shrink-2", "c-shrink-2-again-1"]);
    }

    #[tokio::test]
    async fn a_candidate_that_held_on_a_calm_machine_is_dropped_without_playing_it_again() {
        let (best, labels) = shrink_two(vec![scripted(false, false), scripted(false, false)]).await;
        assert_eq!(best.len(), 2, "neither operation could go");
        assert_eq!(labels, ["c-shrink-1", "c-shrink-2"]);
        let (best, labels) =
            shrink_two(vec![scripted(true, false), scripted(false, false), scripted(false, false)]).await;
        assert_eq!(best.len(), 2, "a candidate that failed once, then held on a calm machine, is dropped");
        assert_eq!(labels, ["c-shrink-1", "c-shrink-2", "c-shrink-3"]);
    }

    #[tokio::test]
    async fn a_candidate_that_keeps_holding_starved_is_dropped_after_the_last_play_again() {
        let mut answers: Vec<_> = (0..=STARVED_REPLAYS).map(|_| scripted(false, true)).collect();
        answers.push(scripted(false, false));
        let (best, labels) = shrink_two(answers).await;
        assert_eq!(best.len(), 2, "held starved every time: no FAIL, nothing kept");
        assert_eq!(labels, ["c-shrink-1", "c-shrink-1-again-1", "c-shrink-1-again-2", "c-shrink-2"]);
    }

    #[tokio::test]
    async fn a_shrink_on_a_machine_starved_throughout_stops_at_both_bounds() {
        let total = (MAX_PLAYS + MAX_STARVED_PLAYS) as usize;
        let mut script = Script::new((0..total).map(|_| scripted(false, true)).collect());
        let schedule: Vec<Op> = (0..64).map(|w| Op::Acquire { w }).collect();
        let (best, _) = shrink_with(&mut script, "c", schedule, scripted(true, false).played).await.expect("scripted");
        assert_eq!(best.len(), 64);
        let again = script.labels().iter().filter(|l| l.contains("-again-")).count();
        assert_eq!((script.played.len(), again), (total, MAX_STARVED_PLAYS as usize));
    }

    #[tokio::test]
    async fn a_long_schedule_first_tries_each_operation_alone_and_keeps_the_first_that_fails_twice() {
        let schedule: Vec<Op> = (0..10).map(|w| Op::Acquire { w }).collect();
        let mut answers = vec![scripted(false, false), scripted(true, false), scripted(false, false)];
        answers.extend([scripted(false, false), scripted(true, false), scripted(true, false)]);
        let mut script = Script::new(answers);
        let (best, _) =
            shrink_with(&mut script, "c", schedule.clone(), scripted(true, false).played).await.expect("scripted");
        assert_eq!(best, vec![Op::Acquire { w: 3 }], "the fourth operation fails alone, twice");
        let sizes: Vec<usize> = script.played.iter().map(|(_, n)| *n).collect();
        assert_eq!(sizes, [1; 6], "only single operations were played (the second failed once only)");
        // A schedule at the limit is shrunk by halving from the start.
        let mut script = Script::new((0..30).map(|_| scripted(false, false)).collect());
        let at_limit = schedule[..SINGLES_ABOVE].to_vec();
        let _ = shrink_with(&mut script, "c", at_limit, scripted(true, false).played).await;
        assert_eq!(script.played[0].1, SINGLES_ABOVE / 2, "the first candidate drops half");
    }

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
