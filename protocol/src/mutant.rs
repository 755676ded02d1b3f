//! Named broken variants (mutants) of the reference protocol, each removing exactly one rule of the
//! spec, so fenceproof can prove its experiments catch them (`fenceproof mutants named`).
//!
//! The names exist in every build, but a mutant can only be switched on in a build with the cargo
//! feature `mutants`. In the reference build [`active`] is the constant `false` and every mutated
//! branch is dead code, so a mutant cannot be reached by accident.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mutant {
    SaveWithoutLeaseCheck,
    CheckThenCommit,
    RenewWithoutEpoch,
    ReleaseZeroesEpoch,
    TakeoverWithoutExpiry,
    BlindOverwrite,
    ConflictRetryWithoutReread,
    FailOnLeaseLoss,
    RetryReusesRunId,
    RetryNewOperationId,
    DispatcherResetsToPrepared,
    ResultWriteSkipsClaimCheck,
    ReconcilerMarksUnknownFailed,
    RescueByTime,
    ContinueAfterUnconfirmedRenewal,
    RetryUnknownCommit,
    UnknownAsSuccess,
    FailAfterUnknown,
    TrustPrefilterLock,
    RestoreSkipsRecovery,
    ClaimAcrossCall,
    RetrySerializationForever,
    SerializationAsLeaseLost,
    MaskSkipsArrays,
    LostRenewalKeepsRunning,
    SecretsAfterIntent,
    TtlWholeSeconds,
}

