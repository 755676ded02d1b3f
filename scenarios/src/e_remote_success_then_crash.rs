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
use fenceproof_harness::procs::tools::ToolsProc;
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::record::{ledger, metrics};
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::{json, Value};

use crate::ctx::{data, require_ok, scrape, Ctx, STEP};
use crate::experiment::{Checks, Experiment, Judges};
use crate::outbox_setup::{dispatch_held_before_result, plan_operation};

/// The rows' titles: the spec's experiment, then the tool class and what must come of it.
pub const TITLE_IDEM: &str =
    "Remote success then crash, idempotency-key tool: the retry under the same key finds the one resource";
pub const TITLE_DETID: &str =
    "Remote success then crash, deterministic-id tool: the query by its id finds the one resource";
pub const TITLE_OPQUERY: &str =
    "Remote success then crash, tool queried by operation_id: the query finds the one resource";
pub const TITLE_PLAIN: &str =
    "Remote success then crash, tool with neither query nor idempotency: it stays unknown and is raised";
pub const TITLE_IDEM_PAUSE: &str =
    "Remote success then a paused executor, idempotency-key tool: its late result write is rejected";

/// Its registration: what it needs and what it judges.
pub const IDEM: Experiment = Experiment {
    id: "E-idem",
    title: TITLE_IDEM,
    section: "11 E; 08, 09",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c, "idem", Stop::Kill)),
};

/// Its registration: what it needs and what it judges.
pub const DETID: Experiment = Experiment {
    id: "E-detid",
    title: TITLE_DETID,
    section: "11 E; 08, 09",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c, "detid", Stop::Kill)),
};

/// Its registration: what it needs and what it judges.
pub const OPQUERY: Experiment = Experiment {
    id: "E-opquery",
    title: TITLE_OPQUERY,
    section: "11 E; 08, 09",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c, "opquery", Stop::Kill)),
};

/// Its registration: what it needs and what it judges.
pub const PLAIN: Experiment = Experiment {
    id: "E-plain",
    title: TITLE_PLAIN,
    section: "11 E; 08, 09",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c, "plain", Stop::Kill)),
};

/// Its registration: what it needs and what it judges.
pub const IDEM_PAUSE: Experiment = Experiment {
    id: "E-idem-pause",
    title: TITLE_IDEM_PAUSE,
    section: "11 E; 08, 09",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c, "idem", Stop::Pause)),
};

/// The names of its checks, in the order it makes them (the rule catalogue links rules to them).
pub const CREATED_BEFORE_CRASH: &str = "the remote create happened before the crash (tools' ledger)";
pub const STILL_DISPATCHING: &str = "after the crash the ledger row still says dispatching";
pub const METRICS_COUNT_UNKNOWN: &str = "the reconciler's metrics count the operation it moved to unknown";
pub const STALE_RESULT_REJECTED: &str = "the resumed dispatcher's stale result write is rejected";
pub const CONVERGED_UNCHANGED: &str = "the converged ledger row is unchanged by it";
pub const ONE_RESOURCE_FOR_OPERATION: &str = "exactly one real resource for the operation (tools' ledger)";
pub const ONE_RESOURCE_FOR_INTENT: &str = "exactly one real resource for the intent, under any key (tools' ledger)";
pub const EXPIRED_CLAIM_TO_UNKNOWN: &str = "the expired claim is moved to unknown, not back to prepared";
pub const NOTHING_LEFT_PREPARED: &str = "no prepared operation is left to dispatch again";
pub const PLAIN_LEAVES_UNKNOWN: &str = "a tool without query or idempotency leaves the operation unknown";
pub const RAISED_EVERY_PASS: &str = "it is raised for manual handling on every pass";
pub const CONVERGES_TO_REMOTE: &str = "the operation converges to the remote fact";

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
    let mut held = dispatch_held_before_result(ctx, &tools, "d1", ctx.lock_key(BARRIER_KEY), 300).await?;
    let before_crash = ledger::created_for(&ledger::entries(&tools.ledger)?, &op).len();
    ctx.check(Check::equal(CREATED_BEFORE_CRASH, before_crash, 1));
    let paused = match stop {
        Stop::Kill => {
            held.dispatcher.kill().await?;
            None
        }
        Stop::Pause => Some(held.dispatcher.pause().await?),
    };
    held.barrier.heal().await?;
    let after_crash = ctx.operation(&op).await?;
    ctx.check(Check::equal(STILL_DISPATCHING, after_crash["status"].as_str(), Some("dispatching")));

    // Recovery: once the claim has expired, a fresh reconciler and dispatcher take over.
    let passes = recover(ctx, &tools, &op).await?;
    if let Some(paused) = paused {
        // Heal: the paused dispatcher resumes and tries to write its stale result.
        let converged = ctx.operation(&op).await?;
        held.dispatcher.resume(paused).await?;
        judge_stale_result(ctx, &mut held.dispatcher, held.command, &op, &converged).await?;
    }
    require_ok(&p.worker.request(json!({"cmd": "release"}), STEP).await?, "release")?;
    p.worker.shutdown(STEP).await?;
    verdict(ctx, &tools, tool, &op, &passes).await
}

