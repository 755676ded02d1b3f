//! The protocol's weak spots as configurations the checker must break: each removes one thing the
//! protocol relies on, or runs it where the spec says its guarantee ends (asynchronous promotion,
//! a reused owner id, a restore without recovery, a tool that can only be queried), and names the
//! rule whose counterexample it must produce. `fenceproof model weak-spots` runs them; the tests
//! keep every one breaking its rule, and the default bound keeping every rule.

use crate::config::{Ablation, Capability, Config, Replication};

/// One weak spot: how to configure it and the rule it breaks.
pub struct WeakSpot {
    pub name: &'static str,
    /// What is removed or changed, in one line.
    pub what: &'static str,
    /// The rule (an invariant's name) whose counterexample the checker must find.
    pub breaks: &'static str,
    /// How the harness confirms it on real PostgreSQL, or why it does not yet.
    pub on_postgres: &'static str,
    pub config: fn() -> Config,
}

/// A small bound for a weak spot: one operation, no faults but the ones the spot needs.
fn small() -> Config {
    Config {
        ops: 1,
        kills: 0,
        jumps: 0,
        promotes: 0,
        restores: 0,
        aborts: 0,
        lost_acks: 0,
        restarts: 0,
        replication: Replication::Off,
        symmetry: false,
        ..Config::default_bound()
    }
}

fn ablated(a: Ablation) -> Config {
    Config { ablations: vec![a], ..small() }
}

/// Every weak spot the model documents (docs/model.md has a section for each).
pub const WEAK_SPOTS: &[WeakSpot] = &[
    WeakSpot {
        name: "no-row-lock",
        what: "the protected commit validates the lease without locking its row",
        breaks: "holder.only-current-epoch-writes",
        on_postgres: "named mutant `check-then-commit` (D, the schedules' `check-then-commit` case, shrunk and replayed by CI's schedules-check)",
        config: || ablated(Ablation::NoRowLock),
    },
    WeakSpot {
        name: "no-recheck",
        what: "a takeover that waited on the lease row applies the condition it read before waiting",
        breaks: "lease.acquire-free-or-expired",
        on_postgres: "not replayable: PostgreSQL always re-checks; the model shows why the spec relies on it",
        config: || ablated(Ablation::NoRecheck),
    },
    WeakSpot {
        name: "no-revision-cas",
        what: "the checkpoint UPDATE does not compare the revision; a reply is lost and the write retried",
        breaks: "commit.revision-cas",
        on_postgres: "named mutant `blind-overwrite` (C)",
        config: || Config { lost_acks: 1, ..ablated(Ablation::NoRevisionCas) },
    },
    WeakSpot {
        name: "release-zeroes-epoch",
        what: "the release sets the epoch back to 0",
        breaks: "lease.epoch-plus-one",
        on_postgres: "named mutant `release-zeroes-epoch`",
        config: || ablated(Ablation::ReleaseZeroesEpoch),
    },
    WeakSpot {
        name: "renew-without-expiry",
        what: "the renewal does not require the lease to be unexpired",
        breaks: "lease.renew-unexpired",
        on_postgres: "W-lease's probe `lease.renew-unexpired` and the generated SQL mutants of `fp_lease_renew`",
        config: || ablated(Ablation::RenewWithoutExpiry),
    },
    WeakSpot {
        name: "claim-without-run-status",
        what: "the claim does not join the run's status",
        breaks: "claim.prepared-of-live-runs",
        on_postgres: "the generated SQL mutants of `fp_claim` (F)",
        config: || ablated(Ablation::ClaimWithoutRunStatus),
    },
    WeakSpot {
        name: "result-without-claim-check",
        what: "the result write does not compare the claim's owner",
        breaks: "result.claim-owner-revision-digest",
        on_postgres: "named mutant `result-write-skips-claim-check`",
        config: || ablated(Ablation::ResultWithoutClaimCheck),
    },
    WeakSpot {
        name: "async-promotion",
        what: "the standby replicates asynchronously and is promoted",
        breaks: "failover.contract",
        on_postgres: "H-async with `examples/async-claims-no-loss.toml`, a false claim that FAILs on purpose",
        config: || Config { replication: Replication::Async, promotes: 1, ..small() },
    },
    WeakSpot {
        name: "async-promotion-reissues-epoch",
        what: "after an asynchronous promotion lost a takeover, the next takeover grants its epoch again",
        breaks: "lease.epoch-plus-one",
        on_postgres: "H-async shows the lost epoch; its second grant is not yet replayed as a case of its own",
        config: || Config { replication: Replication::Async, promotes: 1, ops: 0, ..small() },
    },
    WeakSpot {
        name: "owner-reuse-after-rollback",
        what: "a replacement keeps its predecessor's owner id, and a promotion rolled the epoch back",
        breaks: "holder.only-current-epoch-writes",
        on_postgres: "not yet replayed (needs a worker that reuses its owner id across a restart)",
        config: || Config {
            replication: Replication::Async,
            promotes: 1,
            restarts: 1,
            owner_reuse: true,
            ops: 0,
            ..small()
        },
    },
    WeakSpot {
        name: "restore-without-recovery",
        what: "workers and dispatch resume after a restore from an old backup without the recovery step",
        breaks: "effects.one-per-operation",
        on_postgres: "named mutant `restore-skips-recovery` (N-restore)",
        config: || Config {
            restores: 1,
            caps: [Capability::None, Capability::Idempotent],
            ..ablated(Ablation::ResumeBeforeRecovery)
        },
    },
    WeakSpot {
        name: "query-gap",
        what: "a query-only tool says 'not found' while a stale claim session's call is still on its way",
        breaks: "unknown.never-failure",
        on_postgres: "not yet replayed: no experiment delays a stale claim session's call past the reconciler's query",
        config: || Config { caps: [Capability::Query, Capability::None], ..small() },
    },
];
