//! Coverage you can read: the interesting situations a schedule reached (observed on the database
//! when the operation ran, not assumed from the operation's name), each tied to the rules of the
//! catalogue whose violation it could reveal. After a run: per rule, how many schedules reached a
//! situation of it, and which rules no schedule reached.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use fenceproof_scenarios::catalogue;
use serde::{Deserialize, Serialize};

pub struct Situation {
    pub id: &'static str,
    pub what: &'static str,
    pub rules: &'static [&'static str],
}

pub const SITUATIONS: &[Situation] = &[
    Situation {
        id: "stale-term-write",
        what: "a worker whose term is over (expired or taken over) sent a write",
        rules: &["holder.only-current-epoch-writes", "commit.lease-owner-epoch-live", "runs.no-terminal-without-lease"],
    },
    Situation {
        id: "stale-revision-write",
        what: "the holder sent a write naming an old revision",
        rules: &["commit.revision-cas", "commit.conflict-loser-rereads"],
    },
    Situation {
        id: "writes-in-flight-at-one-revision",
        what: "two writes at the same revision were in flight at once",
        rules: &["commit.revision-cas", "commit.conflict-loser-rereads", "commit.one-run-per-transaction"],
    },
    Situation {
        id: "acquire-of-live-lease",
        what: "a worker tried to take a lease another holds and that has not expired",
        rules: &["lease.acquire-free-or-expired"],
    },
    Situation {
        id: "takeover-of-expired-lease",
        what: "a worker took over a lease that had expired",
        rules: &["lease.acquire-free-or-expired", "lease.epoch-plus-one"],
    },
    Situation {
        id: "acquire-after-release",
        what: "a lease was acquired after its holder released it",
        rules: &["lease.release-keeps-epoch", "lease.epoch-plus-one"],
    },
    Situation {
        id: "renewal-after-expiry",
        what: "a holder resumed after its lease expired and its heartbeat renewed",
        rules: &["lease.renew-unexpired", "lease.renew-owner-epoch"],
    },
    Situation {
        id: "stale-twin",
        what: "a stale holder resumed while a process with its own owner id held the next epoch",
        rules: &["lease.renew-owner-epoch", "holder.only-current-epoch-writes", "commit.lease-owner-epoch-live"],
    },
    Situation {
        id: "renewal-unanswered",
        what: "the database server was frozen past the holder's renewal timeout and thawed before expiry",
        rules: &["lease.unconfirmed-renewal-cancels"],
    },
    Situation {
        id: "commit-outcome-unknown",
        what: "a write's COMMIT lost its answer (committed or not) and the holder went on",
        rules: &["runs.unknown-commit-outcome", "runs.unknown-read-back", "runs.unknown-never-failure"],
    },
    Situation {
        id: "serialization-failure",
        what: "the server answered the holder's save with 40001 (once, a few times, or endlessly)",
        rules: &["serialization.retry-whole", "serialization.retry-budget", "serialization.not-lease-loss"],
    },
    Situation {
        id: "secret-planned",
        what: "the holder planned a step whose request carries secrets at depth (arrays, nested objects)",
        rules: &["secrets.masked"],
    },
    Situation {
        id: "crash-after-plan-commit",
        what: "the holder was killed the moment its plan's commit was acknowledged, with secrets in the request",
        rules: &["crash.references-durable-first"],
    },
    Situation {
        id: "write-held-across-takeover",
        what: "a write was held inside its transaction while its lease expired and was taken over",
        rules: &["commit.valid-at-check", "lease.takeover-waits-for-validated-commit", "commit.lease-owner-epoch-live"],
    },
    Situation {
        id: "write-on-terminal-run",
        what: "a write was sent for a run already succeeded, failed or cancelled",
        rules: &["runs.terminal-final", "runs.transition-from-state"],
    },
    Situation {
        id: "retry-after-terminal",
        what: "the control plane retried a task whose run had ended",
        rules: &["ids.retry-new-run", "runs.created-with-lease", "runs.one-live-run-per-task"],
    },
    Situation {
        id: "retry-while-live",
        what: "the control plane tried a second run of a task whose run is live",
        rules: &["runs.one-live-run-per-task"],
    },
    Situation {
        id: "intent-registered",
        what: "a step's intent was registered with its checkpoint",
        rules: &["intent.same-transaction", "ids.operation-id-per-intent"],
    },
    Situation {
        id: "remote-answer-lost",
        what: "a remote call's answer was lost or never came (the outcome is unknown)",
        rules: &["unknown.never-failure", "ledger.never-back-to-prepared", "effects.one-per-operation"],
    },
    Situation {
        id: "unknown-reconciled",
        what: "a reconciler met an operation in unknown",
        rules: &["converge.unknown-at-revision", "unknown.never-failure", "effects.one-per-operation"],
    },
    Situation {
        id: "late-result",
        what: "a dispatcher wrote its result after its claim expired and another reconciled",
        rules: &["result.claim-owner-revision-digest", "ledger.settled-final", "unknown.expired-claim-as-seen"],
    },
    Situation {
        id: "claim-of-ended-run",
        what: "a dispatcher ran while prepared operations belonged to an ended run",
        rules: &["claim.prepared-of-live-runs"],
    },
    Situation {
        id: "cancel-with-prepared",
        what: "a run was cancelled with operations still prepared",
        rules: &["cancel.prepared-to-cancelled"],
    },
    Situation {
        id: "cancel-with-in-flight",
        what: "a run was cancelled with an operation dispatching or unknown",
        rules: &["cancel.in-flight-kept"],
    },
    Situation {
        id: "forged-call",
        what: "a rogue session called a fenced function with forged or stale terms",
        rules: &[
            "holder.only-current-epoch-writes",
            "lease.renew-owner-epoch",
            "lease.release-owner-epoch",
            "result.claim-owner-revision-digest",
        ],
    },
];

