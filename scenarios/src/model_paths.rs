//! Experiment Model-paths-db — a probe of the database's fenced functions, not of the worker: the
//! model's paths played on the row's database by fenceproof's own driver. For every transition of
//! the coverage denominator that a driver of the protocol's own statements can reach, the model
//! gives its shortest path (`model/paths.json`); the reference worker plays each one on this
//! database through the write path the row gives workers (the fp_* functions as the worker login,
//! or the direct statements), one run per path (`play_paths`, worker-bin's `paths` module). The
//! history is the row's like any other: trace validation judges every commit of it and the
//! coverage counts what it reached. The row's own check is the driver's comparison: a step the
//! database committed where the model refuses it (and not because the driver came late to a
//! lease or claim the model still held live) breaks the rule the model's refusal stands for. A
//! step the database refused where the model takes it ends that path, and is reported, not
//! judged: the spec lets a database refuse more, and a slow machine lets a short term lapse early.

use fenceproof_harness::check::Check;
use fenceproof_harness::db::databases;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::write_path::WritePath;
use serde_json::{json, Value};

use fenceproof_harness::check::invariants;
use fenceproof_harness::record::oracle;

use crate::trace_check;

use crate::ctx::{Ctx, CONTROL, CONTROL_PLANE_PREFIX, STEP};
use crate::experiment::{Checks, Experiment, Judges, Need, MODEL_PATHS_CEILING};

pub const TITLE: &str =
    "The database's fenced functions probed along the model's paths by fenceproof's own driver (not your worker)";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "Model-paths-db",
    title: TITLE,
    section: "11",
    needs: &[Need::ModelPaths, Need::DatabaseProbe],
    judges: Judges::Functions,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

/// The id the row had while the letter M named both it and the Redis pre-filter rows
/// (M-redis-*), before Model-paths came to drive the worker under test; `--only` still takes it,
/// with a one-line note.
pub const FORMER_ID: &str = "M-paths";

/// The name of its check: the database's fenced functions against the model's paths.
pub const NO_STEP_THE_MODEL_REFUSES: &str = "no step the model refuses committed on any of its paths";

/// A lease or claim that must lapse before the path's next clock tick is granted this long (a
/// path that stopped is played again with terms ten times as long).
const GRANT_MS: i64 = 60;

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let tools = ctx.spawn_tools().await?;
    let mut w = ctx.spawn_reference_dispatcher("paths", &tools).await?;
    let mut cmd = json!({
        "cmd": "play_paths",
        "control_url": { "$secret": { "name": "control-url", "value": ctx.db_url } },
        "grant_ms": GRANT_MS,
    });
    // The paths with a step only the spec's own statements take (a takeover of a finished run's
    // lease, which the fp_* functions refuse) are played as the direct login, where the harness's
    // clusters have one; on a team's database the driver skips them and says so.
    if let (Some(login), WritePath::Api) = (&ctx.worker_login, ctx.write_path) {
        databases::create_direct_login(&ctx.pool).await?;
        let direct = databases::url_as(login, databases::DIRECT_LOGIN)?;
        cmd["direct_url"] = json!({ "$secret": { "name": "direct-url", "value": direct } });
    }
    let restored = restored_database(ctx).await?;
    if let Some((url, _)) = &restored {
        cmd["restored_url"] = json!({ "$secret": { "name": "restored-url", "value": url } });
        cmd["tools_ledger"] = json!(tools.ledger.display().to_string());
    }
    let answer = w.request_reference(cmd, MODEL_PATHS_CEILING).await?;
    driver_played(&answer)?;
    w.request(json!({"cmd": "exit"}), STEP).await.ok();
    judge(ctx, &answer["data"]);
    // The paths' control plane (each run's create and cancel) is `control-plane-<owner>`; the
    // restore's and the recovery's session, `<owner>.restore`, is the environment's.
    let rows = ctx.commits().await?;
    let paths_control = format!("{CONTROL_PLANE_PREFIX}{}", w.owner);
    let restorer = format!("{}.restore", w.owner);
    let control = [CONTROL, paths_control.as_str(), restorer.as_str()];
    ctx.checks.extend(invariants::all(&rows, &control));
    if let Some((_, pool)) = restored {
        let rows = oracle::commits(&pool).await?;
        pool.close().await;
        let environment = [CONTROL.to_string(), restorer.clone()];
        let shared_clock = ctx.server.is_some();
        ctx.check(trace_check::judge_other(&ctx.dir, RESTORED, &rows, &environment, shared_clock)?);
        ctx.notes
            .push(format!("{} paths restored their run's rows on the {RESTORED} database", restores(&answer["data"])));
        // The invariants judge the protocol's steps: the restore's rows and the recovery's raise
        // of the epoch are the environment's (as N-restore judges what follows its recovery).
        let steps: Vec<_> = rows.into_iter().filter(|r| r.writer != restorer).collect();
        ctx.checks.extend(invariants::all(&steps, &control).into_iter().map(|mut c| {
            c.evidence = format!("{RESTORED} database: {}", c.evidence);
            c
        }));
    }
    Ok(())
}

