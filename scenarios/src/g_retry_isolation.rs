//! Experiment G — retry isolation. Run R1 plans a tool call; its dispatcher calls the tool and is
//! held before writing the result. Meanwhile the control plane cancels R1 and a retry creates R2
//! (a new run_id), whose owner plans the same step under a new operation_id. Then the old result
//! arrives late: it may be kept as evidence on R1's ledger row, but it cannot advance R2 — neither
//! directly nor when handed to R2's owner as a callback.

use fenceproof_harness::check::evidence::{listed, shown};
use fenceproof_harness::check::Check;
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::record::oracle;
use fenceproof_harness::record::oracle::CommitRow;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::ctx::{data, outcome, require_ok, Ctx, STEP};
use crate::experiment::{Checks, Experiment, Judges};
use crate::outbox_setup::{dispatch_held_before_result, plan_operation};

pub const TITLE: &str = "Retry isolation: a late result of the old run cannot advance the new run";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "G",
    title: TITLE,
    section: "11 G; 02, 07",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

/// The names of its checks, in the order it makes them (the rule catalogue links rules to them).
pub const RETRY_IS_NEW_RUN: &str = "the retry is a new run_id";
pub const NEW_OPERATION_ID: &str = "the new run plans the same step under a new operation_id";
pub const OLD_RESULT_REFUSED: &str = "the old run's result is refused by the new run";
pub const OWN_UNSETTLED_REFUSED: &str = "the new run's own operation cannot advance it before it has a verified result";
pub const NEW_RUN_UNCHANGED: &str = "the new run's state is unchanged";
pub const NEW_OPERATION_UNCHANGED: &str = "the new run's operation is unchanged";
pub const NOTHING_COMMITTED_ON_NEW_RUN: &str = "nothing committed on the new run after the late result (oracle)";
pub const OLD_RUN_STAYS_CANCELLED: &str = "the old run stays cancelled";

const BARRIER_KEY: i64 = 0x0606;

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let tools = ctx.spawn_tools().await?;
    let err = |e: fenceproof_protocol::ProtocolError| HarnessError::Other(e.to_string());
    let r1 = runs::create_run(&ctx.pool, "task-g", json!({})).await.map_err(err)?;
    let mut p1 = plan_operation(ctx, "w1", r1, "idem", true).await?;
    let op1 = p1.operation_id.clone();
    let mut held = dispatch_held_before_result(ctx, &tools, "d1", ctx.lock_key(BARRIER_KEY), 30_000).await?;

    // The old run is cancelled and retried, by the code under test in a control-plane process.
    let mut cp = ctx.spawn_control_plane().await?;
    let r2 = cancel_and_retry(ctx, &mut cp, r1).await?;
    let mut p2 = plan_operation(ctx, "w2", r2, "idem", true).await?;
    let op2 = p2.operation_id.clone();
    // The operation_id's format is the worker's own: what must hold is that it is new and that
    // its intent was registered for the new run (the ledger row), not that it spells the run_id.
    let op2_before = ctx.operation(&op2).await?;
    ctx.check(Check::expect(
        NEW_OPERATION_ID,
        op2 != op1 && op2_before["run_id"] == r2.to_string().as_str(),
        format!("{op1} vs {op2}, registered for run {}", op2_before["run_id"]),
    ));
    let r2_before = oracle::run_state(&ctx.pool, r2).await?;
    let mark = ctx.oracle_mark().await?;

    // The late result of the old run arrives.
    held.barrier.heal().await?;
    let late = held.dispatcher.reply(held.command, STEP).await?;
    held.dispatcher.shutdown(STEP).await?;
    // ... and is handed to the new run's owner as a callback.
    let callback = judge_callbacks(ctx, &mut p2.worker, &op1, &op2).await?;
    let (r2_after, _rows) = judge_new_run_untouched(ctx, (r2, &op2), (&r2_before, &op2_before), mark).await?;
    let r1_state = oracle::run_state(&ctx.pool, r1).await?;
    ctx.check(Check::equal(OLD_RUN_STAYS_CANCELLED, r1_state.run["status"].as_str(), Some("cancelled")));
    let op1_fin = ctx.operation(&op1).await?;
    let late_outcome = data(&late).as_array().and_then(|a| a.first()).map(|d| d["outcome"].clone());
    require_ok(&p2.worker.request(json!({"cmd": "release"}), STEP).await?, "release")?;
    p1.worker.shutdown(STEP).await?;
    p2.worker.shutdown(STEP).await?;
    cp.shutdown(STEP).await?;
    ctx.invariants.control.push(cp.owner.clone());
    ctx.note(format!(
        "late result of {} kept as evidence ({} → {}); callback to the new run: {}; new run at revision {} (before: {})",
        r1.simple().to_string().get(..8).unwrap_or(""),
        late_outcome.unwrap_or_default(),
        op1_fin["status"],
        outcome(&callback),
        r2_after.run["revision"],
        r2_before.run["revision"]
    ));
    Ok(())
}

