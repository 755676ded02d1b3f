//! Trace validation on every row: the row's committed history (the oracle's commits) is checked
//! to be a behaviour of the protocol's model (`fenceproof_model::trace`), beside the rule checks
//! and independent of them. The timeline says what the environment did (a moved server clock, a
//! restore or promotion); the harness's own sessions are the environment's steps. The report,
//! with the model transitions the row exercised, is saved as `trace.json` in the row's folder.

use std::path::Path;

use fenceproof_harness::check::callers::{Caller, Callers};
use fenceproof_harness::check::rule::RuleRef;
use fenceproof_harness::check::Check;
use fenceproof_harness::record::oracle::CommitRow;
use fenceproof_harness::record::timeline::Entry;
use fenceproof_model::config::Capability as ModelCapability;
use fenceproof_model::trace::{self, Call, Change, Env, Report, Table};

/// The checker's name (the rule catalogue links the rules the model judges over every history to it).
pub const TRACE: &str = "every committed change is a step of the protocol's model";

/// The faults after which rows may lose committed changes (the history needs a hidden restore).
const ROLLBACK_FAULTS: &[&str] = &["restore", "promote", "failover"];

/// The timeline's words for a standby's promotion or the old primary's fencing ...
const PROMOTION_FAULTS: &[&str] = &["promote", "failover", "switchover", "fence"];

/// ... and what a failover's steps act on (a standby, a Patroni cluster).
const PROMOTION_TARGETS: &[&str] = &["standby", "patroni", "old primary"];

/// The oracle's rows as the model's trace reads them.
pub fn changes(rows: &[CommitRow]) -> Vec<Change> {
    rows.iter()
        .map(|r| Change {
            seq: r.seq,
            xid: r.xid.clone(),
            table: Table::of(&r.table_name),
            op: r.op.clone(),
            writer: r.writer.clone(),
            began: r.began_at.unwrap_or(r.committed_at).timestamp_micros(),
            at: r.committed_at.timestamp_micros(),
            old: r.old_row.clone(),
            new: r.new_row.clone(),
        })
        .collect()
}

/// The resources the fake tools created for a worker process of the row (their ledger's
/// `created` entries, `at` in seconds); a creation the harness made itself, or whose caller the
/// tools could not name, is not a worker's call.
pub fn calls(ledger: &[serde_json::Value], callers: &Callers) -> Vec<Call> {
    ledger
        .iter()
        .filter(|e| e["kind"] == "created" && matches!(callers.of(e), Caller::Owner(_)))
        .filter_map(|e| {
            let at: f64 = e["at"].as_str()?.parse().ok()?;
            Some(Call { operation_id: e["operation_id"].as_str()?.to_string(), at: (at * 1e6).round() as i64 })
        })
        .collect()
}

/// The fake tools' capabilities, as the model names them.
fn capabilities() -> std::collections::BTreeMap<String, ModelCapability> {
    use fenceproof_fake_tools::tools::{Capability, TOOLS};
    TOOLS
        .iter()
        .map(|(name, c)| {
            let m = match c {
                Capability::IdempotencyKey => ModelCapability::Idempotent,
                Capability::DeterministicId => ModelCapability::DeterministicId,
                Capability::OperationQuery => ModelCapability::Query,
                Capability::Neither => ModelCapability::None,
            };
            (name.to_string(), m)
        })
        .collect()
}

/// The environment of a row: the harness's sessions, and what its faults did to clock and rows.
pub fn env(timeline: &[Entry], environment: &[String]) -> Env {
    let faults: Vec<&str> = timeline.iter().filter_map(|e| e.fault.as_ref()).map(|f| f.name.as_str()).collect();
    let actions = timeline.iter().map(|e| e.action.as_str());
    let mut control = vec![crate::ctx::CONTROL.to_string()];
    control.extend(environment.iter().cloned());
    Env {
        control,
        control_prefixes: vec![crate::ctx::CONTROL_PLANE_PREFIX.to_string()],
        clock_moved_back: clock_moved_back(timeline),
        capabilities: capabilities(),
        calls: Vec::new(),
        shared_clock: false,
        rows_may_roll_back: actions
            .chain(faults.iter().copied())
            .any(|a| ROLLBACK_FAULTS.iter().any(|f| a.contains(f))),
        promoted: timeline.iter().any(|e| {
            PROMOTION_FAULTS.iter().any(|f| e.action.contains(f)) || PROMOTION_TARGETS.contains(&e.target.as_str())
        }),
    }
}

