//! The schedule generator, with swarm testing: every case first draws its own weight per kind of
//! operation (about a third of the kinds switched off), then draws its operations with those
//! weights, so one case is mostly takeovers and another mostly dispatches. Deterministic: the same
//! (seed, case) gives the same schedule on every machine (a small splitmix64 generator, no
//! dependency whose stream could change between versions).

use serde::Serialize;

use super::ops::{Body, Failures, Forge, LostWrite, Op, Point, Rev, RunEnd, Tool, ToolFault, KINDS, WORKERS};

/// Shortest and longest schedule.
pub const MIN_OPS: usize = 4;
pub const MAX_OPS: usize = 20;

/// splitmix64: small, fast, and the same stream everywhere.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64, case: u32) -> Rng {
        let mut r = Rng(seed ^ (case as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        r.next_u64();
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }

    pub fn coin(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }
}

/// One case's swarm: a weight per kind of [`KINDS`].
#[derive(Debug, Clone, Serialize)]
pub struct Swarm {
    pub weights: Vec<u32>,
}

/// The kinds added after the schedules' first release: drawn from a stream of their own and
/// inserted into the schedule the main stream gives, so adding one leaves every seed's schedules
/// as they were (the same operations in the same order), with the new operations among them. They
/// are the last entries of [`KINDS`].
const INSERTED: &[&str] = &["serialization", "plan_secret", "plan_crash", "ended_in_flight"];

/// The side stream's seed, for the inserted kinds.
const SIDE: u64 = 0x5E71_A112_0D5E_0001;
/// The seed of the stream of the kinds inserted later still ([`LATER`]): a stream of their own, so
/// the side stream draws what it drew before for the kinds it had.
const SIDE_LATER: u64 = 0x5E71_A112_0D5E_0002;
/// The inserted kinds drawn from [`SIDE_LATER`].
const LATER: &[&str] = &["plan_crash"];
/// The seed of the stream of the kinds inserted after [`LATER`]'s ([`LATEST`]).
const SIDE_LATEST: u64 = 0x5E71_A112_0D5E_0003;
/// The inserted kinds drawn from [`SIDE_LATEST`] (the last entries of [`INSERTED`]).
const LATEST: &[&str] = &["ended_in_flight"];

/// The side streams of the inserted kinds, one per generation of them.
struct Sides {
    side: Rng,
    later: Rng,
    latest: Rng,
}

impl Sides {
    fn new(seed: u64, case: u32) -> Sides {
        Sides {
            side: Rng::new(seed ^ SIDE, case),
            later: Rng::new(seed ^ SIDE_LATER, case),
            latest: Rng::new(seed ^ SIDE_LATEST, case),
        }
    }

    /// The stream an inserted kind draws from.
    fn stream(&mut self, kind: &str) -> &mut Rng {
        if LATEST.contains(&kind) {
            &mut self.latest
        } else if LATER.contains(&kind) {
            &mut self.later
        } else {
            &mut self.side
        }
    }
}

fn drawn_first() -> usize {
    KINDS.len() - INSERTED.len()
}

impl Swarm {
    fn draw(rng: &mut Rng, sides: &mut Sides) -> Swarm {
        let mut weights: Vec<u32> = KINDS[..drawn_first()].iter().map(|_| rng.pick(&[0, 0, 1, 2, 4, 8])).collect();
        weights.extend(INSERTED.iter().map(|k| sides.stream(k).pick(&[0, 0, 1, 2, 4, 8])));
        // Nearly everything needs a holder and a write: those are never switched off.
        for (i, k) in KINDS.iter().enumerate() {
            if matches!(*k, "acquire" | "save") {
                weights[i] = weights[i].max(4);
            }
        }
        Swarm { weights }
    }

    /// A kind of the main stream (never an inserted one).
    fn kind(&self, rng: &mut Rng) -> usize {
        let main = &self.weights[..drawn_first()];
        let total: u32 = main.iter().sum();
        let mut x = (rng.next_u64() % total as u64) as u32;
        for (i, w) in main.iter().enumerate() {
            if x < *w {
                return i;
            }
            x -= w;
        }
        unreachable!("x < total")
    }

    /// The enabled kinds, by name (for the log).
    pub fn enabled(&self) -> Vec<&'static str> {
        KINDS.iter().zip(&self.weights).filter(|(_, w)| **w > 0).map(|(k, _)| *k).collect()
    }
}

/// The bodies a planned or dispatched request may have.
const BODIES: [Body; 5] = [Body::Plain, Body::Numbers, Body::Escapes, Body::Unicode, Body::Nested];
/// The tools an operation may call.
const TOOLS: [Tool; 4] = [Tool::Idem, Tool::Detid, Tool::Opquery, Tool::Plain];

