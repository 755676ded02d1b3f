//! Randomized schedules: [`gen`] draws, per case, a swarm of operation weights and a sequence of
//! plain commands and composite faults ([`ops`]) for several worker processes; [`exec`] plays each
//! against a fresh database and judges it by every history checker; [`coverage`] counts the
//! situations reached per rule, and trace validation the model transitions each case exercised
//! ([`steer`] feeds those back into the next case's weights under `--steer`). A failing schedule is
//! shrunk ([`shrink`]), saved, and printed with its seed and a command that replays it; a play that
//! held while the machine was starved is played again ([`starved`]).

pub mod bodies;
mod composite;
pub mod coverage;
mod crash_judge;
mod crash_plan;
pub mod exec;
pub mod gen;
mod lease_terms;
mod masking;
pub mod merge;
pub mod mutants;
pub mod ops;
mod retry_40001;
mod secret_plan;
pub mod shrink;
pub mod starved;
pub mod steer;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use fenceproof_harness::check::Check;
use fenceproof_harness::HarnessError;
use serde::{Deserialize, Serialize};

use coverage::Coverage;
use fenceproof_scenarios::runner::Session;
use ops::Op;

#[derive(Debug, Clone, Serialize, Deserialize)]
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

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    pub seed: String,
    /// How many schedules were played (by this shard).
    pub cases: u32,
    pub operations: usize,
    pub duration_ms: u128,
    pub coverage: Coverage,
    pub failure: Option<Failure>,
    /// The model transitions the cases' histories exercised together (trace validation).
    #[serde(default)]
    pub model: fenceproof_scenarios::coverage::Coverage,
    /// Whether the generator was steered toward unreached transitions (`--steer`).
    #[serde(default)]
    pub steered: bool,
    /// `K/N` of each shard this summary holds (`1/1`: an unsharded run).
    pub shards: Vec<String>,
    /// Each played schedule, in case order: what a merge of shards rebuilds the summary from.
    pub played: Vec<CaseRun>,
}

/// One played schedule, as the summary lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaseRun {
    pub case: u32,
    pub operations: usize,
    /// Every check held.
    pub held: bool,
    /// The coverage situations it reached.
    pub reached: Vec<String>,
    /// The model transitions its history exercised (trace validation).
    #[serde(default)]
    pub transitions: Vec<String>,
    /// Under `--steer`: the boost of each kind its swarm was drawn with ([`gen::steered`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub boosts: Vec<u32>,
}

/// One played schedule.
pub struct Played {
    /// The checks that failed (empty when every one held).
    pub failed: Vec<Check>,
    pub log: Vec<String>,
    pub reached: BTreeSet<&'static str>,
    /// The model transitions its history exercised (trace validation's classes).
    pub transitions: BTreeSet<String>,
}

/// How much searching a run may do: at most `cases` schedules, and none started after `until`;
/// of those, only the cases of its shard `K/N` (case c when (c - 1) % N == K - 1); with `steer`,
/// each case's weights steered by the transitions the earlier cases reached ([`steer`]).
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub cases: u32,
    pub until: Option<Instant>,
    pub shard: (u32, u32),
    pub steer: bool,
}

impl Budget {
    pub fn cases(cases: u32) -> Budget {
        Budget { cases, until: None, shard: (1, 1), steer: false }
    }

    pub fn time(limit: Duration) -> Budget {
        Budget { cases: u32::MAX, until: Some(Instant::now() + limit), shard: (1, 1), steer: false }
    }

    /// This budget's cases, only those of shard `k` of `n` (1-based).
    pub fn sharded(self, k: u32, n: u32) -> Budget {
        Budget { shard: (k, n), ..self }
    }

    /// This budget, steered toward unreached transitions.
    pub fn steered(self) -> Budget {
        Budget { steer: true, ..self }
    }

    fn spent(&self, case: u32) -> bool {
        case > self.cases || self.until.is_some_and(|u| Instant::now() >= u)
    }

