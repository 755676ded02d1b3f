//! The tags that begin the names of boundary checks: `[tag] what was probed or seen`. The P-api
//! probes and the W rows name every check so, as do the rows whose checks judge one rule at a
//! boundary (I, J, K, M). A tag is the id of the rule of the catalogue the check judges, or of a
//! narrower rule of the spec beside it; the catalogue names all checks of a tag by its pattern
//! (`ANY_…`, `[tag]*`), and the clock rows' checks at one frozen instant by `AT_…` (`[tag] at *`).

/// Defines each tag and the pattern that matches every check of it.
macro_rules! tags {
    ($($name:ident, $any:ident = $tag:literal;)*) => {
        $(
            #[doc = concat!("The tag `", $tag, "`.")]
            pub const $name: &str = $tag;
            #[doc = concat!("Every check tagged `[", $tag, "]`.")]
            pub const $any: &str = concat!("[", $tag, "]*");
        )*
        /// Every tag with its pattern.
        pub const ALL: &[(&str, &str)] = &[$(($name, $any)),*];
    };
}

tags! {
    LEASE_ACQUIRE_FREE_OR_EXPIRED, ANY_LEASE_ACQUIRE_FREE_OR_EXPIRED = "lease.acquire-free-or-expired";
    LEASE_RENEW_OWNER_EPOCH, ANY_LEASE_RENEW_OWNER_EPOCH = "lease.renew-owner-epoch";
    LEASE_RENEW_UNEXPIRED, ANY_LEASE_RENEW_UNEXPIRED = "lease.renew-unexpired";
    LEASE_TTL_MILLISECONDS, ANY_LEASE_TTL_MILLISECONDS = "lease.ttl-milliseconds";
    LEASE_RELEASE_OWNER_EPOCH, ANY_LEASE_RELEASE_OWNER_EPOCH = "lease.release-owner-epoch";
    LEASE_RELEASE_KEEPS_EPOCH, ANY_LEASE_RELEASE_KEEPS_EPOCH = "lease.release-keeps-epoch";
    LEASE_RENEW_UNKNOWN_CANCELS, ANY_LEASE_RENEW_UNKNOWN_CANCELS = "lease.renew-unknown-cancels";
    LEASE_PARTITION_STALE_REJECTED, ANY_LEASE_PARTITION_STALE_REJECTED = "lease.partition-stale-rejected";
    COMMIT_LEASE_OWNER_EPOCH_LIVE, ANY_COMMIT_LEASE_OWNER_EPOCH_LIVE = "commit.lease-owner-epoch-live";
    COMMIT_REVISION_CAS, ANY_COMMIT_REVISION_CAS = "commit.revision-cas";
    COMMIT_REQUIRED_RESULT_OWN_SETTLED, ANY_COMMIT_REQUIRED_RESULT_OWN_SETTLED = "commit.required-result-own-settled";
    COMMIT_UNKNOWN_ANSWERED_UNKNOWN, ANY_COMMIT_UNKNOWN_ANSWERED_UNKNOWN = "commit.unknown-answered-unknown";
    COMMIT_UNKNOWN_READ_BACK, ANY_COMMIT_UNKNOWN_READ_BACK = "commit.unknown-read-back";
    COMMIT_UNKNOWN_NOT_FAILURE, ANY_COMMIT_UNKNOWN_NOT_FAILURE = "commit.unknown-not-failure";
    RUNS_START, ANY_RUNS_START = "runs.start";
    RUNS_TRANSITION_FROM_STATE, ANY_RUNS_TRANSITION_FROM_STATE = "runs.transition-from-state";
    RUNS_TERMINAL_FINAL, ANY_RUNS_TERMINAL_FINAL = "runs.terminal-final";
    RUNS_ONE_LIVE_RUN_PER_TASK, ANY_RUNS_ONE_LIVE_RUN_PER_TASK = "runs.one-live-run-per-task";
    INTENT_SAME_TRANSACTION, ANY_INTENT_SAME_TRANSACTION = "intent.same-transaction";
    INTENT_SAME_INTENT_RECOGNIZED, ANY_INTENT_SAME_INTENT_RECOGNIZED = "intent.same-intent-recognized";
    INTENT_MISMATCH_COMMITS_NOTHING, ANY_INTENT_MISMATCH_COMMITS_NOTHING = "intent.mismatch-commits-nothing";
    CLAIM_PREPARED_OF_LIVE_RUNS, ANY_CLAIM_PREPARED_OF_LIVE_RUNS = "claim.prepared-of-live-runs";
    CLAIM_SKIP_LOCKED, ANY_CLAIM_SKIP_LOCKED = "claim.skip-locked";
    LEDGER_REVISION_PLUS_ONE, ANY_LEDGER_REVISION_PLUS_ONE = "ledger.revision-plus-one";
    LEDGER_SETTLED_FINAL, ANY_LEDGER_SETTLED_FINAL = "ledger.settled-final";
    RESULT_CLAIM_OWNER_REVISION_DIGEST, ANY_RESULT_CLAIM_OWNER_REVISION_DIGEST = "result.claim-owner-revision-digest";
    RESULT_SETTLED_STATUSES_ONLY, ANY_RESULT_SETTLED_STATUSES_ONLY = "result.settled-statuses-only";
    UNKNOWN_OWN_CLAIM_ONLY, ANY_UNKNOWN_OWN_CLAIM_ONLY = "unknown.own-claim-only";
    UNKNOWN_EXPIRED_CLAIM_AS_SEEN, ANY_UNKNOWN_EXPIRED_CLAIM_AS_SEEN = "unknown.expired-claim-as-seen";
    CONVERGE_UNKNOWN_AT_REVISION, ANY_CONVERGE_UNKNOWN_AT_REVISION = "converge.unknown-at-revision";
    CANCEL_PREPARED_TO_CANCELLED, ANY_CANCEL_PREPARED_TO_CANCELLED = "cancel.prepared-to-cancelled";
    CLOCK_JUMPS_KEEP_STATE_SAFE, ANY_CLOCK_JUMPS_KEEP_STATE_SAFE = "clock.jumps-keep-state-safe";
    PREFILTER_NOT_A_BOUNDARY, ANY_PREFILTER_NOT_A_BOUNDARY = "prefilter.not-a-boundary";
}

