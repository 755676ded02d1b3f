//! PostgreSQL's behaviour as the model states it, step by step: a takeover waits while a protected
//! commit holds the lease row and then re-evaluates its condition; a commit validated before the
//! lease expired still commits; a stale owner's validation fails after a takeover; a claim's
//! holder gives its own claim up as unknown, live or expired, and moves nothing once it moved on.

use fenceproof_model::action::Action;
use fenceproof_model::config::Config;
use fenceproof_model::enabled::enabled;
use fenceproof_model::state::{OpStatus, State, Txn, Write};
use fenceproof_model::step::next;
use fenceproof_model::ProtocolModel;

fn cfg() -> Config {
    Config { symmetry: false, restores: 0, promotes: 0, jumps: 0, ..Config::default_bound() }
}

fn walk(c: &Config, actions: &[Action]) -> State {
    let mut s = ProtocolModel::new(c.clone()).initial();
    for a in actions {
        let mut on = Vec::new();
        enabled(c, &s, &mut on);
        assert!(on.contains(a), "{a:?} is not enabled in {s:?}");
        s = next(c, &s, *a).expect("the step changes the state");
    }
    s
}

fn is_enabled(c: &Config, s: &State, a: Action) -> bool {
    let mut on = Vec::new();
    enabled(c, s, &mut on);
    on.contains(&a)
}

#[test]
fn takeover_waits_for_the_row_lock_then_rechecks() {
    let c = cfg();
    let s = walk(&c, &[Action::Acquire(0), Action::Lock(0), Action::Validate(0), Action::Tick]);
    assert!(s.primary.lease.expired(), "the lease expired after validation");
    assert!(!is_enabled(&c, &s, Action::Acquire(1)), "the takeover must wait on the locked row");
    let s = walk(
        &c,
        &[Action::Acquire(0), Action::Lock(0), Action::Validate(0), Action::Tick, Action::Commit(0, Write::Start)],
    );
    assert_eq!(s.primary.revision, 1, "valid at check, expired at commit: the commit stands");
    assert!(!s.ghost.stale_write);
    assert!(is_enabled(&c, &s, Action::Acquire(1)), "the row is free and the lease expired: takeover proceeds");
}

#[test]
fn stale_owner_is_refused_after_a_takeover() {
    let c = cfg();
    let s = walk(&c, &[Action::Acquire(0), Action::Tick, Action::Acquire(1), Action::Lock(0), Action::Validate(0)]);
    assert_eq!(s.procs[0].txn, Txn::Idle, "the stale owner's transaction ended");
    assert!(s.procs[0].lease.is_none(), "the stale owner learned its lease is lost");
    assert_eq!(s.primary.lease.epoch, 2);
}

#[test]
fn a_40001_aborts_the_whole_transaction_and_frees_the_row() {
    let c = Config::process_faults();
    let c = Config { symmetry: false, ..c };
    let s = walk(&c, &[Action::Acquire(0), Action::Lock(0), Action::Validate(0), Action::Abort(0)]);
    assert_eq!(s.lock, None);
    assert_eq!(s.procs[0].txn, Txn::Idle);
    assert_eq!(s.primary.revision, 0, "nothing of the aborted transaction committed");
    assert!(s.procs[0].lease.is_some(), "a 40001 is not a lost lease");
}

