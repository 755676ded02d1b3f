//! Experiment A — continuous checkpoints: two sequential writes in the same epoch both succeed and
//! the revision rises consecutively. The worker runs a scripted task alone (acquire, start, two
//! checkpoints, succeed, release); the verdict comes from the oracle, not from the worker.

use fenceproof_harness::check::evidence::shown;
use fenceproof_harness::check::Check;
use fenceproof_harness::record::oracle;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;

use crate::ctx::{Ctx, Script, STEP};
use crate::experiment::{Checks, Experiment, Judges};

pub const TITLE: &str = "Continuous checkpoints: two sequential writes in one epoch";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "A",
    title: TITLE,
    section: "11 A; 06",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

/// The names of its checks (the rule catalogue links rules to them).
pub const SCRIPT_EXITS_0: &str = "scripted worker exits 0";
pub const BOTH_COMMITTED: &str = "both checkpoint writes committed";
pub const REVISIONS_CONSECUTIVE: &str = "checkpoint revisions consecutive";
pub const SAME_EPOCH: &str = "both writes in the same epoch, held by the writer";
pub const RUN_ENDS: &str = "run ends succeeded at revision 4";
pub const LAST_CHECKPOINT: &str = "run checkpoint is the last step";

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let run_id = runs::create_run(&ctx.pool, "task-a", serde_json::json!({}))
        .await
        .map_err(|e| HarnessError::Other(e.to_string()))?;
    // The task runs unpaced: row A judges consecutive writes, not work between them.
    let script = Script { run_id, steps: 2, pace_ms: 0, ttl_ms: 5000, heartbeat_ms: 500, renew_timeout_ms: 1000 };
    let mut w = ctx.spawn_worker("a", script).await?;
    let code = w.wait_exit(STEP).await?;
    ctx.check(Check::equal(SCRIPT_EXITS_0, code, Some(0)));

    let rows = ctx.commits().await?;
    let saves: Vec<_> = rows
        .iter()
        .filter(|r| {
            r.is_runs()
                && r.op == "UPDATE"
                && r.writer == w.owner
                && r.old_str("status") == Some("running")
                && r.new_str("status") == Some("running")
        })
        .collect();
    let revs: Vec<(i64, i64)> = saves.iter().filter_map(|r| r.old_i64("revision").zip(r.new_i64("revision"))).collect();
    let epochs: Vec<Option<i64>> = saves.iter().map(|r| r.lease_epoch()).collect();
    ctx.check(Check::equal(BOTH_COMMITTED, saves.len(), 2));
    ctx.check(Check::expect(
        REVISIONS_CONSECUTIVE,
        revs.len() == 2 && revs[0].1 == revs[0].0 + 1 && revs[1].0 == revs[0].1 && revs[1].1 == revs[1].0 + 1,
        format!("revision steps {}", shown(&revs)),
    ));
    ctx.check(Check::expect(
        SAME_EPOCH,
        epochs.len() == 2
            && epochs[0].is_some()
            && epochs[0] == epochs[1]
            && saves.iter().all(|r| r.lease_owner() == Some(w.owner.as_str())),
        format!("lease epochs at commit {}", shown(&epochs)),
    ));
    let state = oracle::run_state(&ctx.pool, run_id).await?;
    ctx.check(Check::equal(
        RUN_ENDS,
        (state.run["status"].as_str(), state.run["revision"].as_i64()),
        (Some("succeeded"), Some(4)),
    ));
    ctx.check(Check::equal(LAST_CHECKPOINT, state.run["checkpoint"]["step"].as_i64(), Some(2)));
    ctx.note(format!(
        "revisions {} in epoch {}",
        revs.iter().map(|r| format!("{}→{}", r.0, r.1)).collect::<Vec<_>>().join(", "),
        epochs.first().copied().flatten().unwrap_or(-1)
    ));
    std::fs::write(ctx.dir.join("final_state.json"), serde_json::to_string_pretty(&state).expect("json"))?;
    Ok(())
}