    /// Whether case `case` (1-based) is this shard's.
    pub fn takes(&self, case: u32) -> bool {
        let (k, n) = self.shard;
        n > 0 && (case - 1) % n == k - 1
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
    let transitions = fenceproof_scenarios::coverage::exercised(&ctx.dir);
    ctx.timeline.save(&ctx.dir.join("timeline.jsonl"))?;
    std::fs::write(ctx.dir.join("history.json"), serde_json::to_string_pretty(&sent).expect("json"))?;
    std::fs::write(ctx.dir.join("log.txt"), log.join("\n"))?;
    std::fs::write(ctx.dir.join("checks.json"), serde_json::to_string_pretty(&checks).expect("json"))?;
    ctx.pool.close().await;
    Ok(Played { failed: checks.into_iter().filter(|c| !c.passed()).collect(), log, reached, transitions })
}

/// Generate and play schedules from `seed` within `budget` (its shard's cases only); save the
/// first failure, shrunk when `shrink_failure`.
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
    let mut steer = budget.steer.then(|| steer::Steer::new(fenceproof_scenarios::coverage::targets()));
    let mut runs = Vec::new();
    let mut case = 0;
    while !budget.spent(case + 1) {
        case += 1;
        if !budget.takes(case) {
            continue;
        }
        let boosts = steer.as_ref().map(steer::Steer::boosts).unwrap_or_default();
        let (schedule, swarm) = gen::steered(seed, case, &boosts);
        let played = play(session, &format!("{prefix}case-{case}"), &schedule, worker_args).await?;
        let new = steer.as_mut().map(|s| s.learn(&schedule.iter().map(Op::kind).collect(), &played.transitions));
        eprintln!(
            "schedule {case}: {} operations of {} kinds, {}{}",
            schedule.len(),
            swarm.enabled().len(),
            if played.failed.is_empty() { "every check holds".to_string() } else { "A CHECK FAILED".to_string() },
            new.map(|n| format!(" ({n} new transitions)")).unwrap_or_default()
        );
        runs.push(CaseRun {
            case,
            operations: schedule.len(),
            held: played.failed.is_empty(),
            reached: played.reached.iter().map(|s| s.to_string()).collect(),
            transitions: played.transitions.iter().cloned().collect(),
            boosts,
        });
        if played.failed.is_empty() {
            continue;
        }
        let label = format!("{prefix}case-{case}");
        let failure =
            failed(session, (seed, case, &label), schedule, played, (worker_args, replay_args), shrink_failure);
        let failure = Some(failure.await?);
        return Ok(Summary::of(seed, budget, runs, started.elapsed().as_millis(), failure));
    }
    Ok(Summary::of(seed, budget, runs, started.elapsed().as_millis(), None))
}

/// The failure of case `case` (labelled `label`): shrunk when `shrink_failure`, saved as a
/// replayable schedule, with the line that replays it.
async fn failed(
    session: &mut Session,
    (seed, case, label): (u64, u32, &str),
    schedule: Vec<Op>,
    played: Played,
    (worker_args, replay_args): (&[String], &str),
    shrink_failure: bool,
) -> Result<Failure, HarnessError> {
    let original_len = schedule.len();
    let best = if shrink_failure {
        shrink::shrink(session, label, schedule, played, worker_args).await?
    } else {
        (schedule, played)
    };
    let saved_to = session.run.path.join("schedule-failure.json");
    std::fs::write(&saved_to, serde_json::to_string_pretty(&best.0).expect("json"))?;
    Ok(Failure {
        seed: format!("{seed:#x}"),
        case,
        original_len,
        replay: format!("fenceproof schedules run --replay {}{replay_args}", saved_to.display()),
        schedule: best.0,
        failed_checks: best.1.failed,
        log: best.1.log,
        saved_to,
    })
}

impl Summary {
    /// The summary of the schedules `runs` played from `seed` within `budget`.
    fn of(seed: u64, budget: Budget, runs: Vec<CaseRun>, duration_ms: u128, failure: Option<Failure>) -> Summary {
        Summary {
            seed: format!("{seed:#x}"),
            cases: runs.len() as u32,
            operations: runs.iter().map(|r| r.operations).sum(),
            duration_ms,
            coverage: Coverage::of(&runs),
            model: model_coverage(&runs),
            steered: budget.steer,
            failure,
            shards: vec![format!("{}/{}", budget.shard.0, budget.shard.1)],
            played: runs,
        }
    }
}

/// The model transitions the played cases `runs` exercised together, against the model's.
pub fn model_coverage(runs: &[CaseRun]) -> fenceproof_scenarios::coverage::Coverage {
    let seen: BTreeSet<String> = runs.iter().flat_map(|r| r.transitions.iter().cloned()).collect();
    fenceproof_scenarios::coverage::count(&seen)
}