#[test]
fn the_reachable_transitions_of_a_small_bound_are_counted() {
    use fenceproof_model::coverage::{reachable, LeaseClass};
    let c = Config { ops: 1, restores: 0, promotes: 0, jumps: 0, ..Config::default_bound() };
    let r = reachable(&ProtocolModel::new(c.clone()), 5_000_000).expect("the small bound is exhausted");
    let t = &r.rules;
    assert!(t.iter().any(|(cl, k)| *k == "claim" && cl.op == Some(OpStatus::Prepared)), "claims of prepared ops");
    assert!(t.iter().all(|(cl, k)| *k != "claim" || cl.op == Some(OpStatus::Prepared)), "a claim takes only prepared");
    assert!(t.iter().all(|(cl, k)| *k != "commit" || cl.op.is_none()), "a commit acts on no operation");
    assert!(
        t.iter().any(|(cl, k)| *k == "commit" && cl.lease == LeaseClass::Expired),
        "a commit validated before expiry is reachable"
    );
    assert!(
        t.iter().all(|(cl, k)| *k != "commit" || !cl.validated_open),
        "the row lock lets one commit validate at a time: no other is open at a commit"
    );
    assert!(!t.iter().any(|(_, k)| *k == "promote"), "no promotion in a bound without one");
    assert!(t.iter().all(|(cl, _)| cl.op.is_none() || !cl.other_in_flight), "one operation has no other");
    assert!(t.iter().any(|(cl, k)| *k == "cancel" && cl.other_in_flight), "a run action sees every operation");
    let again = reachable(&ProtocolModel::new(c), 5_000_000).unwrap();
    assert_eq!((t.len(), r.fine.len()), (again.rules.len(), again.fine.len()), "the walk is deterministic");
    eprintln!("{} transitions ({} fine)", t.len(), r.fine.len());
}

/// Acquire, start and plan operation 0, so a dispatcher can claim it.
const PLANNED: [Action; 7] = [
    Action::Acquire(0),
    Action::Lock(0),
    Action::Validate(0),
    Action::Commit(0, Write::Start),
    Action::Lock(0),
    Action::Validate(0),
    Action::Commit(0, Write::Plan(0)),
];

#[test]
fn the_claim_holder_gives_its_own_claim_up_as_unknown() {
    let c = cfg();
    let claimed: Vec<Action> = PLANNED.iter().copied().chain([Action::Claim(1, 0), Action::Call(1)]).collect();
    let s = walk(&c, &claimed);
    assert!(s.primary.ops[0].until > 0, "the claim is live");
    assert!(!is_enabled(&c, &s, Action::MarkUnknown(0)), "a live claim is not the reconciler's");
    let lease = s.primary.lease;
    let s = walk(&c, &[claimed.as_slice(), &[Action::GiveUp(1)]].concat());
    let op = s.primary.ops[0];
    assert_eq!((op.status, op.dispatch_owner, op.was_unknown), (OpStatus::Unknown, None, true));
    assert!(s.procs[1].claim.is_none(), "the session's claim ended");
    assert_eq!(s.primary.lease, lease, "the lease is not the dispatcher's and did not move");
}

#[test]
fn giving_up_a_claim_that_moved_on_changes_no_row() {
    let c = cfg();
    let expired: Vec<Action> =
        PLANNED.iter().copied().chain([Action::Claim(1, 0), Action::Call(1), Action::Tick]).collect();
    let s = walk(&c, &expired);
    assert!(is_enabled(&c, &s, Action::GiveUp(1)), "an expired claim may still be given up by its holder");
    let s = walk(&c, &[expired.as_slice(), &[Action::MarkUnknown(0)]].concat());
    let t = next(&c, &s, Action::GiveUp(1)).expect("the session's claim ends");
    assert_eq!(t.primary, s.primary, "the reconciler moved the claim on: no row matches");
    assert!(t.procs[1].claim.is_none());
}

