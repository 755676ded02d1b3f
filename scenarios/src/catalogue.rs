//! The rule catalogue: the normative rules of spec §01–§13, one constant each, with the checks that
//! judge it from evidence (the oracle, the final rows, the tools' ledger, the harness's timeline;
//! never a worker's own word). A rule names its checks by their constant names, so a broken link
//! is a compile error; which experiments exercise a rule is what the experiments declare
//! ([`crate::experiment::Experiment::rules`] and [`crate::experiment::Checks`]), read by
//! [`exercised_by`]. `fenceproof rules` prints it; each check of a run carries the rules it judges.
//!
//! A `*` in a checker matches any text: names built at run time (the P-api and W probes are named
//! `[rule-id] what was probed`, so `[rule-id]*` names all of them).

use fenceproof_harness::check::rule::{judged_by, Rule};

use crate::experiment::Experiment;
use fenceproof_harness::check::claims::NO_TRANSACTION_ACROSS_CALL;
use fenceproof_harness::check::history::ANSWERS_AGREE;
use fenceproof_harness::check::history::NAMED_REVISION;
use fenceproof_harness::check::history::QUIET;
use fenceproof_harness::check::history::STORED_AS_SENT;
use fenceproof_harness::check::history::TERMINAL_TOLD;
use fenceproof_harness::check::invariants::EPOCHS;
use fenceproof_harness::check::invariants::HOLDER;
use fenceproof_harness::check::invariants::LEDGER_BACK;
use fenceproof_harness::check::invariants::REVISIONS;
use fenceproof_harness::check::invariants::TAKEOVERS;
use fenceproof_harness::check::invariants::TERMINAL_FINAL;
use fenceproof_harness::check::invariants::TERMINAL_HOLDER;
use fenceproof_harness::check::remote::EFFECTS_REGISTERED;
use fenceproof_harness::check::remote::SETTLED_AGREE;
use fenceproof_harness::check::transitions::LEDGER_MACHINE;
use fenceproof_harness::check::transitions::RUN_MACHINE;

