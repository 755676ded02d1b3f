//! `fenceproof schedules`: generate random operation schedules, play each against a fresh
//! database and check the global invariants; a failure is shrunk, saved and replayable (or replay
//! a saved schedule, N times).

use std::path::{Path, PathBuf};
use std::time::Duration;

use fenceproof_harness::report::exit;
use fenceproof_mutants::schedules::starved::{self, Measured, Player, SessionPlayer};
use fenceproof_mutants::schedules::{self, ops::Op, Budget};
use fenceproof_scenarios::runner::{self, VerifyOptions};

use crate::cmd::Print;
use crate::fail::harness_failed;
use crate::server::{Deployment, ServerArgs};

/// Generate random operation schedules for several workers, play each against a fresh
/// database, and check the global invariants; a failure is shrunk, saved and replayable.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// How many schedules to generate.
    #[arg(long, default_value_t = 8)]
    cases: u32,
    /// Instead of --cases: generate schedules for this many seconds.
    #[arg(long)]
    budget_s: Option<u64>,
    /// With --replay: play it this many times; a verdict that changes is reported (exit 3).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    repeat: u32,
    /// Seed (decimal or 0x-hex); random when absent. Printed either way.
    #[arg(long)]
    seed: Option<String>,
    /// Play only the K-th of N deterministic shares of the cases (case c when (c - 1) % N ==
    /// K - 1), e.g. 2/4: the shards of one --seed and --cases, run anywhere, join into the
    /// unsharded run's report with `merge`.
    #[arg(long, requires = "seed", conflicts_with = "replay")]
    shard: Option<String>,
    /// Steer the generator toward the model transitions no case has reached yet: each case's
    /// weights follow what the earlier cases reached (recorded per case in schedules.json; every
    /// case's schedule.json replays it with --replay).
    #[arg(long, conflicts_with_all = ["shard", "replay"])]
    steer: bool,
    /// Play this saved schedule (JSON) once instead of generating.
    #[arg(long)]
    replay: Option<PathBuf>,
    /// The worker binary to test.
    #[arg(long)]
    worker_bin: Option<PathBuf>,
    /// Run the workers as this mutant (needs a mutants build of the worker).
    #[arg(long)]
    mutant: Option<String>,
    #[command(flatten)]
    out: crate::cmd::output::Output,
    #[command(flatten)]
    server: ServerArgs,
}

/// Replay `schedule` `repeat` times; exit 1 when it fails, 3 when the verdict changed between
/// replays (a replay must give the same verdict every time). With `--json`, one document at the end.
async fn replay(
    session: &mut runner::Session,
    schedule: &[Op],
    worker_args: &[String],
    repeat: u32,
    print: Print,
) -> u8 {
    let mut player = SessionPlayer { session, worker_args };
    let mut measured = Vec::new();
    for i in 1..=repeat {
        let m = match player.play(&format!("replay-{i}"), schedule).await {
            Ok(m) => m,
            Err(e) => return harness_failed(e),
        };
        if !print.json {
            out!("{}", print.text(&replay_text(&m.played, i, repeat)));
        }
        measured.push(m);
    }
    let replays = match again_where_starved(&mut player, schedule, measured).await {
        Ok(r) => r,
        Err(e) => return harness_failed(e),
    };
    let verdicts: Vec<Vec<&str>> = replays.iter().map(|p| p.failed.iter().map(|c| c.name.as_str()).collect()).collect();
    let deterministic = verdicts.windows(2).all(|w| w[0] == w[1]);
    if print.json {
        let v = serde_json::json!({
            "report": session.run.path,
            "repeat": repeat,
            "deterministic": deterministic,
            "log": replays[0].log,
            "replays": replays.iter().map(|p| serde_json::json!({"failed_checks": p.failed})).collect::<Vec<_>>(),
        });
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"));
    } else if !deterministic {
        outln!("the verdict changed between replays: this schedule is not deterministic");
    } else if repeat > 1 {
        outln!("{repeat} replays, the same verdict each time");
    }
    if !deterministic {
        exit::HARNESS
    } else if verdicts[0].is_empty() {
        exit::OK
    } else {
        exit::FAILED
    }
}

/// When some replays failed and others held, a replay that held while the machine was starved
/// (CPU pressure: its moment may not have been made, as the pool's load did to one replay in ten)
/// is played again alone ([`starved::again_while_starved`]), until it fails or holds on a machine
/// that was not starved. A FAIL is never replayed: it is proven from its evidence, whatever the load.
async fn again_where_starved(
    player: &mut SessionPlayer<'_>,
    schedule: &[Op],
    measured: Vec<Measured>,
) -> Result<Vec<schedules::Played>, fenceproof_harness::HarnessError> {
    let some_failed = measured.iter().any(|m| !m.played.failed.is_empty());
    let mut replays = Vec::new();
    for (i, m) in measured.into_iter().enumerate() {
        let m = if some_failed {
            let label = format!("replay-{}", i + 1);
            starved::again_while_starved(player, &label, schedule, m, starved::STARVED_REPLAYS).await?.0
        } else {
            m
        };
        replays.push(m.played);
    }
    Ok(replays)
}

/// Replay `i` of `repeat` as text: the first one's log and failed checks, and every one's verdict.
fn replay_text(played: &schedules::Played, i: u32, repeat: u32) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    if i == 1 {
        for l in &played.log {
            let _ = writeln!(s, "  {l}");
        }
        for c in &played.failed {
            let _ = writeln!(s, "FAILED {}: {}", c.name, c.evidence);
        }
    }
    let names: Vec<&str> = played.failed.iter().map(|c| c.name.as_str()).collect();
    let verdict =
        if names.is_empty() { "every check holds".to_string() } else { format!("FAILED {}", names.join("; ")) };
    let _ = writeln!(s, "replay {i}/{repeat}: {verdict}");
    s
}

