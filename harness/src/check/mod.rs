//! Checkers: one per property, each returning a verdict with the evidence behind it.
//!
//! [`cancel`] judges that a run's cancel transaction cancels its prepared operations.
//! [`answers`] judges every worker's answers against what committed, in every row.
//! [`invariants`] holds the spec's global invariants (section 01) judged over the oracle rows, and
//! [`transitions`] its three state machines (lease, run, ledger) judged commit by commit; an
//! experiment adds its own assertions with [`Check::expect`] and friends. [`rule`] is the
//! shape of a rule of the spec (the scenarios crate's catalogue holds the rules). [`history`] judges the harness's own client history (what it
//! sent, what the worker answered) against the oracle, and [`remote`] the operation ledger against
//! the tools' ledger. [`intents`] judges registered intents (canonical digest, planned together with
//! their checkpoint). [`restore`] judges a restore from an old backup (history before and after it).
//! [`claims`] judges that no dispatcher's transaction spans a tool call (the tools' observations).
//! [`callers`] names the worker whose process made a tool call (the tools' record and the timeline).
//! [`crash_points`] judges the recovery after a crash between two durable steps of one command.
//! [`lease_terms`] judges that a lease commit's term is an asked TTL, within its transaction's span.
//! [`evidence`] is how a checker reports a violation with the commits it cites ([`Found`]) and
//! renders the values it saw.

pub mod after_loss;
pub mod answers;
pub mod audit;
pub mod callers;
pub mod cancel;
pub mod claims;
pub mod crash_points;
pub mod evidence;
pub mod history;
pub mod intents;
pub mod invariants;
pub mod lease_terms;
pub mod operation_ids;
pub mod remote;
pub mod restore;
pub mod rule;
pub mod serialization;
pub mod transitions;

use serde::{Deserialize, Serialize};

pub use evidence::{Found, Shown};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    Pass,
    Fail,
}

/// One checked property.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Check {
    pub name: String,
    pub verdict: Verdict,
    /// What was observed, in a line or two: the numbers behind the verdict, for a person.
    pub evidence: String,
    /// The oracle commits (sequence numbers) the evidence cites: the report groups root causes by
    /// them ([`crate::report::broken`]), never by the evidence's wording.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commits: Vec<i64>,
    /// The rules of the spec this check judges (filled in from the catalogue when the row ends).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<rule::RuleRef>,
    /// The oracle's last commit sequence number when this was observed, for a check recorded in
    /// the middle of a row (a refused legal step); `None` for a check judged when the row ended.
    /// The report groups consequences under the commit they follow ([`crate::report::broken`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seen_at_seq: Option<i64>,
}

impl Check {
    pub fn pass(name: impl Into<String>, evidence: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            verdict: Verdict::Pass,
            evidence: evidence.into(),
            commits: Vec::new(),
            rules: Vec::new(),
            seen_at_seq: None,
        }
    }

    pub fn fail(name: impl Into<String>, evidence: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            verdict: Verdict::Fail,
            evidence: evidence.into(),
            commits: Vec::new(),
            rules: Vec::new(),
            seen_at_seq: None,
        }
    }

    /// Pass when `ok`, with the same evidence either way.
    pub fn expect(name: impl Into<String>, ok: bool, evidence: impl Into<String>) -> Check {
        if ok {
            Check::pass(name, evidence)
        } else {
            Check::fail(name, evidence)
        }
    }

    /// A checker's verdict from the violations it found: pass with `clean` as evidence when there
    /// are none, else fail listing every one.
    pub fn from_violations(name: impl Into<String>, bad: Vec<String>, clean: impl Into<String>) -> Check {
        if bad.is_empty() {
            Check::pass(name, clean)
        } else {
            Check::fail(name, bad.join("; "))
        }
    }

    /// A checker's verdict from the violations it found: pass with `clean` as evidence when there
    /// are none, else fail listing every one, citing the commits they cite.
    pub fn from_found(name: impl Into<String>, found: Vec<Found>, clean: impl Into<String>) -> Check {
        if found.is_empty() {
            return Check::pass(name, clean);
        }
        let commits = evidence::distinct(found.iter().flat_map(|f| f.commits.iter().copied()));
        // When every violation names the rules it breaks, the check carries those alone (by id; the
        // runner fills in their words), not every rule its passing self stands for.
        let mut rules: Vec<&str> = Vec::new();
        if found.iter().all(|f| !f.rules.is_empty()) {
            for id in found.iter().flat_map(|f| f.rules.iter().copied()) {
                if !rules.contains(&id) {
                    rules.push(id);
                }
            }
        }
        let text: Vec<String> = found.into_iter().map(|f| f.text).collect();
        let mut c = Check::fail(name, text.join("; ")).citing(commits);
        c.rules = rules.into_iter().map(rule::RuleRef::id).collect();
        c
    }

    /// This check, citing `commits` as well (each once), whatever its verdict.
    pub fn citing(mut self, commits: impl IntoIterator<Item = i64>) -> Check {
        self.commits = evidence::distinct(self.commits.into_iter().chain(commits));
        self
    }

    /// Pass when `actual == expected`; the evidence shows both.
    pub fn equal<T: PartialEq + evidence::Shown>(name: impl Into<String>, actual: T, expected: T) -> Check {
        let ev = format!("observed {}, required {}", actual.shown(), expected.shown());
        Check::expect(name, actual == expected, ev)
    }

    pub fn passed(&self) -> bool {
        self.verdict == Verdict::Pass
    }
}