// §01 / §02: the invariants and identities.
pub const HOLDER_ONLY_CURRENT_EPOCH_WRITES: Rule = Rule {
    id: "holder.only-current-epoch-writes",
    section: "01",
    statement: "only the current run's current epoch (its lease holder) commits workflow state",
    checkers: &[
        HOLDER,
        crate::b_old_owner_resumes::NOTHING_COMMITS_WHILE_STALE,
        fenceproof_harness::check::invariants::STALE_COMMITS_NOTHING_AFTER,
        crate::tags::ANY_COMMIT_LEASE_OWNER_EPOCH_LIVE,
        crate::tags::ANY_LEASE_PARTITION_STALE_REJECTED,
    ],
};
pub const IDS_RETRY_NEW_RUN: Rule = Rule {
    id: "ids.retry-new-run",
    section: "02",
    statement: "a retry is a new run with a new run_id; an old run's late result cannot advance the new run",
    checkers: &[
        crate::g_retry_isolation::RETRY_IS_NEW_RUN,
        crate::g_retry_isolation::OLD_RESULT_REFUSED,
        crate::g_retry_isolation::NOTHING_COMMITTED_ON_NEW_RUN,
    ],
};
pub const IDS_OPERATION_ID_PER_INTENT: Rule = Rule {
    id: "ids.operation-id-per-intent",
    section: "02, 08",
    statement:
        "one business intent keeps one operation_id across takeover and retry; a new run's intent gets a new one",
    checkers: &[
        crate::g_retry_isolation::NEW_OPERATION_ID,
        crate::e_remote_success_then_crash::ONE_RESOURCE_FOR_INTENT,
        EFFECTS_REGISTERED,
        crate::e_unverified_answers::REPLAN_KEEPS_OPERATION_ID,
        crate::e_unverified_answers::MODIFIED_EFFECT_NEW_ID,
        crate::e_unverified_answers::EXECUTED_ONCE,
    ],
};
pub const IDS_OPERATION_ID_NAMES_NO_EXECUTOR: Rule = Rule {
    id: "ids.operation-id-names-no-executor",
    section: "02, 08",
    statement: "an operation_id never carries a worker id, an epoch, a retry count or a timestamp; its format is otherwise the team's",
    checkers: &[
        fenceproof_harness::check::operation_ids::OPERATION_ID_NAMES_NO_EXECUTOR,
        crate::e_unverified_answers::REPLAN_KEEPS_OPERATION_ID,
        EFFECTS_REGISTERED,
    ],
};
// §04: the data model.
pub const RUNS_CREATED_WITH_LEASE: Rule = Rule {
    id: "runs.created-with-lease",
    section: "04",
    statement: "task, run and lease are created in one short transaction; a run starts pending at revision 0",
    checkers: &[RUN_MACHINE],
};
pub const RUNS_ONE_LIVE_RUN_PER_TASK: Rule = Rule {
    id: "runs.one-live-run-per-task",
    section: "04, 07",
    statement: "a task has one active run: a retry is created only once the active run is finished, in the transaction that switches active_run_id",
    checkers: &[crate::tags::ANY_RUNS_ONE_LIVE_RUN_PER_TASK],
};
// §05: the lease.
pub const LEASE_ACQUIRE_FREE_OR_EXPIRED: Rule = Rule {
    id: "lease.acquire-free-or-expired",
    section: "05.1",
    statement: "a takeover only of a free lease or one expired on the database clock when it is checked, for the caller, of that run only",
    checkers: &[TAKEOVERS, crate::trace_check::TRACE, crate::b_old_owner_resumes::EARLY_TAKEOVER_REFUSED, crate::b_old_owner_resumes::STALE_ACQUIRE_BUSY, crate::tags::ANY_LEASE_ACQUIRE_FREE_OR_EXPIRED],
};
pub const LEASE_EPOCH_PLUS_ONE: Rule = Rule {
    id: "lease.epoch-plus-one",
    section: "05.1",
    statement: "a takeover raises the epoch by exactly one; epochs never go back",
    checkers: &[EPOCHS, crate::b_old_owner_resumes::TAKEOVER_EPOCH, crate::d_race_after_validation::TAKEOVER_EPOCH],
};
pub const LEASE_TAKEOVER_WAITS_FOR_VALIDATED_COMMIT: Rule = Rule {
    id: "lease.takeover-waits-for-validated-commit",
    section: "05.1, 06",
    statement: "a takeover waits for a protected transaction that locked and validated the lease, and commits after it",
    checkers: &[
        crate::d_race_after_validation::TAKEOVER_WAITS,
        crate::d_race_after_validation::SERIAL_ORDER,
        crate::d_race_after_validation::ONE_STATEMENT,
    ],
};
pub const LEASE_RENEW_OWNER_EPOCH: Rule = Rule {
    id: "lease.renew-owner-epoch",
    section: "05.2",
    statement: "a renewal extends only the named lease, and only under its owner and epoch",
    checkers: &[
        crate::tags::ANY_LEASE_RENEW_OWNER_EPOCH,
        crate::trace_check::TRACE,
        crate::b_old_owner_resumes::STALE_LEAVES_LEASE,
        crate::p_role_boundary::RENEW_REFUSES_STALE_EPOCH,
        QUIET,
    ],
};
pub const LEASE_RENEW_UNEXPIRED: Rule = Rule {
    id: "lease.renew-unexpired",
    section: "05.2",
    statement: "a renewal only extends a lease that has not expired, judged on the database clock at the moment of the check; a lost lease cannot be resurrected",
    checkers: &[crate::tags::ANY_LEASE_RENEW_UNEXPIRED],
};
pub const LEASE_RELEASE_OWNER_EPOCH: Rule = Rule {
    id: "lease.release-owner-epoch",
    section: "05.2",
    statement: "release works only under owner + epoch, on the named lease only",
    checkers: &[crate::tags::ANY_LEASE_RELEASE_OWNER_EPOCH, crate::trace_check::TRACE],
};
pub const LEASE_RELEASE_KEEPS_EPOCH: Rule = Rule {
    id: "lease.release-keeps-epoch",
    section: "05.2",
    statement: "release keeps the epoch (never zeroed)",
    checkers: &[crate::tags::ANY_LEASE_RELEASE_KEEPS_EPOCH, crate::b_old_owner_resumes::RELEASE_KEEPS_EPOCH, EPOCHS],
};
pub const LEASE_UNCONFIRMED_RENEWAL_CANCELS: Rule = Rule {
    id: "lease.unconfirmed-renewal-cancels",
    section: "05.2, 07",
    statement: "an unanswered or lost renewal cancels the execution; nothing new commits after it and the lease is left to expire",
    checkers: &[crate::b_database_freeze::AT_MOST_IN_FLIGHT_AFTER_THAW, crate::b_database_freeze::A_LEFT_LEASE_TO_EXPIRE, crate::b_old_owner_resumes::HEARTBEAT_CANCELS, crate::b_database_freeze::A_STOPPED_UNFINISHED, crate::tags::ANY_LEASE_RENEW_UNKNOWN_CANCELS],
};
// §06: the protected commit.
pub const COMMIT_LEASE_OWNER_EPOCH_LIVE: Rule = Rule {
    id: "commit.lease-owner-epoch-live",
    section: "06",
    statement: "a protected write locks the lease row and validates owner, epoch and expiry (database clock, at the check) in the writing transaction",
    checkers: &[crate::tags::ANY_COMMIT_LEASE_OWNER_EPOCH_LIVE, HOLDER, crate::b_old_owner_resumes::STALE_LEAVES_RUN, crate::d_race_after_validation::A_FENCED, crate::p_role_boundary::TRANSITION_REFUSES_FORGED_OWNER, crate::p_role_boundary::TRANSITION_REFUSES_STALE_EPOCH],
};
pub const COMMIT_VALID_AT_CHECK: Rule = Rule {
    id: "commit.valid-at-check",
    section: "06",
    statement:
        "a write validated under the row lock may commit after the lease expired; the takeover is ordered after it",
    checkers: &[
        crate::d_race_after_validation::VALIDATED_SAVE_COMMITS,
        crate::d_race_after_validation::SERIAL_ORDER,
        crate::d_race_after_validation::ONE_STATEMENT,
    ],
};
pub const COMMIT_REVISION_CAS: Rule = Rule {
    id: "commit.revision-cas",
    section: "06",
    statement: "state writes compare-and-set the revision: of two writes at one expected revision at most one commits, each commit is + 1 on the previous, on that run only",
    checkers: &[REVISIONS, crate::c_same_epoch_reorder::EXACTLY_ONE_SAVE, crate::c_same_epoch_reorder::REVISION_PLUS_ONE, crate::tags::ANY_COMMIT_REVISION_CAS, NAMED_REVISION, STORED_AS_SENT],
};
pub const COMMIT_CONFLICT_LOSER_REREADS: Rule = Rule {
    id: "commit.conflict-loser-rereads",
    section: "06",
    statement: "the loser of a revision conflict re-reads before deciding; it never blindly overwrites",
    checkers: &[
        crate::c_same_epoch_reorder::TOLD_OK_AND_CONFLICT,
        crate::c_same_epoch_reorder::FINAL_IS_WINNERS,
        crate::c_same_epoch_reorder::LATE_SAVE_REFUSED,
        REVISIONS,
        NAMED_REVISION,
    ],
};
pub const COMMIT_ONE_RUN_PER_TRANSACTION: Rule = Rule {
    id: "commit.one-run-per-transaction",
    section: "06",
    statement: "a protected transaction changes one run only",
    checkers: &[RUN_MACHINE],
};
// §07: the state machine and error handling.
pub const RUNS_START: Rule = Rule {
    id: "runs.start",
    section: "07",
    statement: "a run starts from pending under the current lease and a revision CAS",
    checkers: &[crate::tags::ANY_RUNS_START, RUN_MACHINE],
};
pub const RUNS_TRANSITION_FROM_STATE: Rule = Rule {
    id: "runs.transition-from-state",
    section: "07",
    statement:
        "workers move runs pending -> running -> running ... -> succeeded | failed; only the control plane cancels",
    checkers: &[crate::tags::ANY_RUNS_TRANSITION_FROM_STATE, RUN_MACHINE],
};
pub const RUNS_TERMINAL_FINAL: Rule = Rule {
    id: "runs.terminal-final",
    section: "07",
    statement: "terminal states never return to running; a retry creates a new run",
    checkers: &[
        TERMINAL_FINAL,
        crate::tags::ANY_RUNS_TERMINAL_FINAL,
        crate::g_retry_isolation::OLD_RUN_STAYS_CANCELLED,
    ],
};
pub const RUNS_NO_TERMINAL_WITHOUT_LEASE: Rule = Rule {
    id: "runs.no-terminal-without-lease",
    section: "07",
    statement: "a worker that lost its lease writes no terminal state (neither failed nor succeeded)",
    checkers: &[TERMINAL_HOLDER, crate::b_old_owner_resumes::ONLY_TERMINAL_IS_HOLDERS, TERMINAL_TOLD],
};
pub const LEASE_TTL_MILLISECONDS: Rule = Rule {
    id: "lease.ttl-milliseconds",
    section: "05.1",
    statement: "the TTL reaches the database as integer milliseconds: a term's expiry is its update time plus exactly the asked TTL, at acquire and at renewal",
    checkers: &[crate::tags::ANY_LEASE_TTL_MILLISECONDS],
};
pub const LEASE_CONFIRMED_LOSS_STOPS_WORK: Rule = Rule {
    id: "lease.confirmed-loss-stops-work",
    section: "05.2, 07",
    statement: "a renewal matching zero rows is a confirmed loss: the execution is cancelled and no new write or side effect is started",
    checkers: &[fenceproof_harness::check::after_loss::NO_WRITE_AFTER_LOSS, crate::b_loss_while_running::A_STOPS],
};
pub const SERIALIZATION_RETRY_WHOLE: Rule = Rule {
    id: "serialization.retry-whole",
    section: "04, 07",
    statement:
        "a transaction answered 40001 did not commit: it is retried from its start, as a whole, and commits once",
    checkers: &[fenceproof_harness::check::serialization::RETRIED_WHOLE],
};
pub const SERIALIZATION_RETRY_BUDGET: Rule = Rule {
    id: "serialization.retry-budget",
    section: "07",
    statement: "retries after 40001 stop at a budget; the write is then refused, with nothing committed",
    checkers: &[fenceproof_harness::check::serialization::WITHIN_BUDGET],
};
pub const SERIALIZATION_NOT_LEASE_LOSS: Rule = Rule {
    id: "serialization.not-lease-loss",
    section: "07",
    statement: "a 40001 says the transaction did not commit, nothing about the lease: the worker keeps its lease and its execution",
    checkers: &[fenceproof_harness::check::serialization::NOT_LEASE_LOSS],
};
pub const RUNS_UNKNOWN_COMMIT_OUTCOME: Rule = Rule {
    id: "runs.unknown-commit-outcome",
    section: "06, 07, 10",
    statement: "a commit whose outcome is unknown (a cancelled synchronous wait, a lost connection) is reported as unknown, never as success",
    checkers: &[crate::h_failover::CANCELLED_WAIT_UNKNOWN, crate::h_failover::LOCAL_ONLY, ANSWERS_AGREE, crate::tags::ANY_COMMIT_UNKNOWN_ANSWERED_UNKNOWN],
};
pub const RUNS_ANSWERS_AGREE: Rule = Rule {
    id: "runs.answers-agree",
    section: "06, 07, 09.3",
    statement: "a worker reports each protected write as it committed: ok only for a commit, a refusal or error only for a write that did not commit, unknown when it cannot tell",
    checkers: &[
        fenceproof_harness::check::answers::WRITES_AGREE,
        fenceproof_harness::check::answers::LEASE_ANSWERS_AGREE,
        fenceproof_harness::check::answers::DISPATCH_ANSWERS_AGREE,
    ],
};
pub const RUNS_UNKNOWN_READ_BACK: Rule = Rule {
    id: "runs.unknown-read-back",
    section: "06, 07",
    statement: "after an unknown outcome the worker starts no next step before reading owner, epoch and revision back from the primary, and continues from what really committed: no checkpoint twice, none lost, no revision skipped",
    checkers: &[crate::tags::ANY_COMMIT_UNKNOWN_READ_BACK],
};
pub const RUNS_UNKNOWN_NEVER_FAILURE: Rule = Rule {
    id: "runs.unknown-never-failure",
    section: "01, 07",
    statement: "an unknown outcome is never turned into a failure write, nor followed by a second terminal write",
    checkers: &[crate::tags::ANY_COMMIT_UNKNOWN_NOT_FAILURE, TERMINAL_TOLD],
};
pub const CLOCK_DATABASE_TIME: Rule = Rule {
    id: "clock.database-time",
    section: "05, 10",
    statement: "expiry is judged on the database server's clock: at expires_at = clock a lease has expired (taken over, never renewed or written under), at dispatch_until = clock a claim has",
    checkers: &[crate::tags::AT_COMMIT_LEASE_OWNER_EPOCH_LIVE, crate::tags::AT_UNKNOWN_EXPIRED_CLAIM_AS_SEEN, crate::p_api::clock::CLOCK_STAYED_FROZEN, crate::tags::AT_LEASE_RENEW_UNEXPIRED, crate::tags::AT_LEASE_ACQUIRE_FREE_OR_EXPIRED],
};
pub const CLOCK_JUMPS_KEEP_STATE_SAFE: Rule = Rule {
    id: "clock.jumps-keep-state-safe",
    section: "10",
    statement: "the database clock's own jumps move takeovers (a forward jump: early; a backward jump: late) but protected transactions keep state safe: no stale write commits, no second owner",
    checkers: &[crate::tags::ANY_CLOCK_JUMPS_KEEP_STATE_SAFE],
};
pub const LEASE_PARAMETERS: Rule = Rule {
    id: "lease.parameters",
    section: "07",
    statement: "lease parameters follow from measured latency and jitter: timeout >= 2 x p99 renewal, heartbeat + jitter + timeout < TTL",
    checkers: &[crate::h_lease_params::TIMEOUT_ABOVE_P99, crate::h_lease_params::LATE_RENEWAL_IN_TIME],
};
// §08 / §09: side effects and the outbox.
pub const INTENT_SAME_TRANSACTION: Rule = Rule {
    id: "intent.same-transaction",
    section: "08, 09.1",
    statement: "an intent is registered prepared in the same protected transaction as its step-planned checkpoint",
    checkers: &[
        LEDGER_MACHINE,
        crate::tags::ANY_INTENT_SAME_TRANSACTION,
        fenceproof_harness::check::intents::PLANNED_WITH_CHECKPOINT,
    ],
};
pub const INTENT_CANONICAL_DIGEST: Rule = Rule {
    id: "intent.canonical-digest",
    section: "08",
    statement: "the request digest is computed over explicit canonical JSON (RFC 8785), not over arbitrary JSON text",
    checkers: &[
        fenceproof_harness::check::intents::DIGESTS_CANONICAL,
        fenceproof_harness::check::intents::DIGEST_POINT,
    ],
};
pub const INTENT_SAME_INTENT_RECOGNIZED: Rule = Rule {
    id: "intent.same-intent-recognized",
    section: "08",
    statement: "an intent registered again with the same run, tool and digest is the same intent",
    checkers: &[crate::tags::ANY_INTENT_SAME_INTENT_RECOGNIZED],
};
pub const INTENT_MISMATCH_COMMITS_NOTHING: Rule = Rule {
    id: "intent.mismatch-commits-nothing",
    section: "08",
    statement: "an operation_id registered with another run, tool or digest (or a step planned under another id) is refused, and nothing of that transaction commits",
    checkers: &[crate::tags::ANY_INTENT_MISMATCH_COMMITS_NOTHING, crate::p_role_boundary::REPLAN_REFUSED],
};
pub const CRASH_REFERENCES_DURABLE_FIRST: Rule = Rule {
    id: "crash.references-durable-first",
    section: "08, 09.1, 12",
    statement: "what a committed intent needs to be sent (the secret values it references) is durable before the intent commits: a crash right after that commit leaves an intent recovery can send",
    checkers: &[fenceproof_harness::check::crash_points::REFERENCES_DURABLE],
};
pub const CRASH_RECOVERY_FINISHES: Rule = Rule {
    id: "crash.recovery-finishes",
    section: "08, 09",
    statement: "a crash between two durable steps of one command leaves a state recovery finishes from what is durable: the operation reaches its result, the run advances on it, the tool runs at most once",
    checkers: &[
        fenceproof_harness::check::crash_points::RECOVERY_FINISHES,
        fenceproof_harness::check::crash_points::AT_MOST_ONCE,
        crate::e_crash_between_commits::SWEPT,
    ],
};
pub const CLAIM_PREPARED_OF_LIVE_RUNS: Rule = Rule {
    id: "claim.prepared-of-live-runs",
    section: "09.2",
    statement: "a claim takes only prepared operations of pending or running runs, with an owner and a finite deadline",
    checkers: &[
        crate::tags::ANY_CLAIM_PREPARED_OF_LIVE_RUNS,
        LEDGER_MACHINE,
        crate::f_cancel_race::NOTHING_TO_CLAIM,
        crate::f_cancel_race::NEVER_CLAIMED,
    ],
};
pub const CLAIM_SKIP_LOCKED: Rule = Rule {
    id: "claim.skip-locked",
    section: "09.2",
    statement: "concurrent claims skip rows another claim holds instead of waiting or double-claiming",
    checkers: &[crate::tags::ANY_CLAIM_SKIP_LOCKED],
};
pub const CLAIM_NO_TRANSACTION_ACROSS_CALL: Rule = Rule {
    id: "claim.no-transaction-across-call",
    section: "06, 09.2",
    statement: "no transaction (a claim or a protected one) stays open while a tool is called or a step's work runs: the claim commits before the call",
    checkers: &[NO_TRANSACTION_ACROSS_CALL, crate::b_loss_while_running::NO_TRANSACTION_DURING_WORK],
};
pub const LEDGER_REVISION_PLUS_ONE: Rule = Rule {
    id: "ledger.revision-plus-one",
    section: "09",
    statement: "every ledger change raises the ledger revision by one and leaves the intent's identity, digest and request alone",
    checkers: &[LEDGER_MACHINE, crate::tags::ANY_LEDGER_REVISION_PLUS_ONE],
};
pub const LEDGER_NEVER_BACK_TO_PREPARED: Rule = Rule {
    id: "ledger.never-back-to-prepared",
    section: "09.2",
    statement: "a claimed operation never goes back to prepared; an expired claim moves to unknown first",
    checkers: &[
        LEDGER_BACK,
        crate::e_remote_success_then_crash::EXPIRED_CLAIM_TO_UNKNOWN,
        crate::e_remote_success_then_crash::NOTHING_LEFT_PREPARED,
    ],
};
pub const RESULT_CLAIM_OWNER_REVISION_DIGEST: Rule = Rule {
    id: "result.claim-owner-revision-digest",
    section: "09.3",
    statement:
        "a result is written only under the claim's owner, ledger revision and request digest, to that operation only",
    checkers: &[
        crate::tags::ANY_RESULT_CLAIM_OWNER_REVISION_DIGEST,
        LEDGER_MACHINE,
        crate::e_remote_success_then_crash::STALE_RESULT_REJECTED,
    ],
};
pub const RESULT_SETTLED_STATUSES_ONLY: Rule = Rule {
    id: "result.settled-statuses-only",
    section: "09.3",
    statement: "a result or a convergence settles to succeeded or failed_final only",
    checkers: &[crate::tags::ANY_RESULT_SETTLED_STATUSES_ONLY, LEDGER_MACHINE],
};
pub const LEDGER_SETTLED_FINAL: Rule = Rule {
    id: "ledger.settled-final",
    section: "09.3",
    statement: "a settled operation never changes again (a late result is evidence only)",
    checkers: &[
        LEDGER_BACK,
        crate::tags::ANY_LEDGER_SETTLED_FINAL,
        crate::e_remote_success_then_crash::CONVERGED_UNCHANGED,
    ],
};
pub const UNKNOWN_OWN_CLAIM_ONLY: Rule = Rule {
    id: "unknown.own-claim-only",
    section: "09.2",
    statement: "a dispatcher marks unknown only a claim still its own (dispatching under its session, at the revision it claimed), expired or not",
    checkers: &[crate::tags::ANY_UNKNOWN_OWN_CLAIM_ONLY, LEDGER_MACHINE],
};
pub const UNKNOWN_EXPIRED_CLAIM_AS_SEEN: Rule = Rule {
    id: "unknown.expired-claim-as-seen",
    section: "09.2",
    statement: "a reconciler moves a claim to unknown only once it expired (database clock, at the check), only as it was seen (owner + revision), only while dispatching",
    checkers: &[crate::tags::ANY_UNKNOWN_EXPIRED_CLAIM_AS_SEEN, LEDGER_MACHINE, crate::e_remote_success_then_crash::EXPIRED_CLAIM_TO_UNKNOWN],
};
pub const CONVERGE_UNKNOWN_AT_REVISION: Rule = Rule {
    id: "converge.unknown-at-revision",
    section: "09.3",
    statement: "convergence moves only unknown rows, at the revision read, to the remote fact",
    checkers: &[
        crate::tags::ANY_CONVERGE_UNKNOWN_AT_REVISION,
        crate::e_remote_success_then_crash::CONVERGES_TO_REMOTE,
        crate::e_unverified_answers::ANY_RECONCILE_CONVERGES,
    ],
};
pub const EFFECTS_ONE_PER_OPERATION: Rule = Rule {
    id: "effects.one-per-operation",
    section: "08, 09",
    statement:
        "one operation_id yields at most one real side effect through a tool that deduplicates or can be queried",
    checkers: &[
        fenceproof_harness::check::invariants::ONE_EFFECT_PER_OPERATION,
        crate::e_remote_success_then_crash::ONE_RESOURCE_FOR_OPERATION,
        crate::f_cancel_race::EXECUTED_ONCE,
        EFFECTS_REGISTERED,
    ],
};
pub const UNKNOWN_NEVER_FAILURE: Rule = Rule {
    id: "unknown.never-failure",
    section: "01, 09.3",
    statement: "an unknown remote outcome stays unknown and is raised; it is never recorded as failed or unexecuted",
    checkers: &[
        crate::e_remote_success_then_crash::PLAIN_LEAVES_UNKNOWN,
        crate::e_remote_success_then_crash::RAISED_EVERY_PASS,
        crate::f_cancel_race::NEVER_UNEXECUTED,
        SETTLED_AGREE,
        crate::e_unverified_answers::ANY_UNVERIFIED_LEAVES_UNKNOWN,
        crate::e_unverified_answers::ANY_CALL_REACHED_TOOL,
        crate::e_unverified_answers::ANY_STILL_UNKNOWN_AFTER_RECONCILE,
        crate::e_unverified_answers::FIVE_OH_THREE_LEAVES_UNKNOWN,
    ],
};
pub const REMOTE_CONFLICT_OWNERSHIP: Rule = Rule {
    id: "remote.conflict-ownership",
    section: "09",
    statement: "a deterministic-id conflict is the operation's own creation only when the resource carries its operation_id; a name taken by another intent is never its success",
    checkers: &[crate::e_unverified_answers::OWN_409_IS_OWN_CREATION, crate::e_unverified_answers::STILL_ONE_RESOURCE, crate::e_unverified_answers::FOREIGN_409_NOT_SUCCESS, crate::e_unverified_answers::NEVER_CONVERGES_TO_FOREIGN],
};
pub const CANCEL_PREPARED_TO_CANCELLED: Rule = Rule {
    id: "cancel.prepared-to-cancelled",
    section: "09.3",
    statement:
        "cancel moves the run's prepared operations to cancelled in the same transaction; they are never dispatched",
    checkers: &[
        crate::tags::ANY_CANCEL_PREPARED_TO_CANCELLED,
        crate::f_cancel_race::PREPARED_BECOMES_CANCELLED,
        crate::f_cancel_race::NEVER_EXECUTED,
        fenceproof_harness::check::cancel::PREPARED_CANCELLED_WITH_RUN,
    ],
};
pub const CANCEL_IN_FLIGHT_KEPT: Rule = Rule {
    id: "cancel.in-flight-kept",
    section: "09.3",
    statement: "cancel keeps dispatching and unknown operations as they are (not claimed unexecuted)",
    checkers: &[
        crate::f_cancel_race::IN_FLIGHT_KEPT,
        crate::f_cancel_race::IN_FLIGHT_RECORDED,
        crate::f_cancel_race::STILL_RAISED,
    ],
};
// §10: failover.
pub const FAILOVER_CONTRACT: Rule = Rule {
    id: "failover.contract",
    section: "10",
    statement: "the failover outcome matches the deployment contract: sync loses nothing acknowledged; async loss is reported with epochs, ledger and remote high-water",
    checkers: &[
        crate::h_failover::CONTRACT_NO_LOSS,
        crate::h_failover::CONTRACT_LOSS_REPORTED,
        crate::h_failover::HIGH_WATER_KEPT,
        crate::h_failover::NOTHING_LOST_WITHOUT_LAG,
        crate::h_failover::switchover::SWITCHED,
        crate::h_failover::switchover::NOTHING_LOST,
    ],
};
pub const FAILOVER_FENCE_BEFORE_PROMOTE: Rule = Rule {
    id: "failover.fence-before-promote",
    section: "10",
    statement: "the old primary is fenced before the standby is promoted; a worker on it cannot commit",
    checkers: &[
        crate::h_failover::NO_PROCESS_LEFT,
        crate::h_failover::STALE_CANNOT_COMMIT,
        crate::h_failover::partition::NO_SPLIT_BRAIN,
    ],
};
// §12: roles and secrets.
pub const ROLES_FENCED_FUNCTIONS_ONLY: Rule = Rule {
    id: "roles.fenced-functions-only",
    section: "12",
    statement: "the worker role cannot write the protocol's tables except through the fenced functions",
    checkers: &[
        crate::p_role_boundary::ANY_DENIED,
        crate::p_role_boundary::STATE_UNCHANGED,
        crate::p_role_boundary::DIRECT_PATH_REFUSED,
        crate::p_role_boundary::AUDIT_FINDS_NOTHING,
    ],
};
pub const SECRETS_MASKED: Rule = Rule {
    id: "secrets.masked",
    section: "12",
    statement:
        "ledger request bodies hold a reference to a secret, never its value, wherever in the body the secret is",
    checkers: &[
        crate::p_secret_masking::NO_ROW_CONTAINS_VALUE,
        crate::p_secret_masking::STORE_PRIVATE,
        crate::p_secret_masking::LEDGER_HOLDS_REFERENCE,
        crate::p_secret_masking::GENERATED_MASKED,
        crate::p_secret_masking::NO_FILE_CONTAINS_VALUE,
    ],
};
pub const METRICS_OUTCOMES: Rule = Rule {
    id: "metrics.outcomes",
    section: "12",
    statement: "lease and write outcomes are counted by reason (lost renewals, rejected writes, unknown operations)",
    checkers: &[
        crate::b_old_owner_resumes::METRICS_COUNT_REJECTIONS,
        crate::e_remote_success_then_crash::METRICS_COUNT_UNKNOWN,
    ],
};
pub const ROLLOUT_REVOKE_DIRECT_WRITES: Rule = Rule {
    id: "rollout.revoke-direct-writes",
    section: "13",
    statement: "while old workers still write the tables directly they bypass fencing; once their table-write privileges are revoked they are refused and every rule holds",
    checkers: &[
        crate::l_rollout::BYPASS_COMMITS,
        crate::l_rollout::LEGACY_LISTED,
        crate::l_rollout::NO_DIRECT_WRITER_LEFT,
        crate::l_rollout::LEGACY_REFUSED,
    ],
};
pub const PREFILTER_NOT_A_BOUNDARY: Rule = Rule {
    id: "prefilter.not-a-boundary",
    section: "03",
    statement: "a Redis lock (SET NX PX, compare-token renew and release) is a contention pre-filter only; when it is lost or wrongly granted, PostgreSQL's protected-write rules still reject the stale holder",
    checkers: &[
        crate::m_redis_prefilter::NOTHING_OF_A_COMMITS,
        crate::m_redis_prefilter::ROWS_UNCHANGED_BY_RESUMED,
        crate::m_redis_prefilter::COMPARE_TOKEN_REFUSES_A,
    ],
};
pub const RESTORE_RECOVER_BEFORE_DISPATCH: Rule = Rule {
    id: "restore.recover-before-dispatch",
    section: "10",
    statement: "after a restore from an old backup, stale workers are fenced (every later epoch above any handed out before), the ledger is settled from the remote history and forks are registered unknown or reported, before dispatch resumes",
    checkers: &[
        fenceproof_harness::check::restore::HELD,
        fenceproof_harness::check::restore::EPOCHS_ABOVE,
        fenceproof_harness::check::restore::STALE_SILENT,
        fenceproof_harness::check::restore::REMOTE_RECONCILED,
        fenceproof_harness::check::invariants::ONE_EFFECT_PER_OPERATION,
    ],
};
// Liveness: the protocol must allow what it allows.
pub const LIVENESS_LEGAL_STEP: Rule = Rule {
    id: "liveness.legal-step",
    section: "05-09",
    statement:
        "a step the protocol allows (acquire a free lease, save at the current revision, plan, dispatch) succeeds",
    checkers: &[crate::ctx::LEGAL_STEP_CHECK],
};

