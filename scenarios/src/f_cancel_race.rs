//! Experiment F — the cancel race, at each point of the ledger's state machine (spec section 09):
//! - `prepared`: the control plane cancels the run; the operation becomes `cancelled` in the same
//!   transaction and is never dispatched (no claim, nothing in the tools' ledger);
//! - `dispatching`: the remote call is in flight (the dispatcher is held after the tool answered);
//!   cancel keeps `dispatching`, and the late verified result is recorded as `succeeded` — the
//!   operation is never recorded as unexecuted;
//! - `unknown`: the dispatcher died after the remote create and the reconciler moved it to
//!   `unknown` (tool without query or idempotency); cancel keeps `unknown`, still raised, and no
//!   second create happens.

use fenceproof_harness::check::Check;
use fenceproof_harness::procs::tools::ToolsProc;
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::record::oracle::CommitRow;
use fenceproof_harness::record::{ledger, oracle};
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::{json, Value};

use crate::ctx::{data, outcome, require_ok, Ctx, STEP};
use crate::experiment::{Checks, Experiment, Judges};
use crate::outbox_setup::{dispatch_held_before_result, plan_operation};

/// The rows' titles: where in the ledger's state machine the cancel lands, and what must hold.
pub const TITLE_PREPARED: &str = "Cancel race at prepared: the operation is cancelled and never dispatched";
pub const TITLE_DISPATCHING: &str =
    "Cancel race while dispatching: the call in flight stays dispatching and its verified result is recorded";
pub const TITLE_UNKNOWN: &str = "Cancel race at unknown: the operation stays unknown and raised, no second create";

/// Its registration: what it needs and what it judges.
pub const PREPARED: Experiment = Experiment {
    id: "F-prepared",
    title: TITLE_PREPARED,
    section: "11 F; 09.3",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c, At::Prepared)),
};

/// Its registration: what it needs and what it judges.
pub const DISPATCHING: Experiment = Experiment {
    id: "F-dispatching",
    title: TITLE_DISPATCHING,
    section: "11 F; 09.3",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c, At::Dispatching)),
};

/// Its registration: what it needs and what it judges.
pub const UNKNOWN: Experiment = Experiment {
    id: "F-unknown",
    title: TITLE_UNKNOWN,
    section: "11 F; 09.3",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c, At::Unknown)),
};

/// The names of its checks, in the order it makes them (the rule catalogue links rules to them).
pub const NOTHING_TO_CLAIM: &str = "the dispatcher finds nothing to claim";
pub const IN_FLIGHT_RECORDED: &str = "the in-flight result is still recorded";
pub const STILL_RAISED: &str = "after cancel it is still raised for manual handling";
pub const WORKER_REFUSED: &str = "the worker can no longer write the cancelled run";
pub const RUN_CANCELLED: &str = "the run is cancelled";
pub const PREPARED_BECOMES_CANCELLED: &str = "prepared becomes cancelled in the cancel transaction";
pub const NEVER_CLAIMED: &str = "it was never claimed (oracle)";
pub const NEVER_EXECUTED: &str = "it was never executed (tools' ledger)";
pub const IN_FLIGHT_KEPT: &str = "cancel keeps the in-flight status";
pub const EXECUTED_ONCE: &str = "it really executed once (tools' ledger)";
pub const NEVER_UNEXECUTED: &str = "it is never recorded as unexecuted";

const BARRIER_KEY: i64 = 0x0F0F;

#[derive(Debug, Clone, Copy)]
pub enum At {
    Prepared,
    Dispatching,
    Unknown,
}

pub async fn run(ctx: &mut Ctx, at: At) -> Result<(), HarnessError> {
    let tools = ctx.spawn_tools().await?;
    let tool = if matches!(at, At::Unknown) { "plain" } else { "idem" };
    let run_id = runs::create_run(&ctx.pool, &format!("task-f-{at:?}"), json!({}))
        .await
        .map_err(|e| HarnessError::Other(e.to_string()))?;
    let mut p = plan_operation(ctx, "w", run_id, tool, true).await?;
    let op = p.operation_id.clone();
    // The cancel is performed by the code under test, in a control-plane process.
    let mut cp = ctx.spawn_control_plane().await?;
    let cancel = json!({"cmd": "cancel", "run_id": run_id});

    let statuses = match at {
        At::Prepared => cancel_prepared(ctx, &mut cp, &cancel, &tools, &op).await?,
        At::Dispatching => cancel_dispatching(ctx, &mut cp, &cancel, &tools, &op).await?,
        At::Unknown => cancel_unknown(ctx, &mut cp, &cancel, &tools, &op).await?,
    };
    // The worker is refused once the run is cancelled.
    let late_save = p.worker.request(json!({"cmd": "save", "checkpoint": {"after": "cancel"}}), STEP).await?;
    ctx.check(Check::equal(WORKER_REFUSED, outcome(&late_save), "invalid_state"));
    p.worker.shutdown(STEP).await?;

    let entries = ledger::entries(&tools.ledger)?;
    let created = ledger::created_for(&entries, &op).len();
    let fin = ctx.operation(&op).await?;
    let fin_status = fin["status"].as_str().unwrap_or("?").to_string();
    let run = oracle::run_state(&ctx.pool, run_id).await?;
    ctx.check(Check::equal(RUN_CANCELLED, run.run["status"].as_str(), Some("cancelled")));
    let rows = ctx.commits().await?;
    judge_operation(ctx, at, &rows, &op, &statuses, (created, &fin_status));
    cp.shutdown(STEP).await?;
    ctx.invariants.control.push(cp.owner.clone());
    let (at_cancel, after_cancel) = statuses;
    ctx.note(format!(
        "cancel at {}: operation {} → {}, final {fin_status}; resources in the tools' ledger: {created}",
        at_cancel.as_deref().unwrap_or("?"),
        at_cancel.as_deref().unwrap_or("?"),
        after_cancel.as_deref().unwrap_or("?")
    ));
    Ok(())
}