/// The control plane `cp` cancels `r1` and creates a retry of its task: the retry's run_id.
async fn cancel_and_retry(ctx: &mut Ctx, cp: &mut WorkerProc, r1: Uuid) -> Result<Uuid, HarnessError> {
    require_ok(&cp.request(json!({"cmd": "cancel", "run_id": r1}), STEP).await?, "cancel")?;
    let retry = cp.request(json!({"cmd": "create_run", "task_id": "task-g"}), STEP).await?;
    require_ok(&retry, "retry")?;
    let r2: Uuid = data(&retry)["run_id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| HarnessError::Other(format!("retry gave no run_id: {retry}")))?;
    ctx.check(Check::expect(RETRY_IS_NEW_RUN, r2 != r1, format!("{r1} -> {r2}")));
    Ok(r2)
}

/// The new run's owner is handed the old run's operation `op1` (refused as foreign) and its own
/// `op2` before it has a verified result (refused as unsettled). Returns the callback's answer.
async fn judge_callbacks(ctx: &mut Ctx, w: &mut WorkerProc, op1: &str, op2: &str) -> Result<Value, HarnessError> {
    let callback = w.request(json!({"cmd": "advance", "operation_id": op1}), STEP).await?;
    let premature = w.request(json!({"cmd": "advance", "operation_id": op2}), STEP).await?;
    ctx.check(Check::equal(OLD_RESULT_REFUSED, outcome(&callback), "foreign_operation"));
    ctx.check(Check::equal(OWN_UNSETTLED_REFUSED, outcome(&premature), "operation_not_settled"));
    Ok(callback)
}

/// The new run `r2`, its operation `op2` and the oracle after `mark` show nothing of the late
/// result. Returns the run's state now and every commit.
async fn judge_new_run_untouched(
    ctx: &mut Ctx,
    (r2, op2): (Uuid, &str),
    (r2_before, op2_before): (&oracle::RunState, &Value),
    mark: i64,
) -> Result<(oracle::RunState, Vec<CommitRow>), HarnessError> {
    let r2_after = oracle::run_state(&ctx.pool, r2).await?;
    let op2_after = ctx.operation(op2).await?;
    let key = |s: &oracle::RunState| (s.run["status"].clone(), s.run["revision"].clone(), s.run["checkpoint"].clone());
    let said = |s: &oracle::RunState| {
        let (status, revision, checkpoint) = key(s);
        format!("{} at revision {}, checkpoint {}", shown(status), shown(revision), shown(checkpoint))
    };
    ctx.check(Check::expect(
        NEW_RUN_UNCHANGED,
        key(r2_before) == key(&r2_after),
        format!("before {}; after {}", said(r2_before), said(&r2_after)),
    ));
    ctx.check(Check::expect(
        NEW_OPERATION_UNCHANGED,
        op2_before["status"] == op2_after["status"] && op2_before["revision"] == op2_after["revision"],
        format!(
            "{} r{} -> {} r{}",
            op2_before["status"], op2_before["revision"], op2_after["status"], op2_after["revision"]
        ),
    ));
    let rows = ctx.commits().await?;
    let touched_r2: Vec<&CommitRow> =
        rows.iter().filter(|r| r.seq > mark && r.run_id == Some(r2) && r.table_name != "worker_leases").collect();
    let said = listed(touched_r2.iter().map(|r| format!("#{} {} by {}", r.seq, r.table_name, r.writer)));
    ctx.check(
        Check::expect(NOTHING_COMMITTED_ON_NEW_RUN, touched_r2.is_empty(), format!("commits on the new run: {said}"))
            .citing(touched_r2.iter().map(|r| r.seq)),
    );
    Ok((r2_after, rows))
}
