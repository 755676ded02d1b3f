//! Experiment E — remote success, then the executor crashes. A dispatcher claims the planned
//! operation and calls the tool, which really creates the resource (the tools' ledger shows it);
//! the dispatcher is then SIGKILLed before it writes the result. After its claim expires on the
//! database clock, a fresh reconciler recovers. One row per capability class:
//! - `idem` (idempotency key): retry with the same key -> succeeded, still one resource;
//! - `detid` (deterministic id + query): query by id, tag matches -> succeeded, one resource;
//! - `opquery` (operation query): query by operation -> succeeded, one resource;
//! - `plain` (neither): stays `unknown` and is raised for manual handling; no second create.
//!
//! The tools' ledger, not any worker's word, decides how many real side effects exist: it is
//! counted per operation_id and per request digest (a retry under a new key is caught too).
//!
//! `E-idem-pause` SIGSTOPs the dispatcher instead of killing it. The reconciler recovers as above,
//! then the dispatcher is SIGCONTed and tries to write its stale result: the write must be
//! rejected and the converged ledger row must not change.

use fenceproof_harness::check::{invariants, Check};
use fenceproof_harness::record::{ledger, metrics};
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::json;

use crate::ctx::{data, require_ok, scrape, Ctx, CONTROL, STEP};
use crate::outbox_setup::{dispatch_held_before_result, plan_operation};

pub const TITLE: &str = "Remote success then crash: executor killed before the local result write";

const BARRIER_KEY: i64 = 0x0E0E;

/// What happens to the dispatcher after the remote create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Kill,
    Pause,
}

pub async fn run(ctx: &mut Ctx, tool: &str, stop: Stop) -> Result<(), HarnessError> {
    let tools = ctx.spawn_tools().await?;
    let run_id = runs::create_run(&ctx.pool, &format!("task-e-{tool}"), json!({}))
        .await
        .map_err(|e| HarnessError::Other(e.to_string()))?;
    let mut p = plan_operation(ctx, "w", run_id, tool, true).await?;
    let op = p.operation_id.clone();

    // Fault: the remote create happens, then the dispatcher dies before recording it.
    let mut held = dispatch_held_before_result(ctx, &tools, "d1", BARRIER_KEY, 300).await?;
    let before_crash = ledger::created_for(&ledger::entries(&tools.ledger)?, &op).len();
    ctx.check(Check::equal("the remote create happened before the crash (tools' ledger)", before_crash, 1));
    let paused = match stop {
        Stop::Kill => {
            held.dispatcher.kill().await?;
            None
        }
        Stop::Pause => Some(held.dispatcher.pause().await?),
    };
    held.barrier.release().await?;
    let after_crash = ctx.operation(&op).await?;
    ctx.check(Check::equal(
        "after the crash the ledger row still says dispatching",
        after_crash["status"].as_str(),
        Some("dispatching"),
    ));

    // Recovery: once the claim has expired, a fresh reconciler and dispatcher take over.
    ctx.wait_claim_expired(&op).await?;
    let mut d2 = ctx.spawn_dispatcher("d2", &tools).await?;
    let rec1 = d2.request(json!({"cmd": "reconcile"}), STEP).await?;
    require_ok(&rec1, "reconcile")?;
    let again = d2.request(json!({"cmd": "dispatch", "claim_ttl_ms": 300, "limit": 10}), STEP).await?;
    require_ok(&again, "dispatch")?;
    let rec2 = d2.request(json!({"cmd": "reconcile"}), STEP).await?;
    require_ok(&rec2, "reconcile")?;
    let text = scrape(&mut d2, &ctx.dir).await?;
    let unknown = metrics::value(&text, "tool_operation_unknown_total").unwrap_or(0.0);
    ctx.check(Check::expect(
        "the reconciler's metrics count the operation it moved to unknown",
        unknown >= 1.0,
        format!("tool_operation_unknown_total {unknown}"),
    ));
    d2.shutdown(STEP).await?;
    if let Some(paused) = paused {
        let converged = ctx.operation(&op).await?;
        held.dispatcher.resume(paused).await?;
        let stale = held.dispatcher.reply(held.command, STEP).await?;
        let stale_outcome = data(&stale).as_array().and_then(|a| a.first()).map(|d| d["outcome"].clone());
        ctx.check(Check::equal(
            "the resumed dispatcher's stale result write is rejected",
            stale_outcome,
            Some(json!("write_rejected")),
        ));
        let now = ctx.operation(&op).await?;
        ctx.check(Check::expect(
            "the converged ledger row is unchanged by it",
            converged["revision"] == now["revision"] && converged["result"] == now["result"],
            format!("revision {} -> {}", converged["revision"], now["revision"]),
        ));
        held.dispatcher.shutdown(STEP).await?;
    }
    require_ok(&p.worker.request(json!({"cmd": "release"}), STEP).await?, "release")?;
    p.worker.shutdown(STEP).await?;

    let entries = ledger::entries(&tools.ledger)?;
    let created = ledger::created_for(&entries, &op);
    let fin = ctx.operation(&op).await?;
    let status = fin["status"].as_str().unwrap_or("?").to_string();
    ctx.check(Check::equal("exactly one real resource for the operation (tools' ledger)", created.len(), 1));
    let digest = fin["request_digest"].as_str().unwrap_or_default();
    let same_intent = entries.iter().filter(|e| e["kind"] == "created" && e["body_digest"] == digest).count();
    ctx.check(Check::equal("exactly one real resource for the intent, under any key (tools' ledger)", same_intent, 1));
    ctx.check(Check::expect(
        "the expired claim is moved to unknown, not back to prepared",
        data(&rec1)["marked_unknown"].as_array().is_some_and(|m| m.iter().any(|o| o == op.as_str())),
        format!("first reconcile: {}", data(&rec1)),
    ));
    ctx.check(Check::equal(
        "no prepared operation is left to dispatch again",
        data(&again).as_array().map(Vec::len),
        Some(0),
    ));
    if tool == "plain" {
        ctx.check(Check::equal(
            "a tool without query or idempotency leaves the operation unknown",
            status.as_str(),
            "unknown",
        ));
        let raised = data(&rec2)["raised"].as_array().is_some_and(|r| r.iter().any(|x| x[0] == op.as_str()));
        ctx.check(Check::expect(
            "it is raised for manual handling on every pass",
            raised,
            format!("second reconcile: {}", data(&rec2)),
        ));
    } else {
        let remote = created.first().and_then(|e| e["resource_id"].as_str());
        ctx.check(Check::equal(
            "the operation converges to the remote fact",
            (status.as_str(), fin["remote_id"].as_str()),
            ("succeeded", remote),
        ));
    }
    let rows = ctx.commits().await?;
    ctx.check(invariants::one_effect_per_operation(&entries, &["idem", "detid", "plain", "opquery"]));
    ctx.checks.extend(invariants::all(&rows, &[CONTROL]));
    let path: Vec<String> = rows
        .iter()
        .filter(|r| r.table_name == "tool_operations" && r.new_str("operation_id") == Some(op.as_str()))
        .filter_map(|r| r.new_str("status").map(str::to_string))
        .collect();
    ctx.note(format!(
        "{tool}: resources created for the operation: {} (ledger); ledger path {}",
        created.len(),
        path.join("→")
    ));
    Ok(())
}