/// Every rule, in the spec's order.
pub const RULES: &[&Rule] = &[
    &HOLDER_ONLY_CURRENT_EPOCH_WRITES,
    &IDS_RETRY_NEW_RUN,
    &IDS_OPERATION_ID_PER_INTENT,
    &IDS_OPERATION_ID_NAMES_NO_EXECUTOR,
    &RUNS_CREATED_WITH_LEASE,
    &RUNS_ONE_LIVE_RUN_PER_TASK,
    &LEASE_ACQUIRE_FREE_OR_EXPIRED,
    &LEASE_EPOCH_PLUS_ONE,
    &LEASE_TAKEOVER_WAITS_FOR_VALIDATED_COMMIT,
    &LEASE_RENEW_OWNER_EPOCH,
    &LEASE_RENEW_UNEXPIRED,
    &LEASE_RELEASE_OWNER_EPOCH,
    &LEASE_RELEASE_KEEPS_EPOCH,
    &LEASE_UNCONFIRMED_RENEWAL_CANCELS,
    &COMMIT_LEASE_OWNER_EPOCH_LIVE,
    &COMMIT_VALID_AT_CHECK,
    &COMMIT_REVISION_CAS,
    &COMMIT_CONFLICT_LOSER_REREADS,
    &COMMIT_ONE_RUN_PER_TRANSACTION,
    &RUNS_START,
    &RUNS_TRANSITION_FROM_STATE,
    &RUNS_TERMINAL_FINAL,
    &RUNS_NO_TERMINAL_WITHOUT_LEASE,
    &LEASE_TTL_MILLISECONDS,
    &LEASE_CONFIRMED_LOSS_STOPS_WORK,
    &SERIALIZATION_RETRY_WHOLE,
    &SERIALIZATION_RETRY_BUDGET,
    &SERIALIZATION_NOT_LEASE_LOSS,
    &RUNS_UNKNOWN_COMMIT_OUTCOME,
    &RUNS_ANSWERS_AGREE,
    &RUNS_UNKNOWN_READ_BACK,
    &RUNS_UNKNOWN_NEVER_FAILURE,
    &CLOCK_DATABASE_TIME,
    &CLOCK_JUMPS_KEEP_STATE_SAFE,
    &LEASE_PARAMETERS,
    &INTENT_SAME_TRANSACTION,
    &INTENT_CANONICAL_DIGEST,
    &INTENT_SAME_INTENT_RECOGNIZED,
    &INTENT_MISMATCH_COMMITS_NOTHING,
    &CRASH_REFERENCES_DURABLE_FIRST,
    &CRASH_RECOVERY_FINISHES,
    &CLAIM_PREPARED_OF_LIVE_RUNS,
    &CLAIM_SKIP_LOCKED,
    &CLAIM_NO_TRANSACTION_ACROSS_CALL,
    &LEDGER_REVISION_PLUS_ONE,
    &LEDGER_NEVER_BACK_TO_PREPARED,
    &RESULT_CLAIM_OWNER_REVISION_DIGEST,
    &RESULT_SETTLED_STATUSES_ONLY,
    &LEDGER_SETTLED_FINAL,
    &UNKNOWN_OWN_CLAIM_ONLY,
    &UNKNOWN_EXPIRED_CLAIM_AS_SEEN,
    &CONVERGE_UNKNOWN_AT_REVISION,
    &EFFECTS_ONE_PER_OPERATION,
    &UNKNOWN_NEVER_FAILURE,
    &REMOTE_CONFLICT_OWNERSHIP,
    &CANCEL_PREPARED_TO_CANCELLED,
    &CANCEL_IN_FLIGHT_KEPT,
    &FAILOVER_CONTRACT,
    &FAILOVER_FENCE_BEFORE_PROMOTE,
    &ROLES_FENCED_FUNCTIONS_ONLY,
    &SECRETS_MASKED,
    &METRICS_OUTCOMES,
    &ROLLOUT_REVOKE_DIRECT_WRITES,
    &PREFILTER_NOT_A_BOUNDARY,
    &RESTORE_RECOVER_BEFORE_DISPATCH,
    &LIVENESS_LEGAL_STEP,
];

