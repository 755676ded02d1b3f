//! Randomized schedules: proptest generates sequences of operations for several worker processes
//! (acquire, renew, save, release, pause, resume, kill, expire, cancel, plan, dispatch, reconcile,
//! advance); each is played against a fresh database and judged by the global invariants. A
//! failing schedule is shrunk, saved, and printed with its seed and a command that replays it.

pub mod exec;
pub mod ops;

use std::path::PathBuf;

use fenceproof_harness::check::Check;
use fenceproof_harness::HarnessError;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde::Serialize;

use crate::runner::Session;
use ops::Op;

/// At most this many shrink steps (each one replays a schedule).
pub const MAX_SHRINK_STEPS: u32 = 48;

#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    pub seed: String,
    pub case: u32,
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
    pub failure: Option<Failure>,
}

/// Play one schedule in a fresh database; the failed checks (empty when it held) and the log.
pub async fn play(
    session: &mut Session,
    label: &str,
    schedule: &[Op],
    worker_args: &[String],
) -> Result<(Vec<Check>, Vec<String>), HarnessError> {
    let ctx = session.context(label, "schedule", worker_args).await?;
    let mut exec = exec::Exec::new(&ctx).await?;
    for op in schedule {
        exec.apply(op).await?;
    }
    let (checks, log) = exec.finish().await?;
    ctx.timeline.save(&ctx.dir.join("timeline.jsonl"))?;
    std::fs::write(ctx.dir.join("schedule.json"), serde_json::to_string_pretty(schedule).expect("json"))?;
    std::fs::write(ctx.dir.join("log.txt"), log.join("\n"))?;
    std::fs::write(ctx.dir.join("checks.json"), serde_json::to_string_pretty(&checks).expect("json"))?;
    ctx.pool.close().await;
    Ok((checks.into_iter().filter(|c| !c.passed()).collect(), log))
}

fn rng(seed: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = (seed.rotate_left(i as u32 * 8) & 0xff) as u8 ^ i as u8;
    }
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

/// Generate and play `cases` schedules from `seed`; shrink and save the first failure.
/// `replay_args` are the extra command-line arguments a replay needs (worker binary, mutant).
pub async fn run(
    session: &mut Session,
    cases: u32,
    seed: u64,
    worker_args: &[String],
    replay_args: &str,
) -> Result<Summary, HarnessError> {
    let mut runner = TestRunner::new_with_rng(Config { failure_persistence: None, ..Config::default() }, rng(seed));
    let strategy = ops::schedule();
    let mut operations = 0;
    for case in 1..=cases {
        let mut tree =
            strategy.new_tree(&mut runner).map_err(|e| HarnessError::Other(format!("generating a schedule: {e}")))?;
        let schedule = tree.current();
        operations += schedule.len();
        let (failed, log) = play(session, &format!("case-{case}"), &schedule, worker_args).await?;
        eprintln!(
            "schedule {case}/{cases}: {} operations, {}",
            schedule.len(),
            if failed.is_empty() { "invariants hold" } else { "INVARIANT BROKEN" }
        );
        if failed.is_empty() {
            continue;
        }
        // Shrink: simplify while it still fails, complicate back when it passes.
        let mut best = (schedule, failed, log);
        let mut steps = 0;
        if tree.simplify() {
            while steps < MAX_SHRINK_STEPS {
                steps += 1;
                let candidate = tree.current();
                let (failed, log) =
                    play(session, &format!("case-{case}-shrink-{steps}"), &candidate, worker_args).await?;
                if failed.is_empty() {
                    if !tree.complicate() {
                        break;
                    }
                } else {
                    best = (candidate, failed, log);
                    if !tree.simplify() {
                        break;
                    }
                }
            }
        }
        let saved_to = session.run.path.join("schedule-failure.json");
        std::fs::write(&saved_to, serde_json::to_string_pretty(&best.0).expect("json"))?;
        let failure = Failure {
            seed: format!("{seed:#x}"),
            case,
            replay: format!("fenceproof schedules --replay {}{replay_args}", saved_to.display()),
            schedule: best.0,
            failed_checks: best.1,
            log: best.2,
            saved_to,
        };
        return Ok(Summary { seed: format!("{seed:#x}"), cases: case, operations, failure: Some(failure) });
    }
    Ok(Summary { seed: format!("{seed:#x}"), cases, operations, failure: None })
}