/// The checks of a tag made at one frozen instant of the clock rows (`[tag] at <instant>, …`).
pub const AT_COMMIT_LEASE_OWNER_EPOCH_LIVE: &str = "[commit.lease-owner-epoch-live] at *";
pub const AT_LEASE_ACQUIRE_FREE_OR_EXPIRED: &str = "[lease.acquire-free-or-expired] at *";
pub const AT_LEASE_RENEW_UNEXPIRED: &str = "[lease.renew-unexpired] at *";
pub const AT_UNKNOWN_EXPIRED_CLAIM_AS_SEEN: &str = "[unknown.expired-claim-as-seen] at *";

/// A check's name: its tag in brackets, then what it judges.
pub fn tagged(tag: &str, what: &str) -> String {
    format!("[{tag}] {what}")
}

/// The tag a check's name begins with, if any.
pub fn tag_of(name: &str) -> Option<&str> {
    name.strip_prefix('[').and_then(|n| n.split(']').next())
}

#[cfg(test)]
mod tests {
    use fenceproof_harness::check::rule::matches;

    use super::*;

    #[test]
    fn a_tagged_name_matches_its_own_pattern_only() {
        for (tag, any) in ALL {
            let name = tagged(tag, "something probed");
            assert_eq!(tag_of(&name), Some(*tag));
            for (_, other) in ALL {
                assert_eq!(matches(other, &name), other == any, "{name} against {other}");
            }
        }
    }

    #[test]
    fn the_instant_patterns_match_the_clock_rows_names_of_their_tag() {
        for (tag, at) in [
            (COMMIT_LEASE_OWNER_EPOCH_LIVE, AT_COMMIT_LEASE_OWNER_EPOCH_LIVE),
            (LEASE_ACQUIRE_FREE_OR_EXPIRED, AT_LEASE_ACQUIRE_FREE_OR_EXPIRED),
            (LEASE_RENEW_UNEXPIRED, AT_LEASE_RENEW_UNEXPIRED),
            (UNKNOWN_EXPIRED_CLAIM_AS_SEEN, AT_UNKNOWN_EXPIRED_CLAIM_AS_SEEN),
        ] {
            assert!(matches(at, &tagged(tag, "at 2030-01-01 00:00:01, the instant it expires, …")), "{at}");
            assert!(!matches(at, &tagged(tag, "a held statement runs after the expiry")), "{at}");
        }
    }
}