/// The rules each experiment's own checks judge, beside those of the check sets it runs
/// ([`crate::experiment::Checks`]); a row that ends with every check passed is an ERROR when one of
/// its rules got no check. The experiments are named by their registrations, never by id.
pub const EXERCISED: &[(&Rule, &[&Experiment])] = &[
    (&IDS_RETRY_NEW_RUN, &[&crate::g_retry_isolation::EXPERIMENT]),
    (&LEASE_CONFIRMED_LOSS_STOPS_WORK, &[&crate::b_loss_while_running::EXPERIMENT]),
    (&LEASE_TTL_MILLISECONDS, &[&crate::w_boundaries::lease::EXPERIMENT]),
    (&SERIALIZATION_RETRY_WHOLE, &[&crate::s_serialization::EXPERIMENT]),
    (&SERIALIZATION_RETRY_BUDGET, &[&crate::s_serialization::EXPERIMENT]),
    (&SERIALIZATION_NOT_LEASE_LOSS, &[&crate::s_serialization::EXPERIMENT]),
    (&CRASH_REFERENCES_DURABLE_FIRST, &[&crate::e_crash_between_commits::EXPERIMENT]),
    (&CRASH_RECOVERY_FINISHES, &[&crate::e_crash_between_commits::EXPERIMENT]),
    (
        &IDS_OPERATION_ID_PER_INTENT,
        &[
            &crate::e_remote_success_then_crash::IDEM,
            &crate::e_remote_success_then_crash::DETID,
            &crate::e_remote_success_then_crash::OPQUERY,
            &crate::e_remote_success_then_crash::PLAIN,
            &crate::e_remote_success_then_crash::IDEM_PAUSE,
            &crate::e_unverified_answers::REPLAN,
            &crate::g_retry_isolation::EXPERIMENT,
        ],
    ),
    (&RUNS_ONE_LIVE_RUN_PER_TASK, &[&crate::w_boundaries::control::EXPERIMENT]),
    (
        &LEASE_ACQUIRE_FREE_OR_EXPIRED,
        &[
            &crate::b_old_owner_resumes::SIGSTOP,
            &crate::b_old_owner_resumes::FREEZE,
            &crate::b_old_owner_resumes::SAME_OWNER,
            &crate::d_race_after_validation::EXPERIMENT,
            &crate::p_api::lease::EXPERIMENT,
            &crate::p_api::team::EXPERIMENT,
            &crate::p_api::clock::EXPERIMENT,
            &crate::w_boundaries::lease::EXPERIMENT,
            &crate::w_boundaries::clock::EXPERIMENT,
            &crate::w_boundaries::clock_behind::EXPERIMENT,
        ],
    ),
    (&LEASE_TAKEOVER_WAITS_FOR_VALIDATED_COMMIT, &[&crate::d_race_after_validation::EXPERIMENT]),
    (
        &LEASE_RENEW_OWNER_EPOCH,
        &[
            &crate::b_old_owner_resumes::SIGSTOP,
            &crate::b_old_owner_resumes::FREEZE,
            &crate::b_old_owner_resumes::SAME_OWNER,
            &crate::p_role_boundary::EXPERIMENT,
            &crate::p_api::lease::EXPERIMENT,
            &crate::p_api::team::EXPERIMENT,
            &crate::w_boundaries::lease::EXPERIMENT,
        ],
    ),
    (
        &LEASE_RENEW_UNEXPIRED,
        &[
            &crate::p_api::lease::EXPERIMENT,
            &crate::p_api::team::EXPERIMENT,
            &crate::p_api::clock::EXPERIMENT,
            &crate::w_boundaries::lease::EXPERIMENT,
        ],
    ),
    (
        &LEASE_RELEASE_OWNER_EPOCH,
        &[
            &crate::b_old_owner_resumes::SIGSTOP,
            &crate::b_old_owner_resumes::FREEZE,
            &crate::b_old_owner_resumes::SAME_OWNER,
            &crate::p_api::lease::EXPERIMENT,
            &crate::p_api::team::EXPERIMENT,
            &crate::w_boundaries::lease::EXPERIMENT,
        ],
    ),
    (
        &LEASE_RELEASE_KEEPS_EPOCH,
        &[
            &crate::b_old_owner_resumes::SIGSTOP,
            &crate::b_old_owner_resumes::FREEZE,
            &crate::b_old_owner_resumes::SAME_OWNER,
            &crate::p_api::lease::EXPERIMENT,
            &crate::p_api::team::EXPERIMENT,
            &crate::w_boundaries::lease::EXPERIMENT,
        ],
    ),
    (
        &LEASE_UNCONFIRMED_RENEWAL_CANCELS,
        &[
            &crate::b_old_owner_resumes::SIGSTOP,
            &crate::b_old_owner_resumes::FREEZE,
            &crate::b_database_freeze::EXPERIMENT,
            &crate::b_old_owner_resumes::SAME_OWNER,
            &crate::i_lost_ack::RENEW,
            &crate::j_partition::EXPERIMENT,
        ],
    ),
    (
        &COMMIT_LEASE_OWNER_EPOCH_LIVE,
        &[
            &crate::b_old_owner_resumes::SIGSTOP,
            &crate::b_old_owner_resumes::FREEZE,
            &crate::b_old_owner_resumes::SAME_OWNER,
            &crate::d_race_after_validation::EXPERIMENT,
            &crate::p_role_boundary::EXPERIMENT,
            &crate::p_api::commit::EXPERIMENT,
            &crate::p_api::clock::EXPERIMENT,
            &crate::w_boundaries::lease::EXPERIMENT,
            &crate::w_boundaries::clock::EXPERIMENT,
        ],
    ),
    (&COMMIT_VALID_AT_CHECK, &[&crate::d_race_after_validation::EXPERIMENT]),
    (&COMMIT_CONFLICT_LOSER_REREADS, &[&crate::c_same_epoch_reorder::EXPERIMENT]),
    (&RUNS_START, &[&crate::a_continuous_checkpoints::EXPERIMENT, &crate::p_api::commit::EXPERIMENT]),
    (
        &RUNS_UNKNOWN_COMMIT_OUTCOME,
        &[
            &crate::h_failover::SYNC,
            &crate::h_failover::patroni::SYNC,
            &crate::i_lost_ack::SAVE,
            &crate::i_lost_ack::TERMINAL,
        ],
    ),
    (&RUNS_UNKNOWN_READ_BACK, &[&crate::i_lost_ack::SAVE]),
    (&RUNS_UNKNOWN_NEVER_FAILURE, &[&crate::i_lost_ack::SAVE, &crate::i_lost_ack::TERMINAL]),
    (&CLOCK_DATABASE_TIME, &[&crate::p_api::clock::EXPERIMENT, &crate::w_boundaries::clock::EXPERIMENT]),
    (&CLOCK_JUMPS_KEEP_STATE_SAFE, &[&crate::k_clock_jump::FORWARD, &crate::k_clock_jump::BACKWARD]),
    (&LEASE_PARAMETERS, &[&crate::h_lease_params::EXPERIMENT]),
    (
        &INTENT_SAME_TRANSACTION,
        &[
            &crate::e_remote_success_then_crash::IDEM,
            &crate::e_remote_success_then_crash::DETID,
            &crate::e_remote_success_then_crash::OPQUERY,
            &crate::e_remote_success_then_crash::PLAIN,
            &crate::e_unverified_answers::NO_ANSWER,
            &crate::e_unverified_answers::CONFLICT,
            &crate::e_unverified_answers::REPLAN,
            &crate::f_cancel_race::PREPARED,
            &crate::g_retry_isolation::EXPERIMENT,
            &crate::p_role_boundary::EXPERIMENT,
            &crate::p_api::commit::EXPERIMENT,
        ],
    ),
    (
        &INTENT_CANONICAL_DIGEST,
        &[
            &crate::e_remote_success_then_crash::IDEM,
            &crate::e_remote_success_then_crash::DETID,
            &crate::e_remote_success_then_crash::OPQUERY,
            &crate::e_remote_success_then_crash::PLAIN,
            &crate::e_unverified_answers::NO_ANSWER,
            &crate::e_unverified_answers::CONFLICT,
            &crate::e_unverified_answers::REPLAN,
            &crate::f_cancel_race::PREPARED,
            &crate::g_retry_isolation::EXPERIMENT,
            &crate::p_secret_masking::EXPERIMENT,
        ],
    ),
    (&INTENT_SAME_INTENT_RECOGNIZED, &[&crate::p_api::commit::EXPERIMENT]),
    (&INTENT_MISMATCH_COMMITS_NOTHING, &[&crate::p_role_boundary::EXPERIMENT, &crate::p_api::commit::EXPERIMENT]),
    (
        &CLAIM_PREPARED_OF_LIVE_RUNS,
        &[&crate::f_cancel_race::PREPARED, &crate::p_api::ledger::EXPERIMENT, &crate::w_boundaries::ledger::EXPERIMENT],
    ),
    (&CLAIM_SKIP_LOCKED, &[&crate::p_api::ledger::EXPERIMENT, &crate::w_boundaries::ledger::EXPERIMENT]),
    (
        &CLAIM_NO_TRANSACTION_ACROSS_CALL,
        &[
            &crate::b_loss_while_running::EXPERIMENT,
            &crate::e_remote_success_then_crash::IDEM,
            &crate::e_remote_success_then_crash::DETID,
            &crate::e_remote_success_then_crash::OPQUERY,
            &crate::e_remote_success_then_crash::PLAIN,
            &crate::e_remote_success_then_crash::IDEM_PAUSE,
            &crate::e_unverified_answers::NO_ANSWER,
            &crate::e_unverified_answers::CONFLICT,
            &crate::e_unverified_answers::REPLAN,
            &crate::f_cancel_race::PREPARED,
            &crate::f_cancel_race::DISPATCHING,
            &crate::f_cancel_race::UNKNOWN,
            &crate::g_retry_isolation::EXPERIMENT,
            &crate::p_secret_masking::EXPERIMENT,
            &crate::w_boundaries::clock::EXPERIMENT,
            &crate::w_boundaries::ledger::EXPERIMENT,
        ],
    ),
    (
        &RESULT_CLAIM_OWNER_REVISION_DIGEST,
        &[&crate::e_remote_success_then_crash::IDEM_PAUSE, &crate::p_api::ledger::EXPERIMENT],
    ),
    (&RESULT_SETTLED_STATUSES_ONLY, &[&crate::p_api::ledger::EXPERIMENT]),
    (
        &LEDGER_SETTLED_FINAL,
        &[
            &crate::e_remote_success_then_crash::IDEM_PAUSE,
            &crate::g_retry_isolation::EXPERIMENT,
            &crate::p_api::ledger::EXPERIMENT,
        ],
    ),
    (&UNKNOWN_OWN_CLAIM_ONLY, &[&crate::p_api::ledger::EXPERIMENT]),
    (
        &UNKNOWN_EXPIRED_CLAIM_AS_SEEN,
        &[
            &crate::e_remote_success_then_crash::IDEM,
            &crate::e_remote_success_then_crash::DETID,
            &crate::e_remote_success_then_crash::OPQUERY,
            &crate::e_remote_success_then_crash::PLAIN,
            &crate::e_remote_success_then_crash::IDEM_PAUSE,
            &crate::p_api::ledger::EXPERIMENT,
            &crate::p_api::clock::EXPERIMENT,
            &crate::w_boundaries::clock::EXPERIMENT,
        ],
    ),
    (
        &CONVERGE_UNKNOWN_AT_REVISION,
        &[
            &crate::e_remote_success_then_crash::IDEM,
            &crate::e_remote_success_then_crash::DETID,
            &crate::e_remote_success_then_crash::OPQUERY,
            &crate::e_unverified_answers::NO_ANSWER,
            &crate::p_api::ledger::EXPERIMENT,
        ],
    ),
    (
        &EFFECTS_ONE_PER_OPERATION,
        &[
            &crate::e_remote_success_then_crash::IDEM,
            &crate::e_remote_success_then_crash::DETID,
            &crate::e_remote_success_then_crash::OPQUERY,
            &crate::e_remote_success_then_crash::PLAIN,
            &crate::e_remote_success_then_crash::IDEM_PAUSE,
            &crate::e_unverified_answers::NO_ANSWER,
            &crate::e_unverified_answers::REPLAN,
            &crate::f_cancel_race::DISPATCHING,
            &crate::f_cancel_race::UNKNOWN,
        ],
    ),
    (
        &UNKNOWN_NEVER_FAILURE,
        &[
            &crate::e_remote_success_then_crash::PLAIN,
            &crate::e_unverified_answers::NO_ANSWER,
            &crate::f_cancel_race::DISPATCHING,
            &crate::f_cancel_race::UNKNOWN,
        ],
    ),
    (&REMOTE_CONFLICT_OWNERSHIP, &[&crate::e_unverified_answers::CONFLICT]),
    (&CANCEL_PREPARED_TO_CANCELLED, &[&crate::f_cancel_race::PREPARED, &crate::w_boundaries::control::EXPERIMENT]),
    (&CANCEL_IN_FLIGHT_KEPT, &[&crate::f_cancel_race::DISPATCHING, &crate::f_cancel_race::UNKNOWN]),
    (
        &FAILOVER_CONTRACT,
        &[
            &crate::h_failover::ASYNC,
            &crate::h_failover::SYNC,
            &crate::h_failover::patroni::ASYNC,
            &crate::h_failover::patroni::SYNC,
            &crate::h_failover::patroni::CRASH_ASYNC,
            &crate::h_failover::patroni::CRASH_SYNC,
            &crate::h_failover::switchover::EXPERIMENT,
        ],
    ),
    (
        &FAILOVER_FENCE_BEFORE_PROMOTE,
        &[
            &crate::h_failover::ASYNC,
            &crate::h_failover::SYNC,
            &crate::h_failover::patroni::ASYNC,
            &crate::h_failover::patroni::SYNC,
            &crate::h_failover::patroni::CRASH_ASYNC,
            &crate::h_failover::patroni::CRASH_SYNC,
            &crate::h_failover::partition::EXPERIMENT,
            &crate::h_failover::switchover::EXPERIMENT,
        ],
    ),
    (&ROLES_FENCED_FUNCTIONS_ONLY, &[&crate::p_role_boundary::EXPERIMENT]),
    (&SECRETS_MASKED, &[&crate::p_secret_masking::EXPERIMENT]),
    (
        &METRICS_OUTCOMES,
        &[
            &crate::b_old_owner_resumes::SIGSTOP,
            &crate::b_old_owner_resumes::FREEZE,
            &crate::b_old_owner_resumes::SAME_OWNER,
            &crate::e_remote_success_then_crash::IDEM,
            &crate::e_remote_success_then_crash::DETID,
            &crate::e_remote_success_then_crash::OPQUERY,
            &crate::e_remote_success_then_crash::PLAIN,
            &crate::e_remote_success_then_crash::IDEM_PAUSE,
        ],
    ),
    (&ROLLOUT_REVOKE_DIRECT_WRITES, &[&crate::l_rollout::EXPERIMENT]),
    (&PREFILTER_NOT_A_BOUNDARY, &[&crate::m_redis_prefilter::REDIS_EXPIRY, &crate::m_redis_prefilter::REDIS_RESTART]),
    (&RESTORE_RECOVER_BEFORE_DISPATCH, &[&crate::n_restore::EXPERIMENT]),
];

