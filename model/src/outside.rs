//! The catalogue's rules the model does not judge as invariants, each with the reason. A rule is
//! outside the model when it is about a worker's own conduct (its answers, its retries, its
//! heartbeat), about text or timing the model abstracts (ids, digests, milliseconds), about a
//! second run or a permission, or when the model applies the rule's statement as part of its
//! semantics (then the weak spot that removes it, if any, is named). Every catalogue rule is
//! either here or an invariant of [`crate::properties::INVARIANTS`]; a test holds the two lists to
//! the catalogue.

/// Why a rule is judged only outside the model.
pub struct Outside {
    pub rule: &'static str,
    pub reason: &'static str,
}

const WORKER: &str = "a worker's own conduct; the model's workers keep it, and the run's checks judge a real one";
const STATEMENT: &str =
    "the model applies this statement with its condition; the run's probes and the SQL mutants judge a real one";
const TEXT: &str = "about ids, digests or units, which the model abstracts";
const ONE_RUN: &str = "the model has one run; the run's checks judge a second";
const BOUNDARY: &str = "a permission, a secret or a metric, outside the protocol's state";

/// The rules outside the model, with why.
pub const OUTSIDE: &[Outside] = &[
    Outside { rule: "ids.retry-new-run", reason: ONE_RUN },
    Outside { rule: "ids.operation-id-per-intent", reason: "structural: an operation has one identity, which a takeover resumes; effects.one-per-operation judges the consequence" },
    Outside { rule: "ids.operation-id-names-no-executor", reason: TEXT },
    Outside { rule: "runs.created-with-lease", reason: "structural: the initial state is the creating transaction's result" },
    Outside { rule: "runs.one-live-run-per-task", reason: ONE_RUN },
    Outside { rule: "lease.renew-owner-epoch", reason: STATEMENT },
    Outside { rule: "lease.release-owner-epoch", reason: STATEMENT },
    Outside { rule: "lease.release-keeps-epoch", reason: "its consequence is lease.epoch-plus-one's (weak spot release-zeroes-epoch)" },
    Outside { rule: "lease.unconfirmed-renewal-cancels", reason: WORKER },
    Outside { rule: "commit.lease-owner-epoch-live", reason: "the validation's consequence is holder.only-current-epoch-writes's" },
    Outside { rule: "commit.valid-at-check", reason: "a permission, not a prohibition: the situation 'valid at check, expired before commit' is reached while every invariant holds" },
    Outside { rule: "commit.conflict-loser-rereads", reason: WORKER },
    Outside { rule: "commit.one-run-per-transaction", reason: ONE_RUN },
    Outside { rule: "runs.start", reason: STATEMENT },
    Outside { rule: "runs.transition-from-state", reason: STATEMENT },
    Outside { rule: "runs.no-terminal-without-lease", reason: "a terminal write is a protected commit: holder.only-current-epoch-writes judges it" },
    Outside { rule: "lease.ttl-milliseconds", reason: TEXT },
    Outside { rule: "lease.confirmed-loss-stops-work", reason: WORKER },
    Outside { rule: "serialization.retry-whole", reason: WORKER },
    Outside { rule: "serialization.retry-budget", reason: WORKER },
    Outside { rule: "serialization.not-lease-loss", reason: WORKER },
    Outside { rule: "runs.unknown-commit-outcome", reason: WORKER },
    Outside { rule: "runs.answers-agree", reason: WORKER },
    Outside { rule: "runs.unknown-read-back", reason: WORKER },
    Outside { rule: "runs.unknown-never-failure", reason: WORKER },
    Outside { rule: "clock.database-time", reason: "structural: the model has one clock, the database's" },
    Outside { rule: "clock.jumps-keep-state-safe", reason: "judged by every invariant under the database bound's clock jump" },
    Outside { rule: "lease.parameters", reason: "timing, which the model abstracts to ticks" },
    Outside { rule: "intent.same-transaction", reason: "structural: a plan commits its checkpoint and its intent together" },
    Outside { rule: "intent.canonical-digest", reason: TEXT },
    Outside { rule: "intent.same-intent-recognized", reason: TEXT },
    Outside { rule: "intent.mismatch-commits-nothing", reason: TEXT },
    Outside { rule: "crash.references-durable-first", reason: WORKER },
    Outside { rule: "crash.recovery-finishes", reason: "liveness: the model checks safety (always) and reachability (sometimes) only" },
    Outside { rule: "claim.skip-locked", reason: "throughput: the model claims one row per step" },
    Outside { rule: "claim.no-transaction-across-call", reason: "structural: a claim commits before its call, as separate steps" },
    Outside { rule: "ledger.revision-plus-one", reason: "the model keeps no ledger revision (the claim's owner decides what it would)" },
    Outside { rule: "ledger.never-back-to-prepared", reason: STATEMENT },
    Outside { rule: "result.settled-statuses-only", reason: STATEMENT },
    Outside { rule: "ledger.settled-final", reason: STATEMENT },
    Outside { rule: "unknown.own-claim-only", reason: STATEMENT },
    Outside { rule: "unknown.expired-claim-as-seen", reason: STATEMENT },
    Outside { rule: "converge.unknown-at-revision", reason: "the model keeps no ledger revision" },
    Outside { rule: "remote.conflict-ownership", reason: TEXT },
    Outside { rule: "cancel.prepared-to-cancelled", reason: STATEMENT },
    Outside { rule: "cancel.in-flight-kept", reason: STATEMENT },
    Outside { rule: "failover.fence-before-promote", reason: "structural: a promotion ends the old primary's transactions" },
    Outside { rule: "roles.fenced-functions-only", reason: BOUNDARY },
    Outside { rule: "secrets.masked", reason: BOUNDARY },
    Outside { rule: "metrics.outcomes", reason: BOUNDARY },
    Outside { rule: "rollout.revoke-direct-writes", reason: BOUNDARY },
    Outside { rule: "prefilter.not-a-boundary", reason: "Redis is not modelled" },
    Outside { rule: "restore.recover-before-dispatch", reason: "modelled as the recovery step: without it (weak spot restore-without-recovery) effects.one-per-operation breaks" },
    Outside { rule: "liveness.legal-step", reason: WORKER },
];
