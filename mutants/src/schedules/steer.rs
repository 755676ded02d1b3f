//! Steering the generator toward the model transitions no case has reached yet (`schedules
//! --steer`). After each case the transitions its history exercised (trace validation's classes)
//! feed back into the weights of the next case's swarm, by two measures per kind of operation:
//!
//! - **yield**: how many transitions new to the run the cases holding the kind found, per case
//!   that held it; a kind above the kinds' mean gains up to [`MAX_CREDIT`] (the best kind all of
//!   it), one at or below it nothing, and a kind no case has held yet [`UNTRIED`];
//! - **aim**: each kind bears on some factors of a transition's class ([`BEARS_ON`]); the share of
//!   the targets showing one of its factors that are still unreached, up to [`MAX_AIM`].
//!
//! A kind's weight is the swarm's draw times `1 + yield + aim`; a kind the swarm switched off stays
//! off unless its boost is the highest there is ([`REVIVE`]). Integers only: a case's boosts are a
//! function of the seed and the transitions the earlier cases reached, and are recorded with the
//! case, so [`super::gen::steered`] regenerates its schedule from them.

use std::collections::BTreeSet;

use super::ops::KINDS;

/// The most credit one kind collects.
pub const MAX_CREDIT: u32 = 4;
/// The credit of a kind no case has held yet.
pub const UNTRIED: u32 = MAX_CREDIT / 2;
/// The most a kind's aim adds.
pub const MAX_AIM: u32 = 3;
/// A switched-off kind whose boost reaches this (the most there is) comes back on: reviving every
/// kind with some boost would undo the swarm, whose switched-off kinds are what lets a case go deep
/// in the few it keeps.
pub const REVIVE: u32 = 1 + MAX_CREDIT + MAX_AIM;

/// The class factors (and action kinds) each kind of operation arranges, as `field=value` of a
/// transition's line (`model/transitions.txt`) or `| kind`.
pub const BEARS_ON: &[(&str, &[&str])] = &[
    ("acquire", &["| acquire", "lease=live"]),
    ("renew", &["| renew"]),
    ("save", &["| commit"]),
    ("save_twice", &["| commit"]),
    ("release", &["| release", "lease=free"]),
    ("succeed", &["run=succeeded"]),
    ("fail", &["| commit"]),
    ("pause", &["lease=expired"]),
    ("resume", &[]),
    ("kill", &["lease=expired", "stale=true"]),
    ("expire", &["lease=expired"]),
    ("stale_holder", &["stale=true", "lease=expired"]),
    ("stale_twin", &["stale=true"]),
    ("server_freeze", &["| renew"]),
    ("held_across_takeover", &["open=true", "stale=true"]),
    ("cancel", &["run=cancelled", "| cancel"]),
    ("retry", &["run=pending"]),
    ("plan", &["op=prepared"]),
    ("arm_tool_fault", &["op=unknown", "| give-up-unknown"]),
    ("dispatch", &["| claim", "| write-result", "op=dispatching", "| give-up-unknown"]),
    (
        "late_result",
        &["other-in-flight=true", "| mark-unknown", "| reconcile", "| write-result", "op=unknown", "run=cancelled"],
    ),
    ("reconcile", &["| reconcile", "op=unknown"]),
    ("advance", &["| commit"]),
    ("rogue", &[]),
    ("lost_answer", &["| commit"]),
    ("serialization", &["| commit"]),
    ("plan_secret", &["op=prepared"]),
    ("plan_crash", &["op=prepared", "lease=expired"]),
    (
        "ended_in_flight",
        &[
            "run=succeeded",
            "lease=free",
            "lease=expired",
            "op=dispatching",
            "| write-result",
            "| mark-unknown",
            "| reconcile",
        ],
    ),
];

/// What the steering has learnt so far.
#[derive(Debug, Clone)]
pub struct Steer {
    /// Every transition an earlier case reached.
    seen: BTreeSet<String>,
    /// Per kind of [`KINDS`]: the cases that held it, and the new transitions they found.
    tries: Vec<u32>,
    finds: Vec<u32>,
    /// The transitions to aim at.
    targets: Vec<String>,
}

fn bears_on(kind: &str) -> &'static [&'static str] {
    BEARS_ON.iter().find(|(k, _)| *k == kind).map(|(_, f)| *f).unwrap_or(&[])
}

fn matches(transition: &str, factor: &str) -> bool {
    if let Some(kind) = factor.strip_prefix("| ") {
        return transition.ends_with(&format!("| {kind}"));
    }
    transition.split(" | ").next().is_some_and(|class| class.split(' ').any(|f| f == factor))
}

impl Steer {
    /// Steering toward `targets` (the model's transitions no known reason keeps out of reach),
    /// nothing reached yet.
    pub fn new(targets: impl IntoIterator<Item = String>) -> Steer {
        let n = KINDS.len();
        Steer { seen: BTreeSet::new(), tries: vec![0; n], finds: vec![0; n], targets: targets.into_iter().collect() }
    }

    /// Learn from one case: the kinds of its operations and the transitions its history reached.
    /// Returns how many of them no earlier case had reached.
    pub fn learn(&mut self, kinds: &BTreeSet<usize>, reached: &BTreeSet<String>) -> usize {
        let new = reached.iter().filter(|t| !self.seen.contains(*t)).count();
        for k in kinds {
            self.tries[*k] += 1;
            self.finds[*k] += new as u32;
        }
        self.seen.extend(reached.iter().cloned());
        new
    }