/// The rules every row that judges the global invariants exercises ([`crate::experiment::Checks::invariants`]).
pub const INVARIANT_RULES: &[&Rule] = &[
    &HOLDER_ONLY_CURRENT_EPOCH_WRITES,
    &IDS_OPERATION_ID_NAMES_NO_EXECUTOR,
    &RUNS_CREATED_WITH_LEASE,
    &LEASE_EPOCH_PLUS_ONE,
    &COMMIT_REVISION_CAS,
    &COMMIT_ONE_RUN_PER_TRANSACTION,
    &RUNS_TRANSITION_FROM_STATE,
    &RUNS_TERMINAL_FINAL,
    &RUNS_NO_TERMINAL_WITHOUT_LEASE,
    &LEDGER_REVISION_PLUS_ONE,
    &LEDGER_NEVER_BACK_TO_PREPARED,
];

/// The rules every row whose workers' answers are judged exercises ([`crate::experiment::Checks::answers`]).
pub const ANSWER_RULES: &[&Rule] = &[&RUNS_ANSWERS_AGREE];

/// The rules every row that checks its legal steps exercises ([`crate::experiment::Checks::legal_step`]).
pub const LEGAL_STEP_RULES: &[&Rule] = &[&LIVENESS_LEGAL_STEP];

/// The rules `e` declares it exercises: its own and those of the checks it runs.
pub fn rules_of(e: &Experiment) -> Vec<&'static Rule> {
    let mut v: Vec<&'static Rule> =
        EXERCISED.iter().filter(|(_, rows)| rows.iter().any(|x| x.id == e.id)).map(|(r, _)| *r).collect();
    for (on, set) in [
        (e.checks.invariants, INVARIANT_RULES),
        (e.checks.answers, ANSWER_RULES),
        (e.checks.legal_step, LEGAL_STEP_RULES),
    ] {
        if on {
            for r in set.iter().copied() {
                if !v.iter().any(|x| x.id == r.id) {
                    v.push(r);
                }
            }
        }
    }
    v
}

