//! Experiment Model-paths — the model drives your worker. The model's tours
//! (`model/worker_tours.json`: long paths that together take every transition of the coverage
//! denominator the worker contract can drive a worker to, a walk restricted to what the
//! contract's commands and fault points express), then the shortest path
//! (`model/worker_paths.json`) of each transition those histories missed, are played through the
//! worker under test, one run per path: each model process is a worker process of the binary under
//! test (and a dispatcher), the reconciler and the control plane are too, and each model action is
//! the command of the process that takes it ([`play`]). The history is the row's like any other:
//! trace validation judges every commit of it against the model, and the coverage counts what the
//! worker's own commits reached. After each grant the model holds live, a spare worker tries a
//! takeover the model refuses; each command the model refuses is also judged by the word it was
//! refused with, where the contract gives one.
//!
//! A step the worker refused where the model takes it stops its path, which is played once more
//! with terms five times as long (a short term may lapse early on a busy machine); a step it
//! answered ok where the model refuses it (on time by the database clock) is a finding; an
//! interleaving that this worker or database cannot be held in (a write that ignores its barrier,
//! a command that waits on a held transaction) is named and ends that path, no verdict on it.
//! `FENCEPROOF_MODEL_PATH` (tour names or transitions, comma-separated) plays those paths only.

mod lane;
mod lanes;
mod play;
mod wait;

use fenceproof_harness::check::Check;
use fenceproof_harness::HarnessError;
use fenceproof_model::action::Action;
use std::collections::{BTreeMap, BTreeSet};

use fenceproof_model::coverage::{self, WORKER_PATHS, WORKER_TOURS};

use crate::ctx::Ctx;
use crate::experiment::{Checks, Experiment, Judges, Need};
use crate::measured;
use lane::Who;
use play::PathReport;

pub const TITLE: &str = "The model drives your worker: its paths to every transition the worker contract can reach";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "Model-paths",
    title: TITLE,
    section: "11",
    needs: &[Need::ModelPaths],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

/// The name of its check: the worker's answers against the model's refusals.
pub const NO_REFUSED_STEP_ANSWERED_OK: &str = "the worker answered ok to no step the model refuses on its paths";

/// The name of its check of the refusals' words against the contract's.
pub const REFUSALS_ANSWER_THE_CONTRACTS_WORD: &str =
    "each command the model refuses on its paths was refused with the contract's word for it";

/// The environment variable that selects paths by their transition (comma-separated).
pub const ONLY_PATHS: &str = "FENCEPROOF_MODEL_PATH";

/// The least term of a grant a tick must see lapse.
const GRANT_FLOOR_MS: i64 = 150;

/// How many of the worker's measured round trips each step between a grant and its tick adds to
/// the grant's term, and the least it adds (a round trip measured without database work can read
/// 0 ms).
const STEP_ROUND_TRIPS: i64 = 4;
const STEP_FLOOR_MS: i64 = 20;

/// How much longer the terms are when a path that stopped is played again.
const AGAIN_LONGER: i64 = 5;

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let mut paths = selected()?;
    let mut lanes = lanes::open(ctx, paths.len()).await?;
    let c: &Ctx = ctx;
    let rt = measured::timed(c, lanes[0].get(c, Who::Slot(0)).await?).await?;
    let step_ms = ((rt.request().as_millis() as i64) * STEP_ROUND_TRIPS).max(STEP_FLOOR_MS);
    let grant = play::Grant { floor_ms: GRANT_FLOOR_MS, step_ms };
    let (mut reports, mut again) = side_by_side(c, &mut lanes, &paths, 0, grant).await?;
    let fallback = missed(&paths, &lanes::reached(c, &lanes).await?);
    let fell_back = fallback.len();
    if !fallback.is_empty() {
        let (more, a) = side_by_side(c, &mut lanes, &fallback, 2 * paths.len(), grant).await?;
        reports.extend(more);
        paths.extend(fallback);
        again += a;
    }
    let text = serde_json::to_string_pretty(&reports).map_err(|e| HarnessError::Other(e.to_string()))?;
    std::fs::write(ctx.dir.join("paths.json"), text)?;
    judge(ctx, &reports, again);
    ctx.note(format!(
        "{} lane(s) side by side; {fell_back} shortest path(s) played for what the tours' histories missed; a grant a tick \
         follows lasts {GRANT_FLOOR_MS} ms + {step_ms} ms per step before the tick (round trip {})",
        lanes.len(),
        rt.describe()
    ));
    lanes::close(ctx, lanes).await
}

/// `paths` shared out among the lanes and played side by side (run indices from `first`): the
/// reports in the order of `paths`, and how many were played again with longer terms.
async fn side_by_side(
    c: &Ctx,
    lanes: &mut [lane::Lane],
    paths: &[(String, Vec<Action>)],
    first: usize,
    grant: play::Grant,
) -> Result<(Vec<PathReport>, usize), HarnessError> {
    let n = lanes.len();
    let played = futures_util::future::join_all(lanes.iter_mut().enumerate().map(|(k, lane)| {
        let mine: Vec<(usize, &(String, Vec<Action>))> = paths.iter().enumerate().filter(|(i, _)| i % n == k).collect();
        lanes::play(c, lane, mine, grant, first, paths.len())
    }))
    .await;
    let mut reports: Vec<(usize, PathReport, usize)> = Vec::new();
    for r in played {
        reports.extend(r?);
    }
    reports.sort_by_key(|(i, _, _)| *i);
    let again: usize = reports.iter().map(|(_, _, a)| a).sum();
    Ok((reports.into_iter().map(|(_, r, _)| r).collect(), again))
}

