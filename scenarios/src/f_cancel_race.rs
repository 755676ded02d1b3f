//! Experiment F — the cancel race, at each point of the ledger's state machine (spec section 09):
//! - `prepared`: the control plane cancels the run; the operation becomes `cancelled` in the same
//!   transaction and is never dispatched (no claim, nothing in the tools' ledger);
//! - `dispatching`: the remote call is in flight (the dispatcher is held after the tool answered);
//!   cancel keeps `dispatching`, and the late verified result is recorded as `succeeded` — the
//!   operation is never recorded as unexecuted;
//! - `unknown`: the dispatcher died after the remote create and the reconciler moved it to
//!   `unknown` (tool without query or idempotency); cancel keeps `unknown`, still raised, and no
//!   second create happens.

use fenceproof_harness::check::{invariants, Check};
use fenceproof_harness::record::{ledger, oracle};
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::json;

use crate::ctx::{data, outcome, require_ok, Ctx, CONTROL, STEP};
use crate::outbox_setup::{dispatch_held_before_result, plan_operation};

pub const TITLE: &str = "Cancel race: cancel at prepared, dispatching and unknown";

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
    let cancel_cmd = json!({"cmd": "cancel", "run_id": run_id});

    let (status_at_cancel, status_after_cancel) = match at {
        At::Prepared => {
            let before = ctx.operation(&op).await?["status"].as_str().map(str::to_string);
            require_ok(&cp.request(cancel_cmd.clone(), STEP).await?, "cancel")?;
            let after = ctx.operation(&op).await?["status"].as_str().map(str::to_string);
            let mut d = ctx.spawn_dispatcher("d1", &tools).await?;
            let claimed = d.request(json!({"cmd": "dispatch", "claim_ttl_ms": 1000, "limit": 10}), STEP).await?;
            require_ok(&claimed, "dispatch")?;
            ctx.check(Check::equal(
                "the dispatcher finds nothing to claim",
                data(&claimed).as_array().map(Vec::len),
                Some(0),
            ));
            d.shutdown(STEP).await?;
            (before, after)
        }
        At::Dispatching => {
            let mut held = dispatch_held_before_result(ctx, &tools, "d1", BARRIER_KEY, 30_000).await?;
            let before = ctx.operation(&op).await?["status"].as_str().map(str::to_string);
            require_ok(&cp.request(cancel_cmd.clone(), STEP).await?, "cancel")?;
            let after = ctx.operation(&op).await?["status"].as_str().map(str::to_string);
            held.barrier.release().await?;
            let late = held.dispatcher.reply(held.command, STEP).await?;
            let recorded = data(&late).as_array().and_then(|a| a.first()).map(|d| d["outcome"].clone());
            ctx.check(Check::equal("the in-flight result is still recorded", recorded, Some(json!("succeeded"))));
            held.dispatcher.shutdown(STEP).await?;
            (before, after)
        }
        At::Unknown => {
            let mut held = dispatch_held_before_result(ctx, &tools, "d1", BARRIER_KEY, 300).await?;
            held.dispatcher.kill().await?;
            held.barrier.release().await?;
            ctx.wait_claim_expired(&op).await?;
            let mut d2 = ctx.spawn_dispatcher("d2", &tools).await?;
            require_ok(&d2.request(json!({"cmd": "reconcile"}), STEP).await?, "reconcile")?;
            let before = ctx.operation(&op).await?["status"].as_str().map(str::to_string);
            require_ok(&cp.request(cancel_cmd.clone(), STEP).await?, "cancel")?;
            let after = ctx.operation(&op).await?["status"].as_str().map(str::to_string);
            let rec = d2.request(json!({"cmd": "reconcile"}), STEP).await?;
            let raised = data(&rec)["raised"].as_array().is_some_and(|r| r.iter().any(|x| x[0] == op.as_str()));
            ctx.check(Check::expect(
                "after cancel it is still raised for manual handling",
                raised,
                format!("reconcile: {}", data(&rec)),
            ));
            d2.shutdown(STEP).await?;
            (before, after)
        }
    };
    // The worker is refused once the run is cancelled.
    let late_save = p.worker.request(json!({"cmd": "save", "checkpoint": {"after": "cancel"}}), STEP).await?;
    ctx.check(Check::equal("the worker can no longer write the cancelled run", outcome(&late_save), "invalid_state"));
    p.worker.shutdown(STEP).await?;

    let entries = ledger::entries(&tools.ledger)?;
    let created = ledger::created_for(&entries, &op).len();
    let fin = ctx.operation(&op).await?;
    let fin_status = fin["status"].as_str().unwrap_or("?").to_string();
    let run = oracle::run_state(&ctx.pool, run_id).await?;
    ctx.check(Check::equal("the run is cancelled", run.run["status"].as_str(), Some("cancelled")));
    let rows = ctx.commits().await?;
    match at {
        At::Prepared => {
            ctx.check(Check::equal(
                "prepared becomes cancelled in the cancel transaction",
                (status_at_cancel.as_deref(), status_after_cancel.as_deref()),
                (Some("prepared"), Some("cancelled")),
            ));
            let ever_claimed = rows
                .iter()
                .any(|r| r.new_str("operation_id") == Some(op.as_str()) && r.new_str("status") == Some("dispatching"));
            ctx.check(Check::equal("it was never claimed (oracle)", ever_claimed, false));
            ctx.check(Check::equal("it was never executed (tools' ledger)", created, 0));
        }
        At::Dispatching | At::Unknown => {
            let kept = status_at_cancel.clone();
            ctx.check(Check::equal("cancel keeps the in-flight status", status_after_cancel.clone(), kept));
            ctx.check(Check::equal("it really executed once (tools' ledger)", created, 1));
            let expected = if matches!(at, At::Dispatching) { "succeeded" } else { "unknown" };
            ctx.check(Check::equal("it is never recorded as unexecuted", fin_status.as_str(), expected));
        }
    }
    cp.shutdown(STEP).await?;
    ctx.checks.extend(invariants::all(&rows, &[CONTROL, cp.owner.as_str()]));
    ctx.note(format!(
        "cancel at {}: operation {} → {}, final {fin_status}; resources in the tools' ledger: {created}",
        status_at_cancel.as_deref().unwrap_or("?"),
        status_at_cancel.as_deref().unwrap_or("?"),
        status_after_cancel.as_deref().unwrap_or("?")
    ));
    Ok(())
}