/// Whether a server's clock may have moved back under its history, so that a statement's clock
/// reading no longer lies between its transaction's start and commit. A clock set on a server
/// started with it (`"fresh"`) and then moved only forward, between frozen instants, moved nothing
/// back; any other setting (an offset, a jump, a clock set under a running history) is taken to
/// have. The heal of a fresh server's clock comes after its history (the server stops).
fn clock_moved_back(timeline: &[Entry]) -> bool {
    use fenceproof_harness::record::timeline::FaultStep;
    let instant = |e: &Entry| {
        let at = e.detail.get("at").and_then(serde_json::Value::as_str)?;
        chrono::NaiveDateTime::parse_from_str(at, "%Y-%m-%d %H:%M:%S%.f").ok()
    };
    let mut frozen = None;
    for e in timeline {
        let Some(f) = e.fault.as_ref().filter(|f| f.name == "server-clock") else { continue };
        match f.step {
            FaultStep::Inject if e.detail.get("fresh") == Some(&serde_json::Value::Bool(true)) => frozen = instant(e),
            FaultStep::Inject => return true,
            FaultStep::Change => match (frozen, instant(e)) {
                (Some(was), Some(now)) if now >= was => frozen = Some(now),
                _ => return true,
            },
            _ => {}
        }
    }
    false
}

/// Validates the row's history; saves `trace.json` in `dir`; the check that reports it.
/// `shared_clock`: the server runs on this host (the tools' clock is the database's).
pub fn judge(
    dir: &Path,
    rows: &[CommitRow],
    timeline: &[Entry],
    environment: &[String],
    shared_clock: bool,
) -> std::io::Result<Check> {
    let ledger = fenceproof_harness::record::ledger::entries(&dir.join("tools-ledger.jsonl")).unwrap_or_default();
    judge_with_ledger(dir, rows, timeline, environment, shared_clock, &ledger)
}

/// Where a row's trace validation is saved in its folder; a row with a second database saves that
/// one's as `trace-<name>.json` beside it ([`judge_other`]), and coverage reads both.
pub const SAVED: &str = "trace.json";

/// [`judge`], with the tools' ledger entries given (a schedule keeps its ledger elsewhere).
pub fn judge_with_ledger(
    dir: &Path,
    rows: &[CommitRow],
    timeline: &[Entry],
    environment: &[String],
    shared_clock: bool,
    ledger: &[serde_json::Value],
) -> std::io::Result<Check> {
    let report = validated(rows, timeline, environment, shared_clock, ledger);
    std::fs::write(dir.join(SAVED), serde_json::to_string_pretty(&saved(&report)).expect("json"))?;
    Ok(check(&report))
}

/// The history of `rows` validated against the model, with the calls of the tools' `ledger` (a
/// faked server clock is not the tools' clock).
fn validated(
    rows: &[CommitRow],
    timeline: &[Entry],
    environment: &[String],
    shared_clock: bool,
    ledger: &[serde_json::Value],
) -> Report {
    let mut env = env(timeline, environment);
    env.calls = calls(ledger, &Callers::from_timeline(timeline));
    let faked = timeline.iter().any(|e| e.fault.as_ref().is_some_and(|f| f.name == "server-clock"));
    env.shared_clock = shared_clock && !faked;
    trace::validate(&changes(rows), &env)
}

/// The transitions of the model the history of `rows` takes (trace validation's classes), for a
/// row that asks mid-run what its histories reached so far.
pub fn transitions(
    rows: &[CommitRow],
    timeline: &[Entry],
    environment: &[String],
    shared_clock: bool,
    ledger: &[serde_json::Value],
) -> std::collections::BTreeSet<String> {
    let report = validated(rows, timeline, environment, shared_clock, ledger);
    report.steps.iter().filter_map(|s| s.transition()).collect()
}

/// Trace validation of another database of a row (named `name`) whose processes called tools of
/// their own (`ledger`), saved as `trace-<name>.json` beside the row's.
pub fn judge_named(
    dir: &Path,
    name: &str,
    rows: &[CommitRow],
    timeline: &[Entry],
    environment: &[String],
    shared_clock: bool,
    ledger: &[serde_json::Value],
) -> std::io::Result<Check> {
    let report = validated(rows, timeline, environment, shared_clock, ledger);
    let file = dir.join(format!("trace-{name}.json"));
    std::fs::write(file, serde_json::to_string_pretty(&saved(&report)).expect("json"))?;
    let mut c = check(&report);
    c.evidence = format!("{name} database: {}", c.evidence);
    Ok(c)
}

/// Trace validation of a second database of a row (named `name`), saved as `trace-<name>.json`:
/// its own history, with the tools' creations left out (the row's history judges them).
pub fn judge_other(
    dir: &Path,
    name: &str,
    rows: &[CommitRow],
    environment: &[String],
    shared_clock: bool,
) -> std::io::Result<Check> {
    judge_named(dir, name, rows, &[], environment, shared_clock, &[])
}

fn saved(r: &Report) -> serde_json::Value {
    let transitions: std::collections::BTreeSet<String> = r.steps.iter().filter_map(|s| s.transition()).collect();
    serde_json::json!({
        "holds": r.holds(),
        "transactions": r.transactions,
        "explained": r.explained,
        "environment": r.environment,
        "rollbacks": r.rollbacks,
        "time_judged": r.time_judged,
        "unexplained": r.unexplained,
        "transitions": transitions,
        "steps": r.steps,
    })
}

