//! Randomized schedules: [`gen`] draws, per case, a swarm of operation weights and a sequence of
//! plain commands and composite faults ([`ops`]) for several worker processes; [`exec`] plays each
//! against a fresh database and judges it by every history checker; [`coverage`] counts the
//! situations reached per rule. A failing schedule is shrunk ([`shrink`]), saved, and printed with
//! its seed and a command that replays it.

pub mod bodies;
mod composite;
pub mod coverage;
mod crash_judge;
mod crash_plan;
pub mod exec;
pub mod gen;
mod lease_terms;
mod masking;
pub mod mutants;
pub mod ops;
mod retry_40001;
mod secret_plan;
pub mod shrink;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use fenceproof_harness::check::Check;
use fenceproof_harness::HarnessError;
use serde::Serialize;

use coverage::Coverage;
use fenceproof_scenarios::runner::Session;
use ops::Op;

#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    pub seed: String,
    pub case: u32,
    /// Operations of the schedule as generated, before shrinking.
    pub original_len: usize,
    pub schedule: Vec<Op>,
    pub failed_checks: Vec<Check>,
    pub log: Vec<String>,
    pub saved_to: PathBuf,
    pub replay: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub seed: String,
    pub cases: u32,
    pub operations: usize,
    pub duration_ms: u128,
    pub coverage: Coverage,
    pub failure: Option<Failure>,
}

/// One played schedule.
pub struct Played {
    /// The checks that failed (empty when every one held).
    pub failed: Vec<Check>,
    pub log: Vec<String>,
    pub reached: BTreeSet<&'static str>,
}

/// How much searching a run may do: at most `cases` schedules, and none started after `until`.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub cases: u32,
    pub until: Option<Instant>,
}

impl Budget {
    pub fn cases(cases: u32) -> Budget {
        Budget { cases, until: None }
    }

    pub fn time(limit: Duration) -> Budget {
        Budget { cases: u32::MAX, until: Some(Instant::now() + limit) }
    }

    fn spent(&self, case: u32) -> bool {
        case > self.cases || self.until.is_some_and(|u| Instant::now() >= u)
    }
}

/// A search's limit on each mutant: seconds of searching (what a loaded machine shortens: fewer
/// cases fit), or a number of cases (the same cases on any machine, from the seed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Seconds(Duration),
    Cases(u32),
}

impl Limit {
    /// The budget of one search starting now.
    pub fn start(self) -> Budget {
        match self {
            Limit::Seconds(d) => Budget::time(d),
            Limit::Cases(n) => Budget::cases(n),
        }
    }

    /// `300 s` or `40 cases`.
    pub fn describe(self) -> String {
        match self {
            Limit::Seconds(d) => format!("{} s", d.as_secs()),
            Limit::Cases(n) => format!("{n} cases"),
        }
    }
}

/// Play one schedule in a fresh database.
pub async fn play(
    session: &mut Session,
    label: &str,
    schedule: &[Op],
    worker_args: &[String],
) -> Result<Played, HarnessError> {
    let ctx = session.context(label, "schedule", worker_args).await?;
    std::fs::write(ctx.dir.join("schedule.json"), serde_json::to_string_pretty(schedule).expect("json"))?;
    let mut exec = exec::Exec::new(&ctx).await?;
    for op in schedule {
        if let Err(e) = exec.apply(op).await {
            // No verdict; keep what happened up to here as evidence.
            exec.log.push(format!("{} -> harness error: {e}", serde_json::to_string(op).expect("json")));
            std::fs::write(ctx.dir.join("log.txt"), exec.log.join("\n"))?;
            ctx.timeline.save(&ctx.dir.join("timeline.jsonl"))?;
            return Err(e);
        }
    }
    let reached = exec.reached.clone();
    let sent = exec.sent.clone();
    let (checks, log) = exec.finish().await?;
    ctx.timeline.save(&ctx.dir.join("timeline.jsonl"))?;
    std::fs::write(ctx.dir.join("history.json"), serde_json::to_string_pretty(&sent).expect("json"))?;
    std::fs::write(ctx.dir.join("log.txt"), log.join("\n"))?;
    std::fs::write(ctx.dir.join("checks.json"), serde_json::to_string_pretty(&checks).expect("json"))?;
    ctx.pool.close().await;
    Ok(Played { failed: checks.into_iter().filter(|c| !c.passed()).collect(), log, reached })
}

/// Generate and play schedules from `seed` within `budget`; save the first failure, shrunk when
/// `shrink_failure`.
/// `replay_args` are the extra command-line arguments a replay needs (worker binary, mutant).
pub async fn run(
    session: &mut Session,
    budget: Budget,
    seed: u64,
    worker_args: &[String],
    replay_args: &str,
    shrink_failure: bool,
    label: &str,
) -> Result<Summary, HarnessError> {
    let started = Instant::now();
    // Each schedule gets its own folder (and so its own tools' ledger), also across mutants:
    // `label` when given, else the named mutant's name.
    let prefix = if label.is_empty() {
        worker_args.windows(2).find(|a| a[0] == "--mutant").map(|a| format!("{}-", a[1])).unwrap_or_default()
    } else {
        format!("{label}-")
    };
    let mut operations = 0;
    let mut coverage = Coverage::default();
    let mut case = 0;
    while !budget.spent(case + 1) {
        case += 1;
        let (schedule, swarm) = gen::schedule(seed, case);
        operations += schedule.len();
        let played = play(session, &format!("{prefix}case-{case}"), &schedule, worker_args).await?;
        coverage.add(&played.reached);
        eprintln!(
            "schedule {case}: {} operations of {} kinds, {}",
            schedule.len(),
            swarm.enabled().len(),
            if played.failed.is_empty() { "every check holds".to_string() } else { "A CHECK FAILED".to_string() }
        );
        if played.failed.is_empty() {
            continue;
        }
        let original_len = schedule.len();
        let best = if shrink_failure {
            shrink::shrink(session, &format!("{prefix}case-{case}"), schedule, played, worker_args).await?
        } else {
            (schedule, played)
        };
        let saved_to = session.run.path.join("schedule-failure.json");
        std::fs::write(&saved_to, serde_json::to_string_pretty(&best.0).expect("json"))?;
        let failure = Failure {
            seed: format!("{seed:#x}"),
            case,
            original_len,
            replay: format!("fenceproof schedules --replay {}{replay_args}", saved_to.display()),
            schedule: best.0,
            failed_checks: best.1.failed,
            log: best.1.log,
            saved_to,
        };
        return Ok(Summary {
            seed: format!("{seed:#x}"),
            cases: case,
            operations,
            duration_ms: started.elapsed().as_millis(),
            coverage,
            failure: Some(failure),
        });
    }
    Ok(Summary {
        seed: format!("{seed:#x}"),
        cases: case,
        operations,
        duration_ms: started.elapsed().as_millis(),
        coverage,
        failure: None,
    })
}