impl Mutant {
    pub const ALL: &'static [Mutant] = &[
        Mutant::SaveWithoutLeaseCheck,
        Mutant::CheckThenCommit,
        Mutant::RenewWithoutEpoch,
        Mutant::ReleaseZeroesEpoch,
        Mutant::TakeoverWithoutExpiry,
        Mutant::BlindOverwrite,
        Mutant::ConflictRetryWithoutReread,
        Mutant::FailOnLeaseLoss,
        Mutant::RetryReusesRunId,
        Mutant::RetryNewOperationId,
        Mutant::DispatcherResetsToPrepared,
        Mutant::ResultWriteSkipsClaimCheck,
        Mutant::ReconcilerMarksUnknownFailed,
        Mutant::RescueByTime,
        Mutant::ContinueAfterUnconfirmedRenewal,
        Mutant::RetryUnknownCommit,
        Mutant::UnknownAsSuccess,
        Mutant::FailAfterUnknown,
        Mutant::TrustPrefilterLock,
        Mutant::RestoreSkipsRecovery,
        Mutant::ClaimAcrossCall,
        Mutant::RetrySerializationForever,
        Mutant::SerializationAsLeaseLost,
        Mutant::MaskSkipsArrays,
        Mutant::LostRenewalKeepsRunning,
        Mutant::SecretsAfterIntent,
        Mutant::TtlWholeSeconds,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mutant::SaveWithoutLeaseCheck => "save-without-lease-check",
            Mutant::CheckThenCommit => "check-then-commit",
            Mutant::RenewWithoutEpoch => "renew-without-epoch",
            Mutant::ReleaseZeroesEpoch => "release-zeroes-epoch",
            Mutant::TakeoverWithoutExpiry => "takeover-without-expiry",
            Mutant::BlindOverwrite => "blind-overwrite",
            Mutant::ConflictRetryWithoutReread => "conflict-retry-without-reread",
            Mutant::FailOnLeaseLoss => "fail-on-lease-loss",
            Mutant::RetryReusesRunId => "retry-reuses-run-id",
            Mutant::RetryNewOperationId => "retry-new-operation-id",
            Mutant::DispatcherResetsToPrepared => "dispatcher-resets-to-prepared",
            Mutant::ResultWriteSkipsClaimCheck => "result-write-skips-claim-check",
            Mutant::ReconcilerMarksUnknownFailed => "reconciler-marks-unknown-failed",
            Mutant::RescueByTime => "rescue-by-time",
            Mutant::ContinueAfterUnconfirmedRenewal => "continue-after-unconfirmed-renewal",
            Mutant::RetryUnknownCommit => "retry-unknown-commit",
            Mutant::UnknownAsSuccess => "unknown-as-success",
            Mutant::FailAfterUnknown => "fail-after-unknown",
            Mutant::TrustPrefilterLock => "trust-prefilter-lock",
            Mutant::RestoreSkipsRecovery => "restore-skips-recovery",
            Mutant::ClaimAcrossCall => "claim-across-call",
            Mutant::RetrySerializationForever => "retry-40001-forever",
            Mutant::SerializationAsLeaseLost => "40001-as-lease-lost",
            Mutant::MaskSkipsArrays => "mask-skips-arrays",
            Mutant::LostRenewalKeepsRunning => "lost-renewal-keeps-running",
            Mutant::SecretsAfterIntent => "secrets-after-intent",
            Mutant::TtlWholeSeconds => "ttl-whole-seconds",
        }
    }

    /// The rule of the spec this mutant removes.
    pub fn rule(self) -> &'static str {
        match self {
            Mutant::SaveWithoutLeaseCheck => "protected writes validate owner + epoch + expiry (06)",
            Mutant::CheckThenCommit => {
                "the lease is checked under a row lock in the writing transaction, not before it (03, 06)"
            }
            Mutant::RenewWithoutEpoch => "renew is fenced by owner AND epoch (05.2)",
            Mutant::ReleaseZeroesEpoch => "release never zeroes the epoch (05.2)",
            Mutant::TakeoverWithoutExpiry => "takeover only when free or expired (05.1)",
            Mutant::BlindOverwrite => "checkpoints compare-and-set the revision (06)",
            Mutant::ConflictRetryWithoutReread => {
                "a conflict loser re-reads before deciding, never blindly retries (06)"
            }
            Mutant::FailOnLeaseLoss => "a worker that lost its lease writes no terminal state (07)",
            Mutant::RetryReusesRunId => "a retry is a new run_id (02, 07)",
            Mutant::RetryNewOperationId => "a retry keeps the operation_id of the intent (08, 09)",
            Mutant::DispatcherResetsToPrepared => "dispatching never goes back to prepared (09.2)",
            Mutant::ResultWriteSkipsClaimCheck => "a result is written only under the claim's owner + revision (09.3)",
            Mutant::ReconcilerMarksUnknownFailed => "unknown is never treated as failed (01, 09.3)",
            Mutant::RescueByTime => "completion is fenced, not just status-checked (job-queue style time rescue) (06)",
            Mutant::ContinueAfterUnconfirmedRenewal => {
                "a renewal with no answer is not proof of renewal: cancel the execution, let the lease expire (05, 07)"
            }
            Mutant::RetryUnknownCommit => {
                "a commit whose outcome is unknown is read back, never retried as if it had not committed (06, 07)"
            }
            Mutant::UnknownAsSuccess => {
                "a commit whose outcome is unknown is answered unknown and read back, never taken as success (06, 07)"
            }
            Mutant::FailAfterUnknown => "an unknown outcome is never turned into a failure write (01, 07)",
            Mutant::TrustPrefilterLock => {
                "a lock outside the database (Redis SET NX PX) is a pre-filter: writes and takeovers stay fenced by the PostgreSQL lease (03)"
            }
            Mutant::RestoreSkipsRecovery => {
                "after a restore from an old backup, epochs, the ledger and remote forks are resolved before dispatch resumes (10)"
            }
            Mutant::ClaimAcrossCall => {
                "the claim transaction commits before the tool is called: no transaction spans a remote call (06, 09.2)"
            }
            Mutant::RetrySerializationForever => {
                "a transaction answered 40001 is retried whole under a budget, not until it commits (04, 07)"
            }
            Mutant::SerializationAsLeaseLost => {
                "40001 means not committed, retry the whole transaction: it says nothing about the lease (07)"
            }
            Mutant::MaskSkipsArrays => {
                "a secret is replaced by a reference wherever it is in the request, arrays included: no value reaches the ledger (12)"
            }
            Mutant::LostRenewalKeepsRunning => {
                "a renewal answered with zero rows is a confirmed loss: cancel the execution, start no new work (05.2, 07)"
            }
            Mutant::SecretsAfterIntent => {
                "what a committed intent references (its secret values) is durable before the intent commits: a crash between the two steps leaves an intent that can still be sent (08, 09.1, 12)"
            }
            Mutant::TtlWholeSeconds => {
                "the TTL is passed as integer milliseconds: a term lasts exactly the asked TTL, not a rounded number of seconds (05.1)"
            }
        }
    }

    /// Whether it breaks a step the harness performs as the operator (it reads `--mutant` from the
    /// worker's arguments) rather than worker code. The randomized schedules have no such step;
    /// the experiment that performs it declares so (`Experiment::operator_of`), and `mutants
    /// --first-kill` tries that experiment first.
    pub fn is_operator(self) -> bool {
        // MUTANT restore-skips-recovery: the operator reopens a restored database as it is.
        matches!(self, Mutant::RestoreSkipsRecovery)
    }

    /// Why the randomized schedules cannot see this mutant, if they cannot: the schedules drive
    /// workers by commands, and a worker obeys commands after its execution was cancelled (the
    /// worker contract; the B rows rely on it). A mutant that only changes what a worker's own
    /// execution does after a loss shows only in a scripted execution, so `schedules against-mutants`
    /// does not search it and names the row that kills it.
    pub fn schedules_blind(self) -> Option<&'static str> {
        match self {
            Mutant::LostRenewalKeepsRunning => {
                Some("a scripted execution after a confirmed loss; schedules drive workers by commands")
            }
            _ => None,
        }
    }

    pub fn parse(s: &str) -> Option<Mutant> {
        Mutant::ALL.iter().copied().find(|m| m.name() == s)
    }
}

#[cfg(feature = "mutants")]
static ACTIVE: std::sync::OnceLock<Mutant> = std::sync::OnceLock::new();

/// Switch a mutant on for this process (only in a `mutants` build). Returns false if another one
/// was already active.
#[cfg(feature = "mutants")]
pub fn activate(m: Mutant) -> bool {
    ACTIVE.set(m).is_ok()
}

/// Whether mutant `m` is switched on. Always false in the reference build.
#[inline]
pub fn active(m: Mutant) -> bool {
    #[cfg(feature = "mutants")]
    {
        ACTIVE.get() == Some(&m)
    }
    #[cfg(not(feature = "mutants"))]
    {
        let _ = m;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        let mut names: Vec<&str> = Mutant::ALL.iter().map(|m| m.name()).collect();
        for m in Mutant::ALL {
            assert_eq!(Mutant::parse(m.name()), Some(*m));
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Mutant::ALL.len());
    }

    #[cfg(not(feature = "mutants"))]
    #[test]
    fn no_mutant_is_active_in_the_reference_build() {
        assert!(Mutant::ALL.iter().all(|m| !active(*m)));
    }
}
