//! What broke, for a person to read once: one line per broken rule, the consequences of a root
//! cause indented under it, each line a short sentence of what was observed (no raw JSON; the
//! whole evidence stays in the report).
//!
//! The grouping is decided from the data of one row, never across rows, and never from the
//! wording of its evidence (a check may say what it saw however it likes):
//! - a failed check's *commits* are the oracle sequence numbers it cites ([`Check::commits`]);
//! - failed checks of the same rule make one line;
//! - rules whose earliest named commit is the same make one root: the first is the root, the
//!   others print under it as `same commit #N`;
//! - a rule that names no commit follows from the row's root when the row has exactly one root
//!   with a commit and the rule was judged after that commit: a refused legal step carries the
//!   oracle's last commit at its refusal ([`Check::seen_at_seq`]); a check without it was judged
//!   when the row ended, after every commit. With two or more roots nothing is attributed.

use crate::check::evidence::balanced;
use crate::check::rule::RuleRef;
use crate::check::Check;

use super::ExperimentResult;

/// The failed checks of one rule (or of one check without a rule) in a row.
#[derive(Debug)]
pub struct RuleLine<'a> {
    /// The rules the checks judge, each once.
    pub rules: Vec<&'a RuleRef>,
    pub checks: Vec<&'a Check>,
    /// The earliest commit the checks cite.
    pub first_commit: Option<i64>,
}

/// A root cause with what follows from it.
#[derive(Debug)]
pub struct Root<'a> {
    pub line: RuleLine<'a>,
    /// Other rules broken by the same commit.
    pub same_commit: Vec<RuleLine<'a>>,
    /// Rules judged after the root's commit that name no commit of their own.
    pub follows: Vec<RuleLine<'a>>,
}

/// How long a printed line may be: the check names take up to [`NAMES`] (the first is never
/// cut), the observed sentence is cut to fit the rest.
pub const LINE: usize = 220;

/// How many rules a line names before the rest are counted (a state machine's check judges
/// many; the report lists them all).
pub const RULES: usize = 2;

/// How many characters the check names of one line take before the rest are counted.
pub const NAMES: usize = 70;

/// `names` joined with `; ` while they fit `max` characters (the first always), then `(+N more)`.
fn names_within(names: &[&str], max: usize) -> String {
    let mut s = names[0].to_string();
    for (i, n) in names.iter().enumerate().skip(1) {
        if s.chars().count() + n.chars().count() + 2 > max {
            s.push_str(&format!(" (+{} more)", names.len() - i));
            break;
        }
        s.push_str("; ");
        s.push_str(n);
    }
    s
}

/// Group a row's failed checks (see the module's doc).
pub fn grouped(r: &ExperimentResult) -> Vec<Root<'_>> {
    let mut lines: Vec<(RuleLine<'_>, Option<i64>)> = Vec::new();
    for c in r.broken_checks() {
        let key = c.rules.first().map(|r| r.id.as_str());
        let pos = lines.iter().position(|(l, _)| match key {
            Some(k) => l.rules.first().is_some_and(|r| r.id == k),
            None => l.rules.is_empty() && l.checks[0].name == c.name,
        });
        let first = c.commits.iter().copied().min();
        let (line, seen) = match pos {
            Some(p) => &mut lines[p],
            None => {
                lines.push((RuleLine { rules: Vec::new(), checks: Vec::new(), first_commit: None }, c.seen_at_seq));
                lines.last_mut().expect("pushed")
            }
        };
        for rule in &c.rules {
            if !line.rules.iter().any(|x| x.id == rule.id) {
                line.rules.push(rule);
            }
        }
        line.checks.push(c);
        line.first_commit = match (line.first_commit, first) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        *seen = match (*seen, c.seen_at_seq) {
            (Some(a), Some(b)) => Some(a.min(b)),
            _ => None,
        };
    }
    attribute(merged(lines))
}