    /// Each kind's yield, in thousandths of a new transition per case that held it; `None` for a
    /// kind no case has held.
    fn yields(&self) -> Vec<Option<u32>> {
        self.tries.iter().zip(&self.finds).map(|(t, f)| (*t > 0).then(|| f * 1000 / t)).collect()
    }

    /// The boost of every kind for the next case: `1 + yield + aim`.
    pub fn boosts(&self) -> Vec<u32> {
        let yields = self.yields();
        let tried: Vec<u32> = yields.iter().flatten().copied().collect();
        let best = tried.iter().copied().max().unwrap_or(0);
        let mean = tried.iter().sum::<u32>() / (tried.len() as u32).max(1);
        (0..KINDS.len())
            .map(|k| {
                let credit = match yields[k] {
                    None => UNTRIED,
                    Some(_) if best == mean => 0,
                    Some(y) => MAX_CREDIT * y.saturating_sub(mean) / (best - mean),
                };
                1 + credit + self.aim(KINDS[k])
            })
            .collect()
    }

    /// The share of the targets bearing `kind`'s factors that no case has reached, in `0..=MAX_AIM`.
    fn aim(&self, kind: &str) -> u32 {
        let mine: Vec<&String> = self.targets.iter().filter(|t| bears_on(kind).iter().any(|f| matches(t, f))).collect();
        let open = mine.iter().filter(|t| !self.seen.contains(**t)).count() as u32;
        MAX_AIM * open / (mine.len() as u32).max(1)
    }
}

/// A swarm's weights under `boosts` (one per kind): each times its boost, a switched-off kind back
/// on when its boost reaches [`REVIVE`]; every weight 1 leaves the swarm as drawn.
pub fn apply(weights: &[u32], boosts: &[u32]) -> Vec<u32> {
    weights
        .iter()
        .zip(boosts.iter().chain(std::iter::repeat(&1)))
        .map(|(w, b)| if *w == 0 && *b >= REVIVE { *b } else { w * b })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(name: &str) -> usize {
        KINDS.iter().position(|k| *k == name).expect("a kind")
    }

    const T1: &str = "lease=live run=running op=- other-in-flight=false open=false stale=false | renew";
    const T2: &str = "lease=live run=cancelled op=dispatching other-in-flight=true open=false stale=true | reconcile";

    #[test]
    fn every_kind_says_what_it_bears_on() {
        for k in KINDS {
            assert!(BEARS_ON.iter().any(|(n, _)| n == k), "{k} is not in BEARS_ON");
        }
    }

    #[test]
    fn kinds_that_found_more_than_the_mean_gain_and_aim_follows_what_is_left() {
        let mut s = Steer::new([T1.to_string(), T2.to_string()]);
        let before = s.boosts();
        assert_eq!(before[kind("late_result")], 1 + UNTRIED + MAX_AIM, "untried, and T2 bears its factors");
        assert_eq!(before[kind("resume")], 1 + UNTRIED, "untried, bearing on nothing");
        assert_eq!(s.learn(&[kind("renew")].into(), &[T1.to_string()].into()), 1);
        assert_eq!(s.learn(&[kind("resume")].into(), &BTreeSet::new()), 0);
        let after = s.boosts();
        assert_eq!(after[kind("renew")], 1 + MAX_CREDIT, "the best yield, and T1 (renew's only target) reached");
        assert_eq!(after[kind("resume")], 1, "held once, found nothing: below the mean");
        assert_eq!(after[kind("late_result")], before[kind("late_result")], "still untried, T2 still open");
    }

    /// A steered run is a function of the seed and what its cases reached: the same feedback gives
    /// the same boosts, and so the same schedules, case after case.
    #[test]
    fn the_same_feedback_gives_the_same_boosts_and_schedules() {
        let targets = || [T1.to_string(), T2.to_string()];
        let (mut a, mut b) = (Steer::new(targets()), Steer::new(targets()));
        let feedback: Vec<BTreeSet<String>> = vec![[T1.to_string()].into(), BTreeSet::new(), [T2.to_string()].into()];
        for (case, reached) in (1u32..).zip(&feedback) {
            assert_eq!(a.boosts(), b.boosts(), "case {case}");
            let (ops, _) = super::super::gen::steered(0x2a, case, &a.boosts());
            assert_eq!(ops, super::super::gen::steered(0x2a, case, &b.boosts()).0);
            let kinds: BTreeSet<usize> = ops.iter().map(super::super::ops::Op::kind).collect();
            assert_eq!(a.learn(&kinds, reached), b.learn(&kinds, reached));
        }
        assert_ne!(a.boosts(), Steer::new(targets()).boosts(), "the feedback moved the weights");
    }

    #[test]
    fn boosts_multiply_the_swarm_and_revive_a_kind_it_switched_off() {
        assert_eq!(apply(&[0, 2, 0, 4], &[1, 1, REVIVE, 2]), vec![0, 2, REVIVE, 8]);
        assert_eq!(apply(&[3, 0], &[1, 1]), vec![3, 0], "no boost leaves the swarm as drawn");
    }
}