/// The recovery's answers: the first reconcile, the dispatch after it, the second reconcile.
struct Passes {
    rec1: Value,
    again: Value,
    rec2: Value,
}

/// Once the claim has expired, a fresh dispatcher reconciles, dispatches and reconciles again;
/// its metrics must count the operation it moved to unknown.
async fn recover(ctx: &mut Ctx, tools: &ToolsProc, op: &str) -> Result<Passes, HarnessError> {
    ctx.wait_claim_expired(op).await?;
    let mut d2 = ctx.spawn_dispatcher("d2", tools).await?;
    let rec1 = d2.request(json!({"cmd": "reconcile"}), STEP).await?;
    require_ok(&rec1, "reconcile")?;
    let again = d2.request(json!({"cmd": "dispatch", "claim_ttl_ms": 300, "limit": 10}), STEP).await?;
    require_ok(&again, "dispatch")?;
    let rec2 = d2.request(json!({"cmd": "reconcile"}), STEP).await?;
    require_ok(&rec2, "reconcile")?;
    let text = scrape(&mut d2, &ctx.dir).await?;
    let unknown = metrics::value(&text, "tool_operation_unknown_total").unwrap_or(0.0);
    ctx.check(Check::expect(METRICS_COUNT_UNKNOWN, unknown >= 1.0, format!("tool_operation_unknown_total {unknown}")));
    d2.shutdown(STEP).await?;
    Ok(Passes { rec1, again, rec2 })
}

/// The resumed dispatcher's stale result write (its pending `command`) is rejected, and the converged row (as it was
/// before the resume: `converged`) is unchanged by it.
async fn judge_stale_result(
    ctx: &mut Ctx,
    dispatcher: &mut WorkerProc,
    command: u64,
    op: &str,
    converged: &Value,
) -> Result<(), HarnessError> {
    let stale = dispatcher.reply(command, STEP).await?;
    let stale_outcome = data(&stale).as_array().and_then(|a| a.first()).map(|d| d["outcome"].clone());
    ctx.check(Check::equal(STALE_RESULT_REJECTED, stale_outcome, Some(json!("write_rejected"))));
    let now = ctx.operation(op).await?;
    ctx.check(Check::expect(
        CONVERGED_UNCHANGED,
        converged["revision"] == now["revision"] && converged["result"] == now["result"],
        format!("revision {} -> {}", converged["revision"], now["revision"]),
    ));
    dispatcher.shutdown(STEP).await
}

/// Verdict from the tools' ledger, the ledger row and the oracle.
async fn verdict(ctx: &mut Ctx, tools: &ToolsProc, tool: &str, op: &str, passes: &Passes) -> Result<(), HarnessError> {
    let entries = ledger::entries(&tools.ledger)?;
    let created = ledger::created_for(&entries, op);
    let fin = ctx.operation(op).await?;
    let status = fin["status"].as_str().unwrap_or("?").to_string();
    ctx.check(Check::equal(ONE_RESOURCE_FOR_OPERATION, created.len(), 1));
    let digest = fin["request_digest"].as_str().unwrap_or_default();
    let same_intent = entries.iter().filter(|e| e["kind"] == "created" && e["body_digest"] == digest).count();
    ctx.check(Check::equal(ONE_RESOURCE_FOR_INTENT, same_intent, 1));
    ctx.check(Check::expect(
        EXPIRED_CLAIM_TO_UNKNOWN,
        data(&passes.rec1)["marked_unknown"].as_array().is_some_and(|m| m.iter().any(|o| o == op)),
        format!("first reconcile: {}", data(&passes.rec1)),
    ));
    ctx.check(Check::equal(NOTHING_LEFT_PREPARED, data(&passes.again).as_array().map(Vec::len), Some(0)));
    if tool == "plain" {
        ctx.check(Check::equal(PLAIN_LEAVES_UNKNOWN, status.as_str(), "unknown"));
        let raised = data(&passes.rec2)["raised"].as_array().is_some_and(|r| r.iter().any(|x| x[0] == op));
        ctx.check(Check::expect(RAISED_EVERY_PASS, raised, format!("second reconcile: {}", data(&passes.rec2))));
    } else {
        let remote = created.first().and_then(|e| e["resource_id"].as_str());
        ctx.check(Check::equal(
            CONVERGES_TO_REMOTE,
            (status.as_str(), fin["remote_id"].as_str()),
            ("succeeded", remote),
        ));
    }
    let rows = ctx.commits().await?;
    ctx.check(invariants::one_effect_per_operation(&entries, &["idem", "detid", "plain", "opquery"]));
    let path: Vec<String> = rows
        .iter()
        .filter(|r| r.table_name == "tool_operations" && r.new_str("operation_id") == Some(op))
        .filter_map(|r| r.new_str("status").map(str::to_string))
        .collect();
    ctx.note(format!(
        "{tool}: resources created for the operation: {} (ledger); ledger path {}",
        created.len(),
        path.join("→")
    ));
    Ok(())
}
