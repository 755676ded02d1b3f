//! W-ledger: the worker's dispatcher at the outbox rules' boundaries (spec §09.2). A prepared
//! operation of a run that has already finished is not claimed; a prepared row another transaction
//! holds is skipped, not waited for (the harness holds it with a [`RowHold`], so no cooperation is
//! needed), and the next one is claimed instead.

use fenceproof_harness::check::evidence::{listed, shown};
use fenceproof_harness::check::{invariants, Check};
use fenceproof_harness::faults::row_hold::RowHold;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::json;

use fenceproof_harness::procs::tools::ToolsProc;
use fenceproof_harness::procs::worker::WorkerProc;

use crate::ctx::{data, outcome, require_ok, Ctx, CONTROL, STEP};
use crate::experiment::{Checks, Experiment, Judges};
use crate::tags::{self, tagged};

pub const TITLE: &str =
    "The worker's dispatcher at the outbox boundaries: intents of finished runs, rows held by another claim";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "W-ledger",
    title: TITLE,
    section: "09",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

fn acquire(r: uuid::Uuid) -> serde_json::Value {
    json!({"cmd": "acquire", "run_id": r, "ttl_ms": 600_000, "heartbeat_ms": 600_000, "renew_timeout_ms": 5_000})
}

fn plan(step: &str) -> serde_json::Value {
    json!({"cmd": "plan", "step_id": step, "tool": "idem", "request": {"step": step}})
}

/// An intent left prepared by a run that then finished is not claimed. Returns the run's worker
/// and the dispatcher.
async fn finished_run_not_claimed(ctx: &mut Ctx, tools: &ToolsProc) -> Result<(WorkerProc, WorkerProc), HarnessError> {
    let err = |e: fenceproof_protocol::ProtocolError| HarnessError::Other(e.to_string());
    let done_run = runs::create_run(&ctx.pool, "task-wg-done", json!({})).await.map_err(err)?;
    let mut w = ctx.spawn_worker("w", vec![]).await?;
    require_ok(&w.request(acquire(done_run), STEP).await?, "W acquires")?;
    require_ok(&w.request(json!({"cmd": "start"}), STEP).await?, "W starts")?;
    let planned = w.request(plan("left"), STEP).await?;
    require_ok(&planned, "W plans a step")?;
    let left = data(&planned)["operation_id"].as_str().unwrap_or_default().to_string();
    require_ok(&w.request(json!({"cmd": "succeed"}), STEP).await?, "W completes the run")?;
    let mut d = ctx.spawn_dispatcher("d", tools).await?;
    let mark = ctx.oracle_mark().await?;
    let pass = d
        .request(json!({"cmd": "dispatch", "claim_ttl_ms": 30_000, "call_timeout_ms": 5_000, "limit": 10}), STEP)
        .await?;
    let op = ctx.operation(&left).await?;
    let rows = ctx.commits().await?;
    let claimed: Vec<i64> =
        rows.iter().filter(|r| r.seq > mark && r.table_name == "tool_operations").map(|r| r.seq).collect();
    let commits = listed(claimed.iter().map(|s| format!("#{s}")));
    ctx.check(
        Check::expect(
            tagged(tags::CLAIM_PREPARED_OF_LIVE_RUNS, "a prepared operation of a finished run is not claimed"),
            claimed.is_empty() && op["status"] == "prepared",
            format!(
                "dispatch answered {}; the operation is {}; ledger commits {commits}",
                outcome(&pass),
                shown(&op["status"])
            ),
        )
        .citing(claimed.iter().copied()),
    );

    Ok((w, d))
}

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let tools = ctx.spawn_tools().await?;

    let (mut w, mut d) = finished_run_not_claimed(ctx, &tools).await?;

    // Two prepared intents of a live run; the harness holds the older one.
    let (mut v, held_op, next_op) = two_prepared_intents(ctx).await?;
    let hold = fenceproof_harness::faults::inject(
        RowHold::update(&ctx.db_url, CONTROL, "tool_operations", "operation_id", &held_op),
        &ctx.timeline,
    )
    .await?;
    let mut e = ctx.spawn_dispatcher("e", &tools).await?;
    let id = e.send(json!({"cmd": "dispatch", "claim_ttl_ms": 30_000, "call_timeout_ms": 5_000, "limit": 1})).await?;
    // Either the answer comes, or the dispatcher is seen waiting on the held row: only that
    // observation counts as waiting (a slow machine only makes the answer late).
    let started = std::time::Instant::now();
    let mut waited = false;
    let mut early = None;
    while started.elapsed() < STEP {
        if let Some(a) = e.poll_event(|ev| ev["id"] == json!(id)) {
            early = Some(a);
            break;
        }
        if hold.blocks(&ctx.pool, &e.owner).await? {
            waited = true;
            break;
        }
        tokio::time::sleep(fenceproof_harness::wait::POLL_EVERY).await;
    }
    hold.heal().await?;
    let answer = match early {
        Some(a) => a,
        None => e.reply(id, STEP).await?,
    };
    let (h, n) = (ctx.operation(&held_op).await?, ctx.operation(&next_op).await?);
    ctx.check(Check::expect(
        tagged(
            tags::CLAIM_SKIP_LOCKED,
            "a claim skips the row another transaction holds and takes the next, without waiting",
        ),
        !waited
            && h["dispatch_owner"] != serde_json::Value::String(e.owner.clone())
            && n["dispatch_owner"] == serde_json::Value::String(e.owner.clone()),
        format!(
            "answered {} {}; the held operation is {} (claimed by {}), the next is {} (claimed by {})",
            if waited { "only after the hold was released" } else { "at once" },
            outcome(&answer),
            h["status"],
            h["dispatch_owner"],
            n["status"],
            n["dispatch_owner"]
        ),
    ));

    for p in [&mut w, &mut v, &mut d, &mut e] {
        p.shutdown(STEP).await?;
    }
    let entries = fenceproof_harness::record::ledger::entries(&tools.ledger)?;
    ctx.check(invariants::one_effect_per_operation(&entries, &["idem"]));
    let _rows = ctx.commits().await?;
    ctx.note(format!("{} boundary checks on the worker's dispatcher", ctx.checks.len()));
    drop(tools);
    Ok(())
}

/// A live run whose owner V planned two steps: V, and the older and the newer intent.
async fn two_prepared_intents(ctx: &Ctx) -> Result<(WorkerProc, String, String), HarnessError> {
    let live =
        runs::create_run(&ctx.pool, "task-wg-live", json!({})).await.map_err(|e| HarnessError::Other(e.to_string()))?;
    let mut v = ctx.spawn_worker("v", vec![]).await?;
    require_ok(&v.request(acquire(live), STEP).await?, "V acquires")?;
    require_ok(&v.request(json!({"cmd": "start"}), STEP).await?, "V starts")?;
    let first = v.request(plan("first"), STEP).await?;
    require_ok(&first, "V plans a first step")?;
    let second = v.request(plan("second"), STEP).await?;
    require_ok(&second, "V plans a second step")?;
    let (held_op, next_op) = (
        data(&first)["operation_id"].as_str().unwrap_or_default().to_string(),
        data(&second)["operation_id"].as_str().unwrap_or_default().to_string(),
    );
    Ok((v, held_op, next_op))
}