/// The bounds the fingerprints walk: each small enough to walk whole in well under a second, and
/// together reaching every guard of `enabled` and every branch of the steps at least once (each
/// fault, replication mode, capability and ablation in one of them).
fn fingerprint_bounds() -> Vec<(&'static str, Config)> {
    use fenceproof_model::config::{Ablation, Capability, Replication};
    let small = Config {
        ops: 1,
        symmetry: false,
        restores: 0,
        promotes: 0,
        jumps: 0,
        max_revision: 2,
        replication: Replication::Off,
        ..Config::default_bound()
    };
    let mut b = vec![
        ("small", small.clone()),
        ("two-ops", Config { ops: 2, max_revision: 3, max_sessions: 1, ..small.clone() }),
        ("symmetric", Config { symmetry: true, ..small.clone() }),
        ("kill", Config { kills: 1, ..small.clone() }),
        ("abort", Config { aborts: 1, ..small.clone() }),
        ("lost-ack", Config { lost_acks: 1, max_sessions: 1, ..small.clone() }),
        ("pauses", Config { pauses: true, max_sessions: 1, ..small.clone() }),
        ("restart-owner-reuse", Config { restarts: 1, owner_reuse: true, max_sessions: 1, ..small.clone() }),
        ("restart", Config { restarts: 1, max_sessions: 1, ..small.clone() }),
        ("jumps", Config { jumps: 1, jump: 2, max_sessions: 1, ..small.clone() }),
        ("sync-promote", Config { replication: Replication::Sync, promotes: 1, ..small.clone() }),
        (
            "async-promote",
            Config { replication: Replication::Async, promotes: 1, max_sessions: 1, max_revision: 1, ..small.clone() },
        ),
        ("restore", Config { restores: 1, ..small.clone() }),
        ("sessions-1", Config { max_sessions: 1, ..small.clone() }),
        ("ttl-2", Config { ttl: 2, claim_ttl: 2, ..small.clone() }),
    ];
    for (name, cap) in
        [("cap-detid", Capability::DeterministicId), ("cap-query", Capability::Query), ("cap-none", Capability::None)]
    {
        b.push((name, Config { caps: [cap, Capability::None], ..small.clone() }));
    }
    for a in [
        Ablation::NoRowLock,
        Ablation::NoRecheck,
        Ablation::NoEpochCheck,
        Ablation::NoRevisionCas,
        Ablation::ReleaseZeroesEpoch,
        Ablation::RenewWithoutExpiry,
        Ablation::ClaimWithoutRunStatus,
        Ablation::ResultWithoutClaimCheck,
    ] {
        // Room for a completed run beside a planned operation, a stale revision and a reused owner
        // id: what each removed check is there to stop.
        let c = Config { ablations: vec![a], max_revision: 3, max_sessions: 1, kills: 1, ..small.clone() };
        let c = if a == Ablation::NoEpochCheck {
            Config { owner_reuse: true, restarts: 1, kills: 0, max_revision: 2, ..c }
        } else {
            c
        };
        b.push((ablation_name(a), c));
    }
    b.push((
        "ablation-resume-before-recovery",
        Config { ablations: vec![Ablation::ResumeBeforeRecovery], restores: 1, max_sessions: 1, ..small.clone() },
    ));
    b
}

fn ablation_name(a: fenceproof_model::config::Ablation) -> &'static str {
    use fenceproof_model::config::Ablation::*;
    match a {
        NoRowLock => "ablation-no-row-lock",
        NoRecheck => "ablation-no-recheck",
        NoEpochCheck => "ablation-no-epoch-check",
        NoRevisionCas => "ablation-no-revision-cas",
        ReleaseZeroesEpoch => "ablation-release-zeroes-epoch",
        RenewWithoutExpiry => "ablation-renew-without-expiry",
        ClaimWithoutRunStatus => "ablation-claim-without-run-status",
        ResultWithoutClaimCheck => "ablation-result-without-claim-check",
        ResumeBeforeRecovery => "ablation-resume-before-recovery",
    }
}