/// A line whose rules all appear on a line that names a commit (and at most [`RULES`] rules, so
/// a state machine's check judging many absorbs no specific check) joins that line: one line per
/// broken rule, whichever check broke it first.
fn merged(mut lines: Vec<(RuleLine<'_>, Option<i64>)>) -> Vec<(RuleLine<'_>, Option<i64>)> {
    let mut i = 0;
    while i < lines.len() {
        let covering = (0..lines.len()).find(|&j| {
            j != i
                && lines[j].0.first_commit.is_some()
                && lines[j].0.rules.len() <= RULES
                && !lines[i].0.rules.is_empty()
                && lines[i].0.rules.iter().all(|r| lines[j].0.rules.iter().any(|x| x.id == r.id))
        });
        match covering {
            Some(j) => {
                let (line, _) = lines.remove(i);
                let into = if j > i { j - 1 } else { j };
                let target = &mut lines[into].0;
                target.checks.extend(line.checks);
                target.first_commit = match (target.first_commit, line.first_commit) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            None => i += 1,
        }
    }
    lines
}

/// Roots by their first commit, then the lines without one under the single root, or alone.
fn attribute(lines: Vec<(RuleLine<'_>, Option<i64>)>) -> Vec<Root<'_>> {
    let (mut with, without): (Vec<_>, Vec<_>) = lines.into_iter().partition(|(l, _)| l.first_commit.is_some());
    with.sort_by_key(|(l, _)| l.first_commit);
    let mut roots: Vec<Root<'_>> = Vec::new();
    for (line, _) in with {
        match roots.iter_mut().find(|r| r.line.first_commit == line.first_commit) {
            Some(root) => root.same_commit.push(line),
            None => roots.push(Root { line, same_commit: Vec::new(), follows: Vec::new() }),
        }
    }
    let single = (roots.len() == 1).then(|| roots[0].line.first_commit).flatten();
    for (line, seen) in without {
        match single {
            Some(commit) if seen.is_none_or(|s| s >= commit) => roots[0].follows.push(line),
            _ => roots.push(Root { line, same_commit: Vec::new(), follows: Vec::new() }),
        }
    }
    roots
}

/// The printed lines of a FAIL row: per root `FAILED <row> §… <rule>: <check> …: <observed>`,
/// then its consequences indented.
pub fn lines(r: &ExperimentResult) -> Vec<String> {
    let mut out = Vec::new();
    for root in grouped(r) {
        out.push(line(&format!("FAILED {} ", r.id), &root.line));
        for same in &root.same_commit {
            let commit = same.first_commit.unwrap_or_default();
            out.push(line(&format!("  ↳ same commit #{commit}: FAILED "), same));
        }
        for f in &root.follows {
            out.push(line("  ↳ follows from it: FAILED ", f));
        }
    }
    out
}

/// One rule's line: `head`, the rules, the check names, then the observed sentence cut to fit.
fn line(head: &str, l: &RuleLine<'_>) -> String {
    let mut rules: Vec<String> = l.rules.iter().take(RULES).map(|r| format!("§{} {}", r.section, r.id)).collect();
    if l.rules.len() > RULES {
        rules.push(format!("(+{} rules)", l.rules.len() - RULES));
    }
    let names: Vec<&str> = l.checks.iter().map(|c| c.name.as_str()).collect();
    let mut s = head.to_string();
    if !rules.is_empty() {
        s.push_str(&rules.join("; "));
        s.push(' ');
    }
    s.push_str(&names_within(&names, NAMES));
    let budget = LINE.saturating_sub(s.chars().count() + 2).max(40);
    let seen = observed(&telling(l).evidence, budget);
    if !seen.is_empty() {
        s.push_str(": ");
        s.push_str(&seen);
    }
    s
}

/// The check that says most about a row's first root cause (the first failed check when the
/// row has none).
pub fn root_check(r: &ExperimentResult) -> Option<&Check> {
    grouped(r).first().map(|root| telling(&root.line))
}

/// The check whose evidence says most about the line's first commit (`commit #9 by a at …` over
/// `commits #9..#9 in the window`): the longest first line among those citing it; else the first.
fn telling<'a>(l: &RuleLine<'a>) -> &'a Check {
    let first_line = |c: &Check| c.evidence.lines().next().unwrap_or("").len();
    l.checks
        .iter()
        .filter(|c| l.first_commit.is_some_and(|n| c.commits.contains(&n)))
        .max_by_key(|c| first_line(c))
        .unwrap_or(&l.checks[0])
}

/// `evidence` as a short sentence: its first line, with every JSON object a worker sent reduced to
/// its outcome (and detail), cut to `max` bytes. The checks render the values they saw as values
/// ([`crate::check::evidence::Shown`]); nothing here rewrites them.
pub fn observed(evidence: &str, max: usize) -> String {
    let first = evidence.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    super::one_line(&objects(first), max)
}

/// `text` with each `{…}` object reduced: a worker's answer to its outcome and detail, any other
/// JSON or debug object to `{…}`.
fn objects(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('{') {
        let Some(len) = balanced(&rest[at + 1..], '{', '}') else { break };
        let whole = &rest[at..at + len + 2];
        out.push_str(rest[..at].trim_end_matches("Object "));
        out.push_str(&summary(whole));
        rest = &rest[at + len + 2..];
    }
    out.push_str(rest);
    out
}

/// A JSON object as a few words: `outcome` (`: detail`) for an answer, else `{…}`; a short object
/// without quotes (a metric's labels) stays as it is.
fn summary(object: &str) -> String {
    if !object.contains('"') || (object.len() <= 40 && !object.contains(':')) {
        return object.to_string();
    }
    let Ok(v) = serde_json::from_str::<serde_json::Value>(object) else {
        return if object.len() <= 40 { object.to_string() } else { "{…}".to_string() };
    };
    match v["outcome"].as_str() {
        Some(o) => match v["detail"].as_str().filter(|d| !d.is_empty()) {
            Some(d) => format!("{o} ({})", super::one_line(d, 80)),
            None => o.to_string(),
        },
        None if object.len() <= 40 => object.to_string(),
        None => "{…}".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{invariants, Found};
    use crate::report::tests::row;
    use crate::report::Outcome;
    use crate::testkit::commit_rows::{commit_row, CommitRowBuilder};
    use serde_json::json;

    fn rule(id: &str) -> RuleRef {
        RuleRef { id: id.into(), section: "01".into(), statement: format!("{id} holds") }
    }

    /// A failed check of `rule_id` citing `commits`.
    fn failed(name: &str, rule_id: Option<&str>, evidence: &str, commits: &[i64]) -> Check {
        let mut c = Check::fail(name, evidence).citing(commits.iter().copied());
        c.rules.extend(rule_id.map(rule));
        c
    }

    /// What the report groups, without any sentence: per root its first commit and check names,
    /// then the names under it (same commit, follows).
    type Shape = (Option<i64>, Vec<String>, Vec<Vec<String>>, Vec<Vec<String>>);

    fn shape(r: &ExperimentResult) -> Vec<Shape> {
        let names = |l: &RuleLine<'_>| l.checks.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
        grouped(r)
            .iter()
            .map(|root| {
                (
                    root.line.first_commit,
                    names(&root.line),
                    root.same_commit.iter().map(names).collect(),
                    root.follows.iter().map(names).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn the_observed_sentence_has_no_raw_json() {
        let ev = r#"B save was set up legally and answered {"id":7,"event":"save","outcome":"invalid_state","detail":"run is running at revision 4"}"#;
        assert_eq!(
            observed(ev, 200),
            "B save was set up legally and answered invalid_state (run is running at revision 4)"
        );
        assert_eq!(observed(r#"x_total{reason="lease"} 0"#, 200), r#"x_total{reason="lease"} 0"#);
    }

    /// The invariants' checks of a stale commit (#9 by worker-a while worker-b held epoch 2), each
    /// carrying the rule named after it.
    fn stale_commit_checks() -> Vec<Check> {
        let rows = vec![commit_row(9, "agent_runs", "UPDATE")
            .by("worker-a")
            .under_lease("worker-b", 2)
            .change(json!({"revision": 3, "status": "running"}), json!({"revision": 4, "status": "succeeded"}))];
        let mut checks = invariants::all(&rows, &["ctl"]);
        checks.push(Check::fail("the final state is B's", "run succeeded by a"));
        for c in &mut checks {
            c.rules.push(rule(&c.name.clone()));
        }
        checks
    }

    /// Grouping reads the commits a check cites, never its sentence: every failed check's evidence
    /// reworded (to nothing numbered, or to a sentence naming another commit) groups the same.
    #[test]
    fn rewording_the_evidence_changes_no_grouping() {
        let checks = stale_commit_checks();
        let holder = checks.iter().find(|c| c.name == invariants::HOLDER).expect("the holder check");
        assert!(!holder.passed() && holder.commits == vec![9], "{holder:?}");
        assert!(holder.evidence.contains("while the lease was worker-b/epoch 2"), "values as values: {holder:?}");
        let before = row("S", Outcome::Fail, checks.clone(), None);
        let want = shape(&before);
        assert_eq!(want[0].0, Some(9), "{want:#?}");
        assert!(want[0].1.contains(&invariants::HOLDER.to_string()), "{want:#?}");
        assert!(want[0].3.iter().any(|l| l.contains(&"the final state is B's".to_string())), "{want:#?}");
        for reworded in ["something else entirely", "commit #1 by nobody; commits #2..#3; #4 UPDATE agent_runs"] {
            let mut other = checks.clone();
            for c in other.iter_mut().filter(|c| !c.passed()) {
                c.evidence = reworded.to_string();
            }
            assert_eq!(shape(&row("S", Outcome::Fail, other, None)), want, "evidence {reworded:?}");
        }
        // The data alone moves it: the same sentences citing another commit make another root.
        let mut moved = checks.clone();
        let one = moved.iter_mut().find(|c| c.name == invariants::HOLDER).expect("the holder check");
        one.commits = vec![4];
        assert_ne!(shape(&row("S", Outcome::Fail, moved, None)), want);
    }

    /// A checker's violations cite their commits, each once, in their order.
    #[test]
    fn found_violations_cite_their_commits() {
        let c = Check::from_found(
            "x",
            vec![Found::at(9, "commit #9"), Found::text("a tally"), Found::of([11, 9], "two")],
            "fine",
        );
        assert!(!c.passed());
        assert_eq!(c.commits, vec![9, 11]);
        assert_eq!(c.evidence, "commit #9; a tally; two");
        let ok = Check::from_found("x", Vec::new(), "fine");
        assert!(ok.passed() && ok.commits.is_empty());
        let json = serde_json::to_value(&ok).unwrap();
        assert!(json.get("commits").is_none(), "no commits, no field: {json}");
        let back: Check = serde_json::from_value(serde_json::to_value(&c).unwrap()).unwrap();
        assert_eq!(back.commits, vec![9, 11]);
        let old: Check =
            serde_json::from_value(json!({"name": "x", "verdict": "FAIL", "evidence": "commit #9"})).unwrap();
        assert!(old.commits.is_empty(), "a saved report without the field reads");
    }

    /// One stale commit breaks three rules; the worker's word, the final state and a refused legal
    /// step observed after it follow from it: one root.
    #[test]
    fn one_stale_commit_is_one_root_and_what_follows_is_indented() {
        let mut refused = failed(
            "a step the protocol must allow succeeds",
            Some("liveness.legal-step"),
            "B save answered {\"outcome\":\"conflict\"}",
            &[],
        );
        refused.seen_at_seq = Some(10);
        let checks = vec![
            failed("A's metrics count the rejected stale writes", Some("metrics.outcomes"), "rejected 0", &[]),
            failed(
                "nothing commits while only the stale A acts",
                Some("holder.only"),
                "commits #9..#9 in the window",
                &[9],
            ),
            failed("A is told lease_lost for every attempt", None, "save@current=ok", &[]),
            failed("worker-a commits nothing after #7", Some("holder.only"), "committed #9 UPDATE agent_runs", &[9]),
            failed("only the current lease holder commits run state", Some("commit.live"), "commit #9 by a", &[9]),
            refused,
            Check::pass("a passing check", "fine"),
        ];
        let r = row("X-row", Outcome::Fail, checks, None);
        let roots = grouped(&r);
        assert_eq!(roots.len(), 1, "{roots:#?}");
        assert_eq!(roots[0].line.rules[0].id, "holder.only");
        assert_eq!(roots[0].line.checks.len(), 2);
        assert_eq!(roots[0].same_commit.len(), 1);
        assert_eq!(roots[0].follows.len(), 3);
        let printed = lines(&r);
        assert_eq!(printed.len(), 5, "{printed:#?}");
        assert!(printed[0].starts_with("FAILED X-row §01 holder.only nothing commits"), "{printed:#?}");
        assert!(printed[1].starts_with("  ↳ same commit #9: FAILED §01 commit.live only the current"), "{printed:#?}");
        assert!(printed.iter().skip(1).all(|l| l.starts_with("  ↳ ") && l.contains(": FAILED ")), "{printed:#?}");
        assert!(printed[0].ends_with(": committed #9 UPDATE agent_runs"), "the telling sentence: {printed:#?}");
        assert!(
            printed.iter().any(|l| l.contains("  ↳ follows from it: FAILED §01 liveness.legal-step")
                && l.ends_with("B save answered conflict")),
            "{printed:#?}"
        );
        assert!(printed.iter().all(|l| l.chars().count() <= LINE + 10), "{printed:#?}");
    }

    /// A check of a rule already on the root's line joins that line.
    #[test]
    fn a_rule_on_the_roots_line_is_not_repeated() {
        let mut both = failed("only the holder commits", Some("holder.only"), "commit #9 by a", &[9]);
        both.rules.push(rule("commit.live"));
        let checks = vec![failed("the run is unchanged", Some("commit.live"), "run changed", &[]), both];
        let r = row("B", Outcome::Fail, checks, None);
        let printed = lines(&r);
        assert_eq!(printed.len(), 1, "{printed:#?}");
        assert!(
            printed[0].contains(
                "§01 holder.only; §01 commit.live only the holder commits; the run is unchanged: commit #9 by a"
            ),
            "{printed:#?}"
        );
    }

    /// A state machine's check judging many rules names two and counts the rest, and absorbs no
    /// specific check of one of them.
    #[test]
    fn a_check_of_many_rules_absorbs_no_specific_check() {
        let mut machine = failed("the ledger's state machine", Some("r1"), "commit #4 by d", &[4]);
        for r in ["r2", "r3", "claim.live", "r5"] {
            machine.rules.push(rule(r));
        }
        let specific =
            failed("a prepared operation of a finished run is not claimed", Some("claim.live"), "commit #4 by d", &[4]);
        let printed = lines(&row("W", Outcome::Fail, vec![machine, specific], None));
        assert_eq!(printed.len(), 2, "{printed:#?}");
        assert!(printed[0].contains("§01 r1; §01 r2; (+3 rules) the ledger's state machine"), "{printed:#?}");
        assert!(
            printed[1].contains("§01 claim.live a prepared operation of a finished run is not claimed"),
            "{printed:#?}"
        );
    }

    /// Two roots (two different first commits) attribute nothing; a refusal before the commit is
    /// its own root.
    #[test]
    fn two_roots_or_an_earlier_refusal_are_not_grouped() {
        let two = vec![
            failed("x", Some("r1"), "commit #5 by a", &[5]),
            failed("y", Some("r2"), "commit #8 by b", &[8]),
            failed("z", None, "the final state", &[]),
        ];
        assert_eq!(grouped(&row("R", Outcome::Fail, two, None)).len(), 3);
        let mut early = failed("a step the protocol must allow succeeds", Some("liveness.legal-step"), "refused", &[]);
        early.seen_at_seq = Some(3);
        let one = vec![failed("x", Some("r1"), "commit #5 by a", &[5]), early];
        assert_eq!(grouped(&row("R", Outcome::Fail, one, None)).len(), 2);
    }
}