fn op_of_kind(kind: &str, rng: &mut Rng) -> Op {
    let w = rng.below(WORKERS);
    match lease_op(kind, w, rng) {
        Some(op) => op,
        None => outbox_op(kind, w, rng),
    }
}

/// An op of the lease and the run (and the faults on them) by worker `w`; `None` for another kind.
fn lease_op(kind: &str, w: usize, rng: &mut Rng) -> Option<Op> {
    let op = match kind {
        "acquire" => Op::Acquire { w },
        "renew" => Op::Renew { w },
        "save" => Op::Save {
            w,
            holder: rng.below(3) > 0,
            at: rng.pick(&[Rev::Known, Rev::Known, Rev::Current, Rev::Stale]),
            body: rng.pick(&BODIES),
        },
        "save_twice" => Op::SaveTwice { w },
        "release" => Op::Release { w },
        "succeed" => Op::Succeed { w, holder: rng.coin() },
        "fail" => Op::Fail { w, holder: rng.coin() },
        "pause" => Op::Pause { w },
        "resume" => Op::Resume { w },
        "kill" => Op::Kill { w },
        "expire" => Op::Expire,
        "stale_holder" => Op::StaleHolder {
            by: if rng.below(3) == 0 { None } else { Some(rng.below(WORKERS)) },
            then_write: rng.coin(),
        },
        "stale_twin" => Op::StaleTwin { then_write: rng.coin() },
        "server_freeze" => Op::ServerFreeze,
        "held_across_takeover" => Op::HeldAcrossTakeover {
            by: rng.below(WORKERS),
            point: rng.pick(&[Point::AfterBegin, Point::AfterLeaseValidated, Point::BeforeCommit]),
        },
        "lost_answer" => Op::LostAnswer {
            ack: rng.coin(),
            what: rng.pick(&[LostWrite::Save, LostWrite::Save, LostWrite::Succeed, LostWrite::Fail]),
        },
        "serialization" => Op::Serialization {
            failures: rng.pick(&[Failures::Once, Failures::Several, Failures::Endless, Failures::Endless]),
        },
        "rogue" => Op::Rogue {
            forge: rng.pick(&[
                Forge::StaleEpochWrite,
                Forge::ForeignOwnerWrite,
                Forge::StaleEpochRenew,
                Forge::StaleEpochRelease,
                Forge::ForeignOwnerRenew,
                Forge::ForeignOwnerRelease,
                Forge::ExpiredRenew,
                Forge::ForeignResult,
            ]),
        },
        _ => return None,
    };
    Some(op)
}

/// An op of the control plane, the ledger and the tools (worker `w` where it needs one).
fn outbox_op(kind: &str, w: usize, rng: &mut Rng) -> Op {
    match kind {
        "cancel" => Op::Cancel { plan_first: rng.coin(), tool: rng.pick(&TOOLS) },
        "retry" => Op::Retry,
        "plan" => Op::Plan { w, tool: rng.pick(&TOOLS), body: rng.pick(&BODIES) },
        "plan_secret" => Op::PlanSecret { tool: rng.pick(&TOOLS) },
        "plan_crash" => Op::PlanCrash { tool: rng.pick(&TOOLS) },
        "arm_tool_fault" => Op::ArmToolFault {
            fault: rng.pick(&[
                ToolFault::DropAfterCommit,
                ToolFault::DropAfterCommit,
                ToolFault::Error5xx,
                ToolFault::Hang,
            ]),
        },
        "dispatch" => Op::Dispatch {
            tool: rng.pick(&TOOLS),
            body: rng.pick(&BODIES),
            fault: rng.pick(&[
                None,
                None,
                Some(ToolFault::DropAfterCommit),
                Some(ToolFault::Hang),
                Some(ToolFault::Error5xx),
            ]),
        },
        "late_result" => Op::LateResult { kill: rng.coin(), cancel: rng.below(3) == 0, tool: rng.pick(&TOOLS) },
        "ended_in_flight" => Op::EndedInFlight {
            end: rng.pick(&[RunEnd::Succeed, RunEnd::Fail, RunEnd::Release, RunEnd::Lapse]),
            kill: rng.below(3) == 0,
            tool: rng.pick(&TOOLS),
        },
        "reconcile" => Op::Reconcile,
        "advance" => Op::Advance { w },
        other => unreachable!("unknown kind {other}"),
    }
}

/// The schedule of case `case` of `seed`, and the swarm it was drawn with.
pub fn schedule(seed: u64, case: u32) -> (Vec<Op>, Swarm) {
    steered(seed, case, &[])
}