/// The operation's status right before and right after the cancel.
type Statuses = (Option<String>, Option<String>);

async fn status(ctx: &Ctx, op: &str) -> Result<Option<String>, HarnessError> {
    Ok(ctx.operation(op).await?["status"].as_str().map(str::to_string))
}

/// Cancel while the operation is prepared; then a dispatcher finds nothing to claim.
async fn cancel_prepared(
    ctx: &mut Ctx,
    cp: &mut WorkerProc,
    cancel: &Value,
    tools: &ToolsProc,
    op: &str,
) -> Result<Statuses, HarnessError> {
    let before = status(ctx, op).await?;
    require_ok(&cp.request(cancel.clone(), STEP).await?, "cancel")?;
    let after = status(ctx, op).await?;
    let mut d = ctx.spawn_dispatcher("d1", tools).await?;
    let claimed = d.request(json!({"cmd": "dispatch", "claim_ttl_ms": 1000, "limit": 10}), STEP).await?;
    require_ok(&claimed, "dispatch")?;
    ctx.check(Check::equal(NOTHING_TO_CLAIM, data(&claimed).as_array().map(Vec::len), Some(0)));
    d.shutdown(STEP).await?;
    Ok((before, after))
}

/// Cancel while the remote call is in flight (the dispatcher held after the tool answered); then
/// the dispatcher's late result is still recorded.
async fn cancel_dispatching(
    ctx: &mut Ctx,
    cp: &mut WorkerProc,
    cancel: &Value,
    tools: &ToolsProc,
    op: &str,
) -> Result<Statuses, HarnessError> {
    let mut held = dispatch_held_before_result(ctx, tools, "d1", ctx.lock_key(BARRIER_KEY), 30_000).await?;
    let before = status(ctx, op).await?;
    require_ok(&cp.request(cancel.clone(), STEP).await?, "cancel")?;
    let after = status(ctx, op).await?;
    held.barrier.heal().await?;
    let late = held.dispatcher.reply(held.command, STEP).await?;
    let recorded = data(&late).as_array().and_then(|a| a.first()).map(|d| d["outcome"].clone());
    ctx.check(Check::equal(IN_FLIGHT_RECORDED, recorded, Some(json!("succeeded"))));
    held.dispatcher.shutdown(STEP).await?;
    Ok((before, after))
}

/// Cancel once the dispatcher died after the remote create and a reconciler moved the operation
/// to unknown; then a reconcile still raises it.
async fn cancel_unknown(
    ctx: &mut Ctx,
    cp: &mut WorkerProc,
    cancel: &Value,
    tools: &ToolsProc,
    op: &str,
) -> Result<Statuses, HarnessError> {
    let mut held = dispatch_held_before_result(ctx, tools, "d1", ctx.lock_key(BARRIER_KEY), 300).await?;
    held.dispatcher.kill().await?;
    held.barrier.heal().await?;
    ctx.wait_claim_expired(op).await?;
    let mut d2 = ctx.spawn_dispatcher("d2", tools).await?;
    require_ok(&d2.request(json!({"cmd": "reconcile"}), STEP).await?, "reconcile")?;
    let before = status(ctx, op).await?;
    require_ok(&cp.request(cancel.clone(), STEP).await?, "cancel")?;
    let after = status(ctx, op).await?;
    let rec = d2.request(json!({"cmd": "reconcile"}), STEP).await?;
    let raised = data(&rec)["raised"].as_array().is_some_and(|r| r.iter().any(|x| x[0] == op));
    ctx.check(Check::expect(STILL_RAISED, raised, format!("reconcile: {}", data(&rec))));
    d2.shutdown(STEP).await?;
    Ok((before, after))
}

/// What the cancel did to the operation, by the oracle and the tools' ledger (`created` real
/// resources; `fin_status` its final status).
fn judge_operation(
    ctx: &mut Ctx,
    at: At,
    rows: &[CommitRow],
    op: &str,
    statuses: &Statuses,
    (created, fin_status): (usize, &str),
) {
    let (at_cancel, after_cancel) = statuses;
    match at {
        At::Prepared => {
            ctx.check(Check::equal(
                PREPARED_BECOMES_CANCELLED,
                (at_cancel.as_deref(), after_cancel.as_deref()),
                (Some("prepared"), Some("cancelled")),
            ));
            let ever_claimed = rows
                .iter()
                .any(|r| r.new_str("operation_id") == Some(op) && r.new_str("status") == Some("dispatching"));
            ctx.check(Check::equal(NEVER_CLAIMED, ever_claimed, false));
            ctx.check(Check::equal(NEVER_EXECUTED, created, 0));
        }
        At::Dispatching | At::Unknown => {
            ctx.check(Check::equal(IN_FLIGHT_KEPT, after_cancel.clone(), at_cancel.clone()));
            ctx.check(Check::equal(EXECUTED_ONCE, created, 1));
            let expected = if matches!(at, At::Dispatching) { "succeeded" } else { "unknown" };
            ctx.check(Check::equal(NEVER_UNEXECUTED, fin_status, expected));
        }
    }
}
