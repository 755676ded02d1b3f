//! The lanes of a Model-paths row: on the harness's own servers, [`LANES`] side by side, the first
//! on the row's database and each other on a database of its own cloned from the same template
//! (with the session's SQL mutant, if any); on a team's database, one. Each lane plays its share
//! of the paths in turn, then once more, with terms five times as long, each of them that stopped
//! where the worker refused a step the model takes; [`reached`] says what the lanes' histories
//! took so far (for the shortest paths of what the tours missed). When they end, each other lane's database is
//! judged like the row's: trace validation (`trace-lane<k>.json`, which coverage reads too) and
//! the invariants.

use std::collections::BTreeSet;

use fenceproof_harness::check::invariants;
use fenceproof_harness::db::databases;
use fenceproof_harness::procs::tools::ToolsProc;
use fenceproof_harness::record::{ledger, oracle};
use fenceproof_harness::HarnessError;
use fenceproof_model::action::Action;

use super::lane::{Lane, Place};
use super::play::{self, Grant, PathReport};
use super::AGAIN_LONGER;
use crate::ctx::{with_database, Ctx, CONTROL};

/// How many lanes play side by side where the harness may add databases (they mostly wait: on
/// the database clock, on round trips).
const LANES: usize = 4;

/// The row's lanes: its own database's, and on the harness's servers the others'.
pub async fn open(ctx: &Ctx, paths: usize) -> Result<Vec<Lane>, HarnessError> {
    let own = Place { name: String::new(), database: None, url: ctx.db_url.clone(), pool: ctx.pool.clone() };
    let mut lanes = vec![Lane::new(own, ctx.spawn_tools().await?)];
    let n = if ctx.worker_login.is_some() { LANES.min(paths) } else { 1 };
    for k in 1..n {
        lanes.push(open_other(ctx, k).await?);
    }
    Ok(lanes)
}

/// Lane `k`: a database of its own beside the row's, its own tools (their ledger in `lane<k>/`).
async fn open_other(ctx: &Ctx, k: usize) -> Result<Lane, HarnessError> {
    let mut url = url::Url::parse(&ctx.db_url).map_err(|e| HarnessError::Other(format!("bad database URL: {e}")))?;
    let name = format!("{}_lane{k}", url.path().trim_start_matches('/'));
    url.set_path("/postgres");
    databases::create_from_template_at(url.as_str(), &name).await?;
    let db_url = with_database(&ctx.db_url, &name)?;
    let pool = databases::pool(&db_url, CONTROL, 4).await?;
    if let Some(patch) = &ctx.sql_patch {
        sqlx::raw_sql(patch).execute(&pool).await?;
    }
    let dir = ctx.dir.join(format!("lane{k}"));
    std::fs::create_dir_all(&dir)?;
    let tools = ToolsProc::spawn(&ctx.tools_bin, &dir, &ctx.timeline, Some(&db_url)).await?;
    let place = Place { name: format!("l{k}-"), database: Some(name), url: db_url, pool };
    Ok(Lane::new(place, tools))
}

/// Play `mine` (each path with its index among all `total`, its run numbered from `first`) on
/// `lane`, then again with longer terms each that stopped where the worker refused a step the
/// model takes: each path's report by index, and whether it was played again.
pub async fn play(
    ctx: &Ctx,
    lane: &mut Lane,
    mine: Vec<(usize, &(String, Vec<Action>))>,
    grant: Grant,
    first: usize,
    total: usize,
) -> Result<Vec<(usize, PathReport, usize)>, HarnessError> {
    lane.warm(ctx).await?;
    let mut out = Vec::new();
    for (i, (t, p)) in &mine {
        out.push((*i, play::play(ctx, lane, first + *i, t, p, grant).await?, 0));
    }
    for k in 0..out.len() {
        if out[k].1.diverged.is_none() {
            continue;
        }
        let (i, (t, p)) = mine[k];
        let mut r = play::play(ctx, lane, first + total + i, t, p, grant.longer(AGAIN_LONGER)).await?;
        r.again_of = Some(out[k].1.run_id.clone());
        out[k] = (i, r, 1);
    }
    Ok(out)
}

/// The transitions the lanes' histories took so far (trace validation's classes of each lane's
/// commits), for the shortest paths of what the tours missed.
pub async fn reached(ctx: &Ctx, lanes: &[Lane]) -> Result<BTreeSet<String>, HarnessError> {
    let entries = ctx.timeline.entries();
    let mut seen = BTreeSet::new();
    for lane in lanes {
        let (rows, calls) = match &lane.place.database {
            None => (ctx.commits().await?, ledger::entries(&ctx.dir.join("tools-ledger.jsonl")).unwrap_or_default()),
            Some(db) => {
                let name = crate::ctx::database_folder(db);
                let calls = ledger::entries(&ctx.dir.join(name).join("tools-ledger.jsonl")).unwrap_or_default();
                (oracle::commits(&lane.place.pool).await?, calls)
            }
        };
        let shared = ctx.server.is_some();
        seen.extend(crate::trace_check::transitions(&rows, &entries, &ctx.environment, shared, &calls));
    }
    Ok(seen)
}

/// Stop every lane's processes; judge the other lanes' databases (trace validation, the
/// invariants) and the row's own (the invariants; the runner validates its trace).
pub async fn close(ctx: &mut Ctx, lanes: Vec<Lane>) -> Result<(), HarnessError> {
    let entries = ctx.timeline.entries();
    for mut lane in lanes {
        lane.stop().await?;
        let control: Vec<String> = std::iter::once(CONTROL.to_string()).chain(lane.control_owners.clone()).collect();
        let control_ref: Vec<&str> = control.iter().map(String::as_str).collect();
        let Some(db) = lane.place.database.clone() else {
            // The row's own database: its oracle is in the row's schema (a team's database too).
            let rows = ctx.commits().await?;
            ctx.checks.extend(invariants::all(&rows, &control_ref));
            continue;
        };
        let rows = oracle::commits(&lane.place.pool).await?;
        let name = crate::ctx::database_folder(&db).to_string();
        let calls = ledger::entries(&ctx.dir.join(&name).join("tools-ledger.jsonl")).unwrap_or_default();
        let environment = ctx.environment.clone();
        let shared = ctx.server.is_some();
        let c = crate::trace_check::judge_named(&ctx.dir, &name, &rows, &entries, &environment, shared, &calls)?;
        ctx.check(c);
        let timeline: Vec<serde_json::Value> = entries.iter().filter_map(|e| serde_json::to_value(e).ok()).collect();
        let answers = crate::answers::judge_in(&timeline, &ctx.dir.join(&name), &rows)?;
        ctx.checks.extend(invariants::all(&rows, &control_ref).into_iter().chain(answers).map(|mut c| {
            c.evidence = format!("{name} database: {}", c.evidence);
            c
        }));
        lane.place.pool.close().await;
    }
    Ok(())
}
