//! W-commit: the worker's protected writes at the boundaries of spec §06–§07. Two runs stand at the
//! same revision and status: a save of one must change that run only. A run that was never started
//! cannot be completed or failed (the from-state is part of the compare-and-set).

use fenceproof_harness::check::evidence::{listed, shown};
use fenceproof_harness::check::Check;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::json;

use crate::ctx::{outcome, require_ok, Ctx, STEP};
use crate::experiment::{Checks, Experiment, Judges};
use crate::tags::{self, tagged};

pub const TITLE: &str = "The worker's protected writes at their boundaries: neighbouring runs at the same revision, transitions from the wrong state";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "W-commit",
    title: TITLE,
    section: "06, 07",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let err = |e: fenceproof_protocol::ProtocolError| HarnessError::Other(e.to_string());
    let r0 = runs::create_run(&ctx.pool, "task-wc-0", json!({})).await.map_err(err)?;
    let r1 = runs::create_run(&ctx.pool, "task-wc-1", json!({})).await.map_err(err)?;
    let r2 = runs::create_run(&ctx.pool, "task-wc-2", json!({})).await.map_err(err)?;
    let acquire = |r| json!({"cmd": "acquire", "run_id": r, "ttl_ms": 600_000, "heartbeat_ms": 600_000, "renew_timeout_ms": 5_000});

    let mut a = ctx.spawn_worker("a", vec![]).await?;
    let mut b = ctx.spawn_worker("b", vec![]).await?;
    require_ok(&a.request(acquire(r0), STEP).await?, "A acquires")?;
    require_ok(&b.request(acquire(r1), STEP).await?, "B acquires")?;
    require_ok(&a.request(json!({"cmd": "start"}), STEP).await?, "A starts")?;
    require_ok(&b.request(json!({"cmd": "start"}), STEP).await?, "B starts")?;
    let before = fenceproof_harness::record::oracle::run_state(&ctx.pool, r1).await?.run;
    require_ok(&a.request(json!({"cmd": "save", "checkpoint": {"by": "a"}}), STEP).await?, "A saves")?;
    let after = fenceproof_harness::record::oracle::run_state(&ctx.pool, r1).await?.run;
    ctx.check(Check::expect(
        tagged(
            tags::COMMIT_REVISION_CAS,
            "a save changes the writer's run only (another run is at the same revision and status)",
        ),
        before == after,
        format!("the other run before {before}, after {after}"),
    ));

    let mut c = ctx.spawn_worker("c", vec![]).await?;
    require_ok(&c.request(acquire(r2), STEP).await?, "C acquires")?;
    let mark = ctx.oracle_mark().await?;
    let done = c.request(json!({"cmd": "succeed"}), STEP).await?;
    let failed = c.request(json!({"cmd": "fail"}), STEP).await?;
    let rows = ctx.commits().await?;
    let wrote: Vec<_> = rows.iter().filter(|r| r.seq > mark && r.is_runs()).collect();
    let said = listed(
        wrote.iter().map(|r| format!("#{} {} -> {}", r.seq, shown(r.old_str("status")), shown(r.new_str("status")))),
    );
    ctx.check(
        Check::expect(
            tagged(tags::RUNS_TRANSITION_FROM_STATE, "a run that was never started is neither completed nor failed"),
            wrote.is_empty(),
            format!("succeed answered {}, fail answered {}; run commits: {said}", outcome(&done), outcome(&failed)),
        )
        .citing(wrote.iter().map(|r| r.seq)),
    );
    for w in [&mut a, &mut b, &mut c] {
        w.shutdown(STEP).await?;
    }
    let _rows = ctx.commits().await?;
    ctx.note(format!("{} boundary checks on the worker's protected writes", ctx.checks.len()));
    Ok(())
}