/// One bound's fingerprint: its reachable states; per action kind, the transitions that change
/// the state and the enabled actions that change nothing; per rule, the states that break it; per
/// situation, the states that reach it.
fn fingerprint(c: &Config) -> String {
    use fenceproof_model::properties::{INVARIANTS, SITUATIONS};
    use stateright::Model;
    use std::collections::{BTreeMap, HashSet, VecDeque};
    let m = ProtocolModel::new(c.clone());
    let mut seen: HashSet<State> = m.init_states().into_iter().collect();
    let mut queue: VecDeque<State> = seen.iter().cloned().collect();
    let (mut moves, mut idle, mut broken, mut reached) =
        (BTreeMap::new(), BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    let mut actions = Vec::new();
    while let Some(s) = queue.pop_front() {
        assert!(seen.len() < 120_000, "the bound {} is too large for a fingerprint", c.describe());
        for i in INVARIANTS.iter().filter(|i| !(i.holds)(&m, &s)) {
            *broken.entry(i.rule).or_insert(0usize) += 1;
        }
        for x in SITUATIONS.iter().filter(|x| (x.reached)(&m, &s)) {
            *reached.entry(x.name).or_insert(0usize) += 1;
        }
        actions.clear();
        m.actions(&s, &mut actions);
        for a in &actions {
            match m.next_state(&s, *a) {
                Some(n) => {
                    *moves.entry(a.kind()).or_insert(0usize) += 1;
                    if seen.insert(n.clone()) {
                        queue.push_back(n);
                    }
                }
                None => *idle.entry(a.kind()).or_insert(0usize) += 1,
            }
        }
    }
    let list = |m: &BTreeMap<&str, usize>| m.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ");
    format!(
        "states {}\n  moves {}\n  idle {}\n  broken {}\n  reached {}",
        seen.len(),
        list(&moves),
        list(&idle),
        list(&broken),
        list(&reached)
    )
}

/// The model's semantics, pinned: the fingerprint of every bound of [`fingerprint_bounds`] equals
/// the one recorded in tests/fingerprints.txt. A change of a guard, a step, a property or a fault
/// changes some count here, so a model change is a decision someone records (rewrite the file with
/// FENCEPROOF_BLESS=1 and review its diff), never a silent weakening.
#[test]
fn the_fingerprints_of_the_small_bounds_are_the_recorded_ones() {
    // The bounds walked two at a time, each a thread.
    let bounds = fingerprint_bounds();
    let prints: Vec<String> = std::thread::scope(|s| {
        let halves: Vec<_> = [0, 1]
            .map(|k| {
                let mine: Vec<_> = bounds.iter().skip(k).step_by(2).collect();
                s.spawn(move || mine.into_iter().map(|(name, c)| (*name, fingerprint(c))).collect::<Vec<_>>())
            })
            .into_iter()
            .collect();
        let mut all: Vec<(&str, String)> = halves.into_iter().flat_map(|h| h.join().unwrap()).collect();
        all.sort_by_key(|(name, _)| bounds.iter().position(|(n, _)| n == name));
        all.into_iter().map(|(name, f)| format!("{name}: {f}\n")).collect()
    });
    let got: String = prints.concat();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fingerprints.txt");
    if std::env::var_os("FENCEPROOF_BLESS").is_some() {
        std::fs::write(&path, &got).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    for (g, w) in got.lines().zip(want.lines()) {
        assert_eq!(g, w, "the model's fingerprint changed (FENCEPROOF_BLESS=1 records the new one; review its diff)");
    }
    assert_eq!(got, want);
}

/// The guards the small bounds never reach, each pinned on a state built for it (a mutant of such
/// a guard changes no fingerprint, so only these tests tell it from the original).
mod pinned_guards {
    use super::*;
    use fenceproof_model::state::EPOCHS;

    /// A state of [`cfg`] whose lease row has reached `epoch`, free, and every worker idle.
    fn at_epoch(c: &Config, epoch: u8) -> State {
        let mut s = ProtocolModel::new(c.clone()).initial();
        s.primary.lease.epoch = epoch as _;
        s
    }

    #[test]
    fn no_takeover_past_the_last_epoch_the_model_keeps() {
        let c = cfg();
        let last = (EPOCHS - 1) as u8;
        assert!(is_enabled(&c, &at_epoch(&c, last - 1), Action::Acquire(0)), "one more epoch fits");
        assert!(!is_enabled(&c, &at_epoch(&c, last), Action::Acquire(0)), "epoch {last} is the model's last");
    }

    #[test]
    fn a_second_restore_needs_a_backup() {
        // The one backup is taken by the first restore; a budget of two leaves one restore with no
        // backup to restore from, which must not be offered.
        let c = Config { restores: 2, ..cfg() };
        let s = walk(&c, &[Action::Restore]);
        assert_eq!((s.budget.restores, s.backup.is_some()), (1, false));
        assert!(!is_enabled(&c, &s, Action::Restore), "no backup, no restore");
    }

    #[test]
    fn a_killed_process_keeps_its_session_count() {
        // As recovery keeps it: the state of a crashed process says how many sessions it had.
        let c = Config { kills: 1, ..cfg() };
        let s = walk(&c, &[Action::Acquire(0), Action::Release(0), Action::Acquire(0), Action::Kill(0)]);
        assert_eq!(s.procs[0].sessions, 2);
    }
}
