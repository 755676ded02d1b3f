//! Plays on a starved machine. A schedule's race is made by the harness's timing (a save held at a
//! barrier, a pause, a takeover answered within a few hundred milliseconds); when the whole machine
//! queued for its cores during a play (Linux CPU pressure, [`fenceproof_harness::pressure`]), a
//! play that held may only mean that its moment was not made. Such a play is no evidence that the
//! schedule holds, so it is played again, at most [`STARVED_REPLAYS`] times, until it fails or holds
//! on a machine that was not starved. A FAIL is never played again: it is proven from its evidence,
//! whatever the load, and the load decides no verdict, only whether to play once more. The replays
//! of a saved schedule (`schedules run --replay`) and the shrinker ([`super::shrink`]) play through here.

use std::future::Future;

use fenceproof_harness::pressure::{self, Stall};
use fenceproof_harness::HarnessError;
use fenceproof_scenarios::runner::Session;

use super::ops::Op;
use super::Played;

/// How many times a play that held on a starved machine is played again, at most.
pub const STARVED_REPLAYS: u32 = 2;

/// One play, with the machine's CPU stall during it when that stall starved the machine.
pub struct Measured {
    pub played: Played,
    /// `Some` only when the stall was long and large enough to starve ([`Stall::starved`]).
    pub starved: Option<Stall>,
}

impl Measured {
    /// The stall of a play that held on a starved machine (no evidence either way), else `None`.
    fn held_starved(&self) -> Option<Stall> {
        self.starved.filter(|_| self.played.failed.is_empty())
    }
}

/// What plays schedules: [`SessionPlayer`] on the session's server; a script in unit tests.
pub trait Player {
    /// Play `schedule` once, labelled `label`, and say whether the machine starved meanwhile.
    fn play(&mut self, label: &str, schedule: &[Op]) -> impl Future<Output = Result<Measured, HarnessError>>;
}

/// Plays each schedule in a fresh database of `session` ([`super::play`]), measuring the machine's
/// CPU pressure from before it starts until its verdict.
pub struct SessionPlayer<'a> {
    pub session: &'a mut Session,
    pub worker_args: &'a [String],
}

impl Player for SessionPlayer<'_> {
    async fn play(&mut self, label: &str, schedule: &[Op]) -> Result<Measured, HarnessError> {
        let cpu = pressure::mark();
        let played = super::play(self.session, label, schedule, self.worker_args).await?;
        let starved = cpu.and_then(|m| m.since()).filter(Stall::starved);
        Ok(Measured { played, starved })
    }
}

/// `first` (the play of `schedule` labelled `label`) when it failed or the machine was not
/// starved; else the play again (`{label}-again-N`, at most `max` of them, and at most
/// [`STARVED_REPLAYS`]) that first failed or held unstarved, or the last one. Also how many plays
/// again were made.
pub async fn again_while_starved<P: Player>(
    player: &mut P,
    label: &str,
    schedule: &[Op],
    first: Measured,
    max: u32,
) -> Result<(Measured, u32), HarnessError> {
    let mut last = first;
    let mut again = 0;
    while again < max.min(STARVED_REPLAYS) {
        let Some(stall) = last.held_starved() else { break };
        again += 1;
        let next = format!("{label}-again-{again}");
        eprintln!("{label} held while the machine was starved ({}); playing it again as {next}", stall.describe());
        last = player.play(&next, schedule).await?;
    }
    Ok((last, again))
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::{BTreeSet, VecDeque};
    use std::time::Duration;

    use fenceproof_harness::check::Check;

    use super::*;

    /// The check the scripted plays fail.
    pub(crate) const BUG: &str = "only the current lease holder commits run state";

    /// A scripted play: whether it fails [`BUG`] (else every check holds), and whether the machine
    /// starved during it.
    pub(crate) fn scripted(fails: bool, starved: bool) -> Measured {
        let failed = if fails { vec![Check::fail(BUG, "#9 committed by a stale holder")] } else { Vec::new() };
        let played = Played { failed, log: Vec::new(), reached: BTreeSet::new(), transitions: BTreeSet::new() };
        let stall = Stall { stalled: Duration::from_secs(9), window: Duration::from_secs(12) };
        Measured { played, starved: starved.then_some(stall) }
    }

    /// Answers each play with the next scripted one, and notes what was played; a play beyond the
    /// script panics (a caller that plays more than the test expects fails it).
    pub(crate) struct Script {
        pub answers: VecDeque<Measured>,
        pub played: Vec<(String, usize)>,
    }

    impl Script {
        pub(crate) fn new(answers: Vec<Measured>) -> Script {
            Script { answers: answers.into(), played: Vec::new() }
        }

        pub(crate) fn labels(&self) -> Vec<&str> {
            self.played.iter().map(|(l, _)| l.as_str()).collect()
        }
    }

    impl Player for Script {
        async fn play(&mut self, label: &str, schedule: &[Op]) -> Result<Measured, HarnessError> {
            self.played.push((label.to_string(), schedule.len()));
            Ok(self.answers.pop_front().unwrap_or_else(|| panic!("{label}: played beyond the script")))
        }
    }

    async fn again(first: Measured, script: Vec<Measured>, max: u32) -> (bool, u32, Vec<String>) {
        let mut s = Script::new(script);
        let (m, n) = again_while_starved(&mut s, "r", &[], first, max).await.expect("scripted");
        (m.played.failed.is_empty(), n, s.labels().iter().map(|l| l.to_string()).collect())
    }

    #[tokio::test]
    async fn a_play_that_held_starved_is_played_again_until_it_fails() {
        let (held, n, labels) =
            again(scripted(false, true), vec![scripted(false, true), scripted(true, true)], u32::MAX).await;
        assert!(!held, "the second play again failed");
        assert_eq!((n, labels), (2, vec!["r-again-1".to_string(), "r-again-2".to_string()]));
    }

    #[tokio::test]
    async fn a_fail_or_a_calm_hold_is_never_played_again() {
        assert_eq!(again(scripted(true, true), vec![], u32::MAX).await, (false, 0, vec![]), "a starved FAIL");
        assert_eq!(again(scripted(false, false), vec![], u32::MAX).await, (true, 0, vec![]), "a calm hold");
        let (held, n, _) = again(scripted(false, true), vec![scripted(false, false)], u32::MAX).await;
        assert_eq!((held, n), (true, 1), "held again on a calm machine: played no more");
    }

    #[tokio::test]
    async fn plays_again_are_bounded_by_the_constant_and_the_callers_allowance() {
        let starved_holds = || (0..=STARVED_REPLAYS).map(|_| scripted(false, true)).collect::<Vec<_>>();
        let (held, n, _) = again(scripted(false, true), starved_holds(), u32::MAX).await;
        assert_eq!((held, n), (true, STARVED_REPLAYS), "still held starved after the last: it held");
        assert_eq!(again(scripted(false, true), starved_holds(), 1).await.1, 1);
        assert_eq!(again(scripted(false, true), starved_holds(), 0).await.1, 0, "no allowance left");
    }
}