/// The experiments that exercise `rule`, in the matrix's order.
pub fn exercised_by(rule: &Rule) -> Vec<Experiment> {
    crate::all().into_iter().filter(|e| rules_of(e).iter().any(|r| r.id == rule.id)).collect()
}

/// The rule with this id.
pub fn rule(id: &str) -> Option<&'static Rule> {
    RULES.iter().copied().find(|r| r.id == id)
}

/// The rules a check named `name` judges.
pub fn rules_for(name: &str) -> Vec<&'static Rule> {
    RULES.iter().copied().filter(|r| judged_by(r, name)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A checker that judges several rules names, per violation, the rule it breaks by id: each such
    /// id is a rule of this catalogue (a misspelt one would leave a finding without its rule).
    #[test]
    fn the_rules_a_violation_names_are_the_catalogues() {
        let src = include_str!("../../harness/src/check/transitions.rs");
        let ids: Vec<&str> = src.split(".breaks(\"").skip(1).filter_map(|t| t.split('"').next()).collect();
        assert!(ids.len() >= 8, "{ids:?}");
        for id in ids {
            assert!(rule(id).is_some(), "{id} is no rule of the catalogue");
        }
    }

    #[test]
    fn every_rule_has_a_checker_an_experiment_and_a_unique_id() {
        let mut ids = std::collections::BTreeSet::new();
        for r in RULES {
            assert!(!r.checkers.is_empty(), "{} has no checker", r.id);
            assert!(!exercised_by(r).is_empty(), "{} is exercised by no experiment", r.id);
            assert!(ids.insert(r.id), "{} twice", r.id);
        }
        for set in [INVARIANT_RULES, ANSWER_RULES, LEGAL_STEP_RULES] {
            assert!(set.iter().all(|r| RULES.iter().any(|x| x.id == r.id)));
        }
    }

    #[test]
    fn every_experiment_exercises_a_rule() {
        for e in crate::all() {
            assert!(!rules_of(&e).is_empty(), "experiment {} exercises no rule of the catalogue", e.id);
        }
    }

    #[test]
    fn every_global_invariant_is_in_the_catalogue() {
        let rows = Vec::new();
        let mut all = fenceproof_harness::check::invariants::all(&rows, &[]);
        all.extend(fenceproof_harness::check::history::all(&rows, &[]));
        all.extend(fenceproof_harness::check::remote::all(&[], &[]));
        all.push(fenceproof_harness::check::history::quiet_windows_stay_quiet(&rows, &[]));
        for c in all {
            assert!(!rules_for(&c.name).is_empty(), "{} judges no rule of the catalogue", c.name);
        }
    }

    /// A pattern checker (a `*` in it) names checks built at run time: each must match a name
    /// that the code building such names produces, or it links its rule to nothing.
    #[test]
    fn every_pattern_checker_matches_a_name_the_code_builds() {
        use fenceproof_harness::check::invariants;
        use fenceproof_harness::check::rule::matches;
        use fenceproof_harness::faults::tools::ToolFault;

        let mut built: Vec<String> = crate::tags::ALL
            .iter()
            .map(|(tag, _)| crate::tags::tagged(tag, "at 2030-01-01 00:00:01, probed"))
            .collect();
        built.push(invariants::silent_after(&[], "worker-a-1", 6).name);
        built.push(invariants::one_effect_per_operation(&[], &["plain"]).name);
        built.push(crate::p_role_boundary::denied_check("TRUNCATE worker_leases"));
        for what in [
            crate::e_unverified_answers::UNVERIFIED_LEAVES_UNKNOWN,
            crate::e_unverified_answers::CALL_REACHED_TOOL,
            crate::e_unverified_answers::STILL_UNKNOWN_AFTER_RECONCILE,
            crate::e_unverified_answers::RECONCILE_CONVERGES,
        ] {
            built.push(crate::e_unverified_answers::call_check("plain", ToolFault::Hang, what));
        }
        for r in RULES {
            for p in r.checkers.iter().filter(|p| p.contains('*')) {
                assert!(
                    built.iter().any(|n| matches(p, n)),
                    "rule {}: pattern {p} matches no name the code builds",
                    r.id
                );
            }
        }
    }
}