/// The schedule of case `case` of `seed` with the swarm's weights multiplied by `boosts` (one per
/// kind, [`super::steer::apply`]; none or all 1: [`schedule`]'s), and the swarm it was drawn with.
pub fn steered(seed: u64, case: u32, boosts: &[u32]) -> (Vec<Op>, Swarm) {
    let mut rng = Rng::new(seed, case);
    let mut sides = Sides::new(seed, case);
    let drawn = Swarm::draw(&mut rng, &mut sides);
    let swarm = Swarm { weights: super::steer::apply(&drawn.weights, boosts) };
    let len = MIN_OPS + rng.below(MAX_OPS - MIN_OPS + 1);
    let mut ops: Vec<Op> = (0..len).map(|_| op_of_kind(KINDS[swarm.kind(&mut rng)], &mut rng)).collect();
    // Each enabled inserted kind: one to three operations, at places of the side stream's choice
    // (more with a heavier weight), never past the longest schedule.
    for (i, kind) in INSERTED.iter().enumerate() {
        let w = swarm.weights[drawn_first() + i];
        if w == 0 {
            continue;
        }
        let r = sides.stream(kind);
        for _ in 0..(1 + r.below(if w >= 4 { 3 } else { 2 })) {
            if ops.len() < MAX_OPS {
                let at = r.below(ops.len() + 1);
                ops.insert(at, op_of_kind(kind, r));
            }
        }
    }
    (ops, swarm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boosts_of_one_leave_every_schedule_as_it_was_and_others_change_some() {
        let ones = vec![1; KINDS.len()];
        let mut late = ones.clone();
        late[KINDS.iter().position(|k| *k == "late_result").unwrap()] = 8;
        let mut changed = 0;
        for case in 1..40 {
            assert_eq!(steered(0x2a, case, &ones).0, schedule(0x2a, case).0, "case {case}");
            assert_eq!(steered(0x2a, case, &late).0, steered(0x2a, case, &late).0, "case {case}");
            changed += usize::from(steered(0x2a, case, &late).0 != schedule(0x2a, case).0);
        }
        assert!(changed > 20, "a heavy boost changes most cases ({changed} of 39)");
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        assert_eq!(schedule(42, 3).0, schedule(42, 3).0);
        assert_ne!(schedule(42, 3).0, schedule(42, 4).0);
    }

    #[test]
    fn an_inserted_kind_leaves_the_main_streams_operations_in_their_order() {
        let inserted: Vec<usize> = (drawn_first()..KINDS.len()).collect();
        for case in 0..50 {
            let (ops, swarm) = schedule(0x2a, case);
            let mut rng = Rng::new(0x2a, case);
            let main = Swarm::draw(&mut rng, &mut Sides::new(0, 0));
            assert_eq!(main.weights[..drawn_first()], swarm.weights[..drawn_first()]);
            let len = MIN_OPS + rng.below(MAX_OPS - MIN_OPS + 1);
            let expected: Vec<Op> = (0..len).map(|_| op_of_kind(KINDS[main.kind(&mut rng)], &mut rng)).collect();
            let kept: Vec<Op> = ops.iter().filter(|o| !inserted.contains(&o.kind())).cloned().collect();
            assert_eq!(kept, expected, "case {case}");
        }
    }

    /// The latest inserted kind draws from a stream of its own: without its operations, every
    /// case is the schedule it was before the kind existed (its weight 0 stands for that).
    #[test]
    fn the_latest_inserted_kind_leaves_every_earlier_operation_in_place() {
        let latest = KINDS.iter().position(|k| LATEST.contains(k)).expect("listed");
        let mut without = vec![1; KINDS.len()];
        without[latest] = 0;
        let mut with_it = 0;
        for case in 1..60 {
            let ops = schedule(0x2a, case).0;
            with_it += usize::from(ops.iter().any(|o| o.kind() == latest));
            let kept: Vec<Op> = ops.into_iter().filter(|o| o.kind() != latest).collect();
            assert_eq!(kept, steered(0x2a, case, &without).0, "case {case}");
        }
        assert!(with_it > 10, "the kind is drawn in some cases ({with_it})");
    }

    #[test]
    fn every_kind_is_generated_and_swarms_differ() {
        let mut seen = vec![false; KINDS.len()];
        let mut swarms = std::collections::BTreeSet::new();
        for case in 0..400 {
            let (ops, swarm) = schedule(7, case);
            assert!((MIN_OPS..=MAX_OPS).contains(&ops.len()));
            for op in &ops {
                seen[op.kind()] = true;
                assert!(swarm.weights[op.kind()] > 0, "an operation of a switched-off kind");
            }
            swarms.insert(swarm.weights.clone());
        }
        let missing: Vec<&str> = KINDS.iter().zip(&seen).filter(|(_, s)| !**s).map(|(k, _)| *k).collect();
        assert!(missing.is_empty(), "never generated: {missing:?}");
        assert!(swarms.len() > 300, "swarms should differ between cases ({})", swarms.len());
    }
}
