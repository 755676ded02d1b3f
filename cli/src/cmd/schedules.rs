//! `fenceproof schedules` (generate, play, shrink; or replay a saved schedule, N times) and
//! `fenceproof mutants --schedules` (the search alone against every named mutant).

use std::time::Duration;

use fenceproof_harness::report::exit;
use fenceproof_mutants::schedules::{self, ops::Op, Budget};
use fenceproof_scenarios::runner::{self, VerifyOptions};

/// Replay `schedule` `repeat` times; exit 1 when it fails, 3 when the verdict changed between
/// replays (a replay must give the same verdict every time).
async fn replay(session: &mut runner::Session, schedule: &[Op], worker_args: &[String], repeat: u32) -> u8 {
    let mut verdicts = Vec::new();
    for i in 1..=repeat {
        let played = match schedules::play(session, &format!("replay-{i}"), schedule, worker_args).await {
            Ok(p) => p,
            Err(e) => return crate::harness_failed(e),
        };
        if i == 1 {
            for l in &played.log {
                println!("  {l}");
            }
        }
        let names: Vec<String> = played.failed.iter().map(|c| c.name.clone()).collect();
        println!(
            "replay {i}/{repeat}: {}",
            if names.is_empty() { "every check holds".to_string() } else { format!("FAILED {}", names.join("; ")) }
        );
        if i == 1 {
            for c in &played.failed {
                println!("FAILED {}: {}", c.name, c.evidence);
            }
        }
        verdicts.push(names);
    }
    if verdicts.windows(2).any(|w| w[0] != w[1]) {
        println!("the verdict changed between replays: this schedule is not deterministic");
        return exit::HARNESS;
    }
    if repeat > 1 {
        println!("{repeat} replays, the same verdict each time");
    }
    if verdicts[0].is_empty() {
        exit::OK
    } else {
        exit::FAILED
    }
}

pub struct Args {
    pub budget: Budget,
    pub seed: u64,
    pub replay: Option<Vec<Op>>,
    pub repeat: u32,
    pub worker_args: Vec<String>,
    pub replay_args: String,
}

pub async fn run(opts: VerifyOptions, a: Args) -> u8 {
    let mut session = match runner::Session::start(&opts).await {
        Ok(s) => s,
        Err(e) => return crate::harness_failed(e),
    };
    let _ = session.run.mark_latest();
    if let Some(schedule) = &a.replay {
        return replay(&mut session, schedule, &a.worker_args, a.repeat).await;
    }
    println!("seed {:#x} (rerun with --seed {:#x})", a.seed, a.seed);
    match schedules::run(&mut session, a.budget, a.seed, &a.worker_args, &a.replay_args, true, "").await {
        Ok(summary) => {
            let path = session.run.path.join("schedules.json");
            let _ = std::fs::write(&path, serde_json::to_string_pretty(&summary).expect("json"));
            print!("{}", summary.coverage.report());
            match &summary.failure {
                None => {
                    println!(
                        "{} schedules, {} operations in {:.1}s: every check holds (seed {})",
                        summary.cases,
                        summary.operations,
                        summary.duration_ms as f64 / 1000.0,
                        summary.seed
                    );
                    exit::OK
                }
                Some(f) => {
                    println!(
                        "schedule {} of seed {} failed a check; shrunk from {} to {} operations:",
                        f.case,
                        f.seed,
                        f.original_len,
                        f.schedule.len()
                    );
                    for l in &f.log {
                        println!("  {l}");
                    }
                    for c in &f.failed_checks {
                        println!("FAILED {}: {}", c.name, c.evidence);
                    }
                    println!("replay: {}", f.replay);
                    exit::FAILED
                }
            }
        }
        Err(e) => crate::harness_failed(e),
    }
}

/// What `mutants --schedules` searches: the named mutants (some of them), or a selection of the
/// generated SQL mutants.
pub enum Target {
    Named(Option<Vec<String>>),
    Sql(fenceproof_mutants::sql::Selection),
}

/// `mutants --schedules [--sql]`: exit 0 when the search ran (survivors are reported, not failed:
/// the search is bounded; the experiments' kill matrix is the gate), unless `require_kills`.
pub async fn mutants(opts: VerifyOptions, target: Target, seed: u64, budget: Duration, require_kills: bool) -> u8 {
    crate::interruptible(async {
        let searched = match &target {
            Target::Named(only) => schedules::mutants::search(&opts, only.as_deref(), seed, budget).await,
            Target::Sql(sel) => schedules::mutants::search_sql(&opts, sel, seed, budget).await,
        };
        match searched {
            Ok((km, dir)) => {
                print!("{}", km.table());
                println!("report: {}", dir.display());
                if require_kills && km.killed() < km.rows.len() {
                    exit::FAILED
                } else {
                    exit::OK
                }
            }
            Err(e) => crate::harness_failed(e),
        }
    })
    .await
}