/// The paths to play: the model's tours, then the shortest paths of the transitions no tour
/// takes (the spec's own steps); or the tours and paths `FENCEPROOF_MODEL_PATH` names (a tour by
/// its name, a path by its transition).
fn selected() -> Result<Vec<(String, Vec<Action>)>, HarnessError> {
    let (tours, paths) = (parsed(WORKER_TOURS, "worker_tours.json")?, parsed(WORKER_PATHS, "worker_paths.json")?);
    let Some(only) = std::env::var(ONLY_PATHS).ok().filter(|v| !v.trim().is_empty()) else {
        let taken: BTreeSet<String> = tours.values().flat_map(|t| coverage::reaches(t)).collect();
        let left = paths.into_iter().filter(|(k, _)| !taken.contains(k));
        return Ok(tours.into_iter().chain(left).collect());
    };
    let wanted = |k: &str| only.split(',').any(|t| t.trim() == k);
    let picked: Vec<_> = tours.into_iter().chain(paths).filter(|(k, _)| wanted(k)).collect();
    if picked.is_empty() {
        return Err(HarnessError::Other(format!(
            "{ONLY_PATHS} names no tour of model/worker_tours.json and no transition of model/worker_paths.json"
        )));
    }
    Ok(picked)
}

fn parsed(text: &str, file: &str) -> Result<BTreeMap<String, Vec<Action>>, HarnessError> {
    serde_json::from_str(text).map_err(|e| HarnessError::Other(format!("model/{file} does not parse: {e}")))
}

/// The shortest paths of the transitions the worker's paths take in the model that the histories
/// so far did not (`reached`, trace validation's classes of the lanes' commits): a tour that
/// stopped early, or whose history trace validation classes otherwise than the model (a refusal
/// changes only what a process believes), leaves them to their own paths.
fn missed(played: &[(String, Vec<Action>)], reached: &BTreeSet<String>) -> Vec<(String, Vec<Action>)> {
    let Ok(paths) = parsed(WORKER_PATHS, "worker_paths.json") else { return Vec::new() };
    let wanted: BTreeSet<String> = played.iter().flat_map(|(_, p)| coverage::reaches(p)).collect();
    paths
        .into_iter()
        .filter(|(k, _)| wanted.contains(k) && !reached.contains(k) && !played.iter().any(|(n, _)| n == k))
        .collect()
}

/// The check and the notes from the paths' reports.
fn judge(ctx: &mut Ctx, reports: &[PathReport], again: usize) {
    let refused: Vec<String> = reports
        .iter()
        .filter_map(|r| Some(format!("{}: {} (run {})", r.transition, r.refused_by_model.as_ref()?, r.run_id)))
        .collect();
    ctx.check(Check::expect(
        NO_REFUSED_STEP_ANSWERED_OK,
        refused.is_empty() && !reports.is_empty(),
        if refused.is_empty() {
            format!("{} paths played, no step the model refuses answered ok", reports.len())
        } else {
            format!("{} of {} paths: {}", refused.len(), reports.len(), refused.join("; "))
        },
    ));
    ctx.check(words_check(reports));
    for r in reports.iter().filter(|r| r.refused_by_model.is_some()).take(3) {
        let replay = format!("{ONLY_PATHS}='{}' {}", r.transition, ctx.reproduce);
        ctx.note(format!("replay that path alone: {replay}"));
    }
    let diverged: Vec<&PathReport> = reports.iter().filter(|r| r.diverged.is_some()).collect();
    let unheld: Vec<&PathReport> = reports.iter().filter(|r| r.unheld.is_some()).collect();
    let more = reports.iter().filter(|r| r.refuses_more.is_some()).count();
    let whole = reports.iter().filter(|r| !r.stopped()).count();
    ctx.note(format!(
        "{} paths driven through the worker ({} of them the model's tours): {whole} to their end, {} stopped where the worker refused a step the model \
         takes (after {again} played again with longer terms){}, {} where the interleaving could not be held{}, \
         {more} where it refused a takeover of a finished run's lease (as the fp_* functions do; the spec's statements \
         take it)",
        reports.len(),
        reports.iter().filter(|r| r.transition.starts_with("tour-")).count(),
        diverged.len(),
        diverged.first().map(|r| format!(" (first: {}: {})", r.transition, r.diverged.as_deref().unwrap_or(""))).unwrap_or_default(),
        unheld.len(),
        unheld.first().map(|r| format!(" (first: {}: {})", r.transition, r.unheld.as_deref().unwrap_or(""))).unwrap_or_default(),
    ));
}

/// The refusals' words against the contract's ([`REFUSALS_ANSWER_THE_CONTRACTS_WORD`]).
fn words_check(reports: &[PathReport]) -> Check {
    let words: Vec<String> = reports
        .iter()
        .flat_map(|r| r.refusals.iter().filter(|f| f.wrong_word()).map(move |f| (r, f)))
        .map(|(r, f)| {
            format!(
                "{}: `{}`, the contract's {:?} (path {}, run {})",
                f.transition, f.word, f.expected, r.transition, r.run_id
            )
        })
        .collect();
    let tried = reports
        .iter()
        .map(|r| r.refusals.iter().filter(|f| f.refused && !f.expected.is_empty()).count())
        .sum::<usize>();
    Check::expect(
        REFUSALS_ANSWER_THE_CONTRACTS_WORD,
        words.is_empty(),
        if words.is_empty() {
            format!("{tried} refusals, each answered with the contract's word (docs/worker-protocol.md, Outcomes)")
        } else {
            format!(
                "{} of {tried} refusals: {}",
                words.len(),
                words.iter().take(5).cloned().collect::<Vec<_>>().join("; ")
            )
        },
    )
}