/// Which situations each schedule reached.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coverage {
    pub schedules: u32,
    /// situation id -> schedules that reached it.
    pub situations: BTreeMap<String, u32>,
}

impl Coverage {
    pub fn add(&mut self, reached: &BTreeSet<&'static str>) {
        self.add_names(reached.iter().copied());
    }

    /// Count one schedule that reached the situations `reached`.
    pub fn add_names<'a>(&mut self, reached: impl IntoIterator<Item = &'a str>) {
        self.schedules += 1;
        for s in reached {
            *self.situations.entry(s.to_string()).or_default() += 1;
        }
    }

    /// The coverage of the played schedules `runs`.
    pub fn of(runs: &[super::CaseRun]) -> Coverage {
        let mut c = Coverage::default();
        for r in runs {
            c.add_names(r.reached.iter().map(String::as_str));
        }
        c
    }

    /// Per rule of the catalogue: how many schedules reached one of its situations, counted as the
    /// largest count among its situations (a lower bound: a schedule that reached two of them is
    /// counted once, and schedules reaching different ones are not added up).
    pub fn per_rule(&self) -> Vec<(&'static str, u32)> {
        catalogue::RULES
            .iter()
            .map(|r| {
                let n = SITUATIONS
                    .iter()
                    .filter(|s| s.rules.contains(&r.id))
                    .map(|s| self.situations.get(s.id).copied().unwrap_or(0))
                    .max()
                    .unwrap_or(0);
                (r.id, n)
            })
            .collect()
    }

    pub fn report(&self) -> String {
        let mut s = format!("coverage over {} schedules\n", self.schedules);
        let w = SITUATIONS.iter().map(|x| x.id.len()).max().unwrap_or(0);
        for x in SITUATIONS {
            let n = self.situations.get(x.id).copied().unwrap_or(0);
            let _ = writeln!(s, "  {:<w$} {n:>5}  {}", x.id, x.what);
        }
        let rules = self.per_rule();
        let reached = rules.iter().filter(|(_, n)| *n > 0).count();
        let _ = writeln!(s, "rules reached by a schedule: {reached}/{}", rules.len());
        let missing: Vec<&str> = rules.iter().filter(|(_, n)| *n == 0).map(|(id, _)| *id).collect();
        if !missing.is_empty() {
            let _ = writeln!(s, "rules no schedule reached (their experiments judge them): {}", missing.join(", "));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_situation_names_rules_of_the_catalogue() {
        for s in SITUATIONS {
            assert!(!s.rules.is_empty(), "{} names no rule", s.id);
            for r in s.rules {
                assert!(catalogue::RULES.iter().any(|x| x.id == *r), "{}: no rule {r}", s.id);
            }
        }
    }

    #[test]
    fn a_rule_is_counted_when_a_situation_of_it_was_reached() {
        let mut c = Coverage::default();
        c.add(&["late-result"].into_iter().collect());
        let per: BTreeMap<_, _> = c.per_rule().into_iter().collect();
        assert_eq!(per["ledger.settled-final"], 1);
        assert_eq!(per["lease.renew-unexpired"], 0);
        assert!(c.report().contains("lease.renew-unexpired"));
    }
}