fn check(r: &Report) -> Check {
    let time =
        if r.time_judged { "times by the database's clock" } else { "times not judged: the server's clock moved" };
    match r.unexplained.first() {
        None => Check::pass(
            TRACE,
            format!(
                "{} changes in {} transactions explained by model actions, {} by the environment{}; {time}",
                r.explained,
                r.transactions,
                r.environment,
                if r.rollbacks > 0 {
                    format!(", {} lost to a restore or promotion", r.rollbacks)
                } else {
                    String::new()
                }
            ),
        ),
        Some(u) => {
            let more = r.unexplained.len() - 1;
            let more = if more > 0 { format!(" (and {more} more unexplained)") } else { String::new() };
            let at = if u.seq > 0 { format!("commit #{}", u.seq) } else { "the tools' ledger".to_string() };
            let cited = (u.seq > 0).then_some(u.seq);
            // The model's findings still print some values with `{:?}` (model/src/trace).
            let said =
                fenceproof_harness::check::evidence::unwrapped(&format!("{at}: {}; {}{more}", u.observed, u.allowed));
            let mut c = Check::fail(TRACE, said).citing(cited);
            // The rules the model names for the finding, not the others this check judges when it
            // passes, which held.
            // (By id: the runner, which reads the catalogue, fills in each rule's section and words.)
            c.rules = u
                .rules
                .iter()
                .map(|id| RuleRef { id: id.to_string(), section: String::new(), statement: String::new() })
                .collect();
            c
        }
    }
}

/// Which judges decide a row's verdict (`verify --judge`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Judging {
    /// The rule checks and trace validation, side by side (the default).
    #[default]
    Both,
    /// The rule checks alone.
    Rules,
    /// Trace validation alone (to measure what it catches by itself).
    Trace,
}

impl Judging {
    pub fn parse(s: &str) -> Option<Judging> {
        match s {
            "both" => Some(Judging::Both),
            "rules" => Some(Judging::Rules),
            "trace" => Some(Judging::Trace),
            _ => None,
        }
    }

    /// Whether trace validation runs.
    pub fn trace(self) -> bool {
        self != Judging::Rules
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fenceproof_model::trace::Unexplained;

    fn finding(rules: Vec<&'static str>) -> Report {
        let u = Unexplained {
            seq: 7,
            writer: "b".into(),
            observed: "b took the lease".into(),
            allowed: "acquire: not enabled".into(),
            tried: Vec::new(),
            rules,
        };
        Report { transactions: 3, unexplained: vec![u], ..Report::default() }
    }

    fn clock(step: fenceproof_harness::record::timeline::FaultStep, detail: serde_json::Value) -> Entry {
        use fenceproof_harness::record::timeline::FaultMark;
        Entry {
            at_ms: 0.0,
            wall: chrono::Utc::now(),
            actor: "harness".into(),
            action: "clock_set".into(),
            target: "database".into(),
            detail,
            fault: Some(FaultMark { name: "server-clock".into(), step, began_ms: 0.0 }),
        }
    }

    /// Time stays judged on a server started with a frozen clock that only moves forward; a clock
    /// moved back, offset or set under a running history leaves it unjudged.
    #[test]
    fn only_a_clock_that_may_have_moved_back_leaves_time_unjudged() {
        use fenceproof_harness::record::timeline::FaultStep::{Change, Heal, Inject};
        use serde_json::json;
        let fresh = |at: &str| clock(Inject, json!({"at": at, "fresh": true}));
        let to = |at: &str| clock(Change, json!({"at": at}));
        let forward = [fresh("2030-01-01 00:00:00"), to("2030-01-01 00:00:01"), clock(Heal, json!({}))];
        assert!(!clock_moved_back(&forward));
        assert!(clock_moved_back(&[fresh("2030-01-01 00:00:01"), to("2030-01-01 00:00:00")]));
        assert!(clock_moved_back(&[clock(Inject, json!({"at": "2030-01-01 00:00:00"}))]), "set under a history");
        assert!(clock_moved_back(&[fresh("+0"), to("-60s")]), "an offset jump");
        assert!(!clock_moved_back(&[fresh("-1h")]), "a fresh server's clock behind real time");
    }

    /// A finding names the rules the model gives for it, as the catalogue states them, so the
    /// report's root line names the rule that broke rather than every rule trace validation judges.
    #[test]
    fn a_finding_carries_the_rules_the_model_names() {
        let c = check(&finding(vec!["lease.acquire-free-or-expired"]));
        assert!(!c.passed());
        let ids: Vec<&str> = c.rules.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["lease.acquire-free-or-expired"]);
        assert!(c.evidence.starts_with("commit #7: b took the lease"), "{}", c.evidence);
        assert!(check(&finding(Vec::new())).rules.is_empty(), "no rule named by the model, none invented");
    }
}