/// What the driver is called in errors.
const DRIVER: &str = "the driver of the model's paths";

/// The driver is the harness's own: when it cannot play, there is no verdict. When it stopped for
/// want of a connection (its answer's data names the resource, as the reference worker types its
/// error: `{"out_of": "connections"}`), the machine was out of one, and the row is STARVED.
fn driver_played(answer: &Value) -> Result<(), HarnessError> {
    if answer["outcome"] == "ok" {
        return Ok(());
    }
    let detail = answer["detail"].to_string();
    if answer["data"]["out_of"] == "connections" {
        return Err(HarnessError::OutOfConnections { what: DRIVER.into(), detail });
    }
    Err(HarnessError::Other(format!("{DRIVER} stopped: {detail}")))
}

/// How many paths played a restore.
fn restores(data: &Value) -> usize {
    data["paths"].as_array().map_or(0, |p| p.iter().filter(|p| p["restored"] == true).count())
}

/// The name of the database standing for the restored server (and of its trace validation).
const RESTORED: &str = "restored";

/// A database of the row's server standing for the restored one (cloned from the template, beside
/// the row's own): its owner's URL and a pool on it. `None` on a team's database (a schema, not a
/// server the harness may add databases to): the paths with a restore are skipped there.
async fn restored_database(ctx: &Ctx) -> Result<Option<(String, sqlx::PgPool)>, HarnessError> {
    if ctx.worker_login.is_none() {
        return Ok(None);
    }
    let mut url = url::Url::parse(&ctx.db_url).map_err(|e| HarnessError::Other(format!("bad database URL: {e}")))?;
    let name = format!("{}_{RESTORED}", url.path().trim_start_matches('/'));
    url.set_path("/postgres");
    databases::create_from_template_at(url.as_str(), &name).await?;
    url.set_path(&format!("/{name}"));
    let pool = databases::pool(url.as_str(), CONTROL, 2).await?;
    // The same deployment as the row's own database: a SQL mutant's functions too.
    if let Some(patch) = &ctx.sql_patch {
        sqlx::raw_sql(patch).execute(&pool).await?;
    }
    Ok(Some((url.to_string(), pool)))
}

/// The check and the notes from the driver's answer.
fn judge(ctx: &mut Ctx, data: &Value) {
    let paths = data["paths"].as_array().cloned().unwrap_or_default();
    let refused: Vec<String> = paths
        .iter()
        .filter_map(|p| {
            Some(format!("{}: {} (run {})", p["transition"].as_str()?, p["refused_by_model"].as_str()?, p["run_id"]))
        })
        .collect();
    let diverged: Vec<String> = paths
        .iter()
        .filter_map(|p| Some(format!("{}: {}", p["transition"].as_str()?, p["diverged"].as_str()?)))
        .collect();
    ctx.check(Check::expect(
        NO_STEP_THE_MODEL_REFUSES,
        refused.is_empty() && !paths.is_empty(),
        if paths.is_empty() {
            "the driver played no path".to_string()
        } else if refused.is_empty() {
            format!("{} paths played, no step committed that the model refuses", paths.len())
        } else {
            format!("{} of {} paths: {}", refused.len(), paths.len(), refused.join("; "))
        },
    ));
    ctx.notes.push(format!(
        "{} paths played: {} to their end, {} stopped where the database refused a step the model takes{}",
        paths.len(),
        paths.len() - diverged.len() - refused.len(),
        diverged.len(),
        diverged.first().map(|d| format!(" (first: {d})")).unwrap_or_default()
    ));
    let spec = paths.iter().filter(|p| p["spec_statements"] == true).count();
    let skipped = data["skipped_spec_statements"].as_array().map_or(0, Vec::len);
    ctx.notes.push(format!(
        "{spec} of them hold a step only the spec's own statements take (a takeover of a finished run's lease), played \
         on the direct write path; {skipped} such paths skipped (no direct login on this database)"
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The driver's answer out of connections (as the reference worker sends it) is the want of a
    /// resource; any other stop is the harness's failure; a played answer is neither.
    #[test]
    fn a_driver_out_of_connections_is_told_from_one_that_failed() {
        let out = json!({"event": "play_paths", "outcome": "db_error",
            "detail": "database error: pool timed out while waiting for an open connection",
            "data": {"out_of": "connections"}});
        let e = driver_played(&out).unwrap_err();
        assert!(matches!(e, HarnessError::OutOfConnections { .. }), "{e:?}");
        assert!(e.out_of_connections());
        let broke = json!({"event": "play_paths", "outcome": "invalid_intent", "detail": "a path did not parse"});
        let e = driver_played(&broke).unwrap_err();
        assert!(!e.out_of_connections(), "{e:?}");
        assert!(driver_played(&json!({"outcome": "ok", "data": {"paths": []}})).is_ok());
    }
}