/// What to play: a budget of generated schedules from a seed, or a saved schedule `repeat` times,
/// with the workers' extra arguments (`--mutant`) and those a replay line repeats.
struct Plan {
    budget: Budget,
    seed: u64,
    replay: Option<Vec<Op>>,
    repeat: u32,
    worker_args: Vec<String>,
    replay_args: String,
    print: Print,
}

pub async fn run(a: Args) -> u8 {
    let (opts, plan) = match plan(a) {
        Ok(p) => p,
        Err(code) => return code,
    };
    crate::interrupt::interruptible(play(opts, plan)).await
}

/// The runner's options and the plan, from the flags; a bad seed or schedule is a usage error.
fn plan(a: Args) -> Result<(VerifyOptions, Plan), u8> {
    let seed = crate::seed::or_random(a.seed.as_deref())?;
    let replay = match a.replay.as_ref().map(|p| read_schedule(p)) {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => {
            let path = a.replay.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
            return Err(crate::fail::usage(format!("cannot read the schedule {path}: {e}")));
        }
    };
    let mut replay_args = String::new();
    if let Some(w) = &a.worker_bin {
        replay_args.push_str(&format!(" --worker-bin {}", w.display()));
    }
    if let Some(m) = &a.mutant {
        replay_args.push_str(&format!(" --mutant {m}"));
    }
    let worker_args: Vec<String> = a.mutant.map(|m| vec!["--mutant".into(), m]).unwrap_or_default();
    let (k, n) = match a.shard.as_deref().map(fenceproof_mutants::sql::parse_shard) {
        None => (1, 1),
        Some(Ok(s)) => s,
        Some(Err(msg)) => return Err(crate::fail::usage(msg)),
    };
    let budget = match a.budget_s {
        Some(s) => Budget::time(Duration::from_secs(s)),
        None => Budget::cases(a.cases),
    }
    .sharded(k as u32, n as u32);
    let budget = if a.steer { budget.steered() } else { budget };
    a.server.check()?;
    let print = a.out.print();
    let opts = a.server.options(a.worker_bin.unwrap_or_else(runner::default_worker_bin), Deployment::default(), None);
    Ok((opts, Plan { budget, seed, replay, repeat: a.repeat, worker_args, replay_args, print }))
}

fn read_schedule(p: &Path) -> Result<Vec<Op>, String> {
    let text = std::fs::read_to_string(p).map_err(|e| e.to_string())?;
    serde_json::from_str(&text).map_err(|e| e.to_string())
}

/// Replay the saved schedule, or generate, play and shrink.
async fn play(opts: VerifyOptions, a: Plan) -> u8 {
    let mut session = match runner::Session::start(&opts).await {
        Ok(s) => s,
        Err(e) => return harness_failed(e),
    };
    let _ = session.run.mark_latest();
    if let Some(schedule) = &a.replay {
        return replay(&mut session, schedule, &a.worker_args, a.repeat, a.print).await;
    }
    let seed_line = if a.budget.steer {
        format!(
            "seed {:#x}, steered (rerun with --seed {:#x} --steer: the same cases while the earlier ones reach the same transitions)",
            a.seed, a.seed
        )
    } else {
        format!("seed {:#x} (rerun with --seed {:#x})", a.seed, a.seed)
    };
    if a.print.json || a.print.quiet {
        eprintln!("{seed_line}");
    } else {
        outln!("{seed_line}");
    }
    match schedules::run(&mut session, a.budget, a.seed, &a.worker_args, &a.replay_args, true, "").await {
        Ok(summary) => {
            let path = session.run.path.join("schedules.json");
            let _ = std::fs::write(&path, serde_json::to_string_pretty(&summary).expect("json"));
            let seen = summary.played.iter().flat_map(|r| r.transitions.iter().cloned()).collect();
            let coverage = fenceproof_scenarios::coverage::of_transitions(&session.run.path, &seen);
            let text = format!("{}{}\n", summary_text(&summary), fenceproof_scenarios::coverage::line(&coverage));
            crate::cmd::print_result(&summary, &text, &session.run.path, a.print);
            if summary.failure.is_none() {
                exit::OK
            } else {
                exit::FAILED
            }
        }
        Err(e) => harness_failed(e),
    }
}

/// The generated schedules as text: the coverage, and the verdict or the shrunk failure.
pub fn summary_text(summary: &schedules::Summary) -> String {
    use std::fmt::Write;
    let mut s = summary.coverage.report();
    let shards = if summary.shards.iter().any(|x| x != "1/1") {
        format!(", shards {}", summary.shards.join(", "))
    } else {
        String::new()
    };
    match &summary.failure {
        None => writeln!(
            s,
            "{} schedules, {} operations in {:.1}s: every check holds (seed {}{shards})",
            summary.cases,
            summary.operations,
            summary.duration_ms as f64 / 1000.0,
            summary.seed
        ),
        Some(f) => {
            let _ = writeln!(
                s,
                "schedule {} of seed {} failed a check; shrunk from {} to {} operations:",
                f.case,
                f.seed,
                f.original_len,
                f.schedule.len()
            );
            for l in &f.log {
                let _ = writeln!(s, "  {l}");
            }
            for c in &f.failed_checks {
                let _ = writeln!(s, "FAILED {}: {}", c.name, c.evidence);
            }
            writeln!(s, "replay: {}", f.replay)
        }
    }
    .expect("a String takes any text");
    s
}
