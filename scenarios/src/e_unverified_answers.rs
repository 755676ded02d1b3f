//! The rest of experiment E's class: remote answers that are not a verified result, and intents
//! planned again by a later term. Each row judges the ledger rows and the tools' ledger, never the
//! worker's report (that is printed as secondary evidence).
//!
//! - `E-no-answer`: the tool answers 503, never answers, or creates and then drops or never sends
//!   its answer (spec §01, §07 "remote timeout", §09.3). Every such call must leave the operation
//!   `unknown` with its evidence — never `failed_final` (timeout is not failure), never
//!   `succeeded` (nothing was verified). Then a reconciler pass: the `plain` tool's operations stay
//!   unknown and raised, with no second create, and so do the `opquery` tool's that the tool has no
//!   record of (absence in an operation query is not proof it never ran); the `idem` tool's converge
//!   by a retry under the same key, the `detid` tool's by a query then a create, and the `opquery`
//!   tool's that it did run by its query, each with exactly one resource.
//! - `E-conflict`: a deterministic-id tool answers 409 (§09 "post-create conflict check tag,
//!   ownership, spec"). A resource tagged with the operation's own operation_id is its own
//!   creation (succeeded, that resource, no second one); a name taken by another intent is never
//!   taken as the operation's success, neither by the dispatcher nor by the reconciler's query.
//! - `E-replan`: the owner that took over plans the same step again (§01, §08: "takeover and retry
//!   must not generate new identities"; the takeover worker resumes the same plan). It must get
//!   the same operation_id, registered once, and executing it creates one resource; a modified
//!   effect (effect_version 2, another request) is a new operation_id beside the original.

use fenceproof_harness::check::intents::canonical_digest;
use fenceproof_harness::check::{invariants, Check};
use fenceproof_harness::faults::tools::{self as remote, ToolFault};
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::record::ledger;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::{json, Value};

use crate::ctx::{data, outcome, require_ok, Ctx, CONTROL, STEP};
use crate::outbox_setup::exacting_request;

pub const TITLE_NO_ANSWER: &str = "Remote call with no verified answer (503, hang, answer lost after the create)";
pub const TITLE_CONFLICT: &str = "Deterministic-id conflicts: own earlier creation vs a name taken by another intent";
pub const TITLE_REPLAN: &str = "Takeover plans the same step again: same operation_id, one execution";

/// The dispatchers' call timeout: long enough for a loaded machine, short enough for the hangs.
const CALL_TIMEOUT_MS: i64 = 1500;
/// Claims outlive the row, so no reconciler moves them while the dispatcher is still deciding.
const CLAIM_TTL_MS: i64 = 60_000;

fn acquire(run_id: uuid::Uuid) -> Value {
    json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 30_000, "heartbeat_ms": 2000, "renew_timeout_ms": 2000})
}

/// A new run, acquired and started by a fresh worker `w` (the run's owner for the whole row).
async fn started_run(ctx: &Ctx, task: &str) -> Result<WorkerProc, HarnessError> {
    let run_id = runs::create_run(&ctx.pool, task, json!({})).await.map_err(|e| HarnessError::Other(e.to_string()))?;
    let mut w = ctx.spawn_worker("w", vec![]).await?;
    require_ok(&w.request(acquire(run_id), STEP).await?, "acquire")?;
    require_ok(&w.request(json!({"cmd": "start"}), STEP).await?, "start")?;
    Ok(w)
}

fn created(entries: &[Value], op: &str) -> usize {
    ledger::created_for(entries, op).len()
}

/// The dispatch entry for `op` in a dispatch answer, as the worker reported it.
fn reported(ev: &Value, op: &str) -> String {
    data(ev)
        .as_array()
        .and_then(|a| a.iter().find(|e| e["operation_id"] == op))
        .map(|e| e["outcome"].as_str().unwrap_or("?").to_string())
        .unwrap_or_else(|| format!("no entry ({})", outcome(ev)))
}

pub async fn no_answer(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let tools = ctx.spawn_tools().await?;
    let mut w = started_run(ctx, "task-e-no-answer").await?;
    let mut d = ctx.spawn_dispatcher("d", &tools).await?;

    // One operation per (tool, fault), each dispatched alone right after its fault is armed.
    let cases: Vec<(&str, ToolFault)> = ToolFault::ALL
        .iter()
        .map(|f| ("plain", *f))
        .chain([
            ("idem", ToolFault::Error5xx),
            ("idem", ToolFault::DropAfterCommit),
            ("opquery", ToolFault::Error5xx),
            ("opquery", ToolFault::DropAfterCommit),
            ("detid", ToolFault::Hang),
        ])
        .collect();
    let tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let mut ops = Vec::new();
    for (i, (tool, fault)) in cases.iter().enumerate() {
        let step = format!("call-{i}-{}", fault.mode().replace('_', "-"));
        let plan = w
            .request(json!({"cmd": "plan", "step_id": step, "tool": tool, "request": exacting_request(json!({"n": i, "fault": fault.mode(), "name": format!("na-{tag}-{i}")}))}), STEP)
            .await?;
        require_ok(&plan, "plan")?;
        let op = data(&plan)["operation_id"].as_str().unwrap_or_default().to_string();
        remote::arm(tools.addr, tool, *fault).await?;
        ctx.timeline.record(
            "harness",
            "tool_fault",
            "tools",
            json!({"tool": tool, "mode": fault.mode(), "operation_id": op}),
        );
        let ev = d
            .request(
                json!({"cmd": "dispatch", "claim_ttl_ms": CLAIM_TTL_MS, "call_timeout_ms": CALL_TIMEOUT_MS, "limit": 1}),
                STEP,
            )
            .await?;
        let row = ctx.operation(&op).await?;
        let entries = ledger::entries(&tools.ledger)?;
        let n = created(&entries, &op);
        ctx.check(Check::expect(
            format!(
                "{tool}, {}: the unverified call leaves the operation unknown (not failed, not succeeded)",
                fault.mode()
            ),
            row["status"] == "unknown",
            format!(
                "ledger row {} after the dispatch (the dispatcher reported `{}`); the tool created {n} resource(s)",
                row["status"],
                reported(&ev, &op)
            ),
        ));
        ctx.check(Check::equal(
            format!(
                "{tool}, {}: the call reached the tool as often as the fault lets it create (tools' ledger)",
                fault.mode()
            ),
            n,
            usize::from(fault.creates()),
        ));
        ops.push((tool.to_string(), *fault, op));
    }

    // A reconciler pass: what can be asked converges, what cannot stays unknown and is raised.
    let rec = d.request(json!({"cmd": "reconcile", "call_timeout_ms": CALL_TIMEOUT_MS}), STEP).await?;
    require_ok(&rec, "reconcile")?;
    let entries = ledger::entries(&tools.ledger)?;
    for (tool, fault, op) in &ops {
        let row = ctx.operation(op).await?;
        let n = created(&entries, op);
        // Nothing proves what a tool without a query did, nor what an operation query that finds
        // nothing means (its acceptance records may have gaps): those stay unknown.
        let stays_unknown = tool == "plain" || (tool == "opquery" && !fault.creates());
        if stays_unknown {
            let raised = data(&rec)["raised"].as_array().is_some_and(|r| r.iter().any(|x| x[0] == op.as_str()));
            ctx.check(Check::expect(
                format!(
                    "{tool}, {}: after reconcile the operation is still unknown and raised, with no second create",
                    fault.mode()
                ),
                row["status"] == "unknown" && raised && n == usize::from(fault.creates()),
                format!(
                    "ledger row {}, raised {raised}, {n} creation(s); reconcile answered {}",
                    row["status"],
                    data(&rec)
                ),
            ));
        } else {
            let remote_id =
                ledger::created_for(&entries, op).first().and_then(|e| e["resource_id"].as_str()).map(str::to_string);
            ctx.check(Check::expect(
                format!(
                    "{tool}, {}: reconcile converges it to the remote fact: succeeded, exactly one resource",
                    fault.mode()
                ),
                row["status"] == "succeeded" && n == 1 && row["remote_id"].as_str().map(str::to_string) == remote_id,
                format!(
                    "ledger row {} remote_id {}; {n} creation(s) under its operation_id",
                    row["status"], row["remote_id"]
                ),
            ));
        }
    }
    d.shutdown(STEP).await?;
    require_ok(&w.request(json!({"cmd": "release"}), STEP).await?, "release")?;
    w.shutdown(STEP).await?;
    let entries = ledger::entries(&tools.ledger)?;
    ctx.check(invariants::one_effect_per_operation(&entries, &["idem", "detid", "plain", "opquery"]));
    let rows = ctx.commits().await?;
    ctx.checks.extend(invariants::all(&rows, &[CONTROL]));
    Ok(())
}

pub async fn conflict(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let tools = ctx.spawn_tools().await?;
    let mut w = started_run(ctx, "task-e-conflict").await?;
    let mut d = ctx.spawn_dispatcher("d", &tools).await?;
    let tag = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let other_intent = format!("tenant1/{}/elsewhere/v1", uuid::Uuid::new_v4());
    let dispatch =
        json!({"cmd": "dispatch", "claim_ttl_ms": CLAIM_TTL_MS, "call_timeout_ms": CALL_TIMEOUT_MS, "limit": 1});

    // 1. The resource already exists under this very operation_id (an earlier execution whose
    //    result the database never recorded): the 409 is the operation's own creation.
    let own_name = format!("own-{tag}");
    let plan = w
        .request(json!({"cmd": "plan", "step_id": "own", "tool": "detid", "request": {"name": own_name}}), STEP)
        .await?;
    require_ok(&plan, "plan")?;
    let own_op = data(&plan)["operation_id"].as_str().unwrap_or_default().to_string();
    remote::plant(tools.addr, "detid", &own_op, &json!({"name": own_name})).await?;
    ctx.timeline.record("harness", "planted", "tools", json!({"name": own_name, "operation_id": own_op}));
    let ev = d.request(dispatch.clone(), STEP).await?;
    let row = ctx.operation(&own_op).await?;
    let entries = ledger::entries(&tools.ledger)?;
    ctx.check(Check::expect(
        "a 409 carrying the operation's own operation_id is its own creation: succeeded with that resource",
        row["status"] == "succeeded" && row["remote_id"] == own_name.as_str(),
        format!(
            "ledger row {} remote_id {} (the dispatcher reported `{}`)",
            row["status"],
            row["remote_id"],
            reported(&ev, &own_op)
        ),
    ));
    ctx.check(Check::equal("and still one resource of that name (tools' ledger)", created(&entries, &own_op), 1));

    // 2. The name is taken by another intent: the dispatcher's 409 is not this operation's success.
    let taken = format!("taken-{tag}");
    remote::plant(tools.addr, "detid", &other_intent, &json!({"name": taken})).await?;
    ctx.timeline.record("harness", "planted", "tools", json!({"name": taken, "operation_id": other_intent}));
    let plan = w
        .request(json!({"cmd": "plan", "step_id": "taken", "tool": "detid", "request": {"name": taken}}), STEP)
        .await?;
    require_ok(&plan, "plan")?;
    let taken_op = data(&plan)["operation_id"].as_str().unwrap_or_default().to_string();
    let ev = d.request(dispatch.clone(), STEP).await?;
    let row = ctx.operation(&taken_op).await?;
    ctx.check(Check::expect(
        "a 409 naming another intent is never recorded as this operation's success",
        row["status"] != "succeeded" && row["status"] != "dispatching",
        format!(
            "ledger row {} remote_id {} (the dispatcher reported `{}`)",
            row["status"],
            row["remote_id"],
            reported(&ev, &taken_op)
        ),
    ));

    // 3. The same, found by the reconciler's query: the call got no answer (503, nothing created),
    //    and meanwhile another intent took the name.
    let late = format!("late-{tag}");
    let plan =
        w.request(json!({"cmd": "plan", "step_id": "late", "tool": "detid", "request": {"name": late}}), STEP).await?;
    require_ok(&plan, "plan")?;
    let late_op = data(&plan)["operation_id"].as_str().unwrap_or_default().to_string();
    remote::arm(tools.addr, "detid", ToolFault::Error5xx).await?;
    let ev = d.request(dispatch.clone(), STEP).await?;
    let before = ctx.operation(&late_op).await?;
    if before["status"] == "unknown" {
        remote::plant(tools.addr, "detid", &other_intent, &json!({"name": late})).await?;
        ctx.timeline.record("harness", "planted", "tools", json!({"name": late, "operation_id": other_intent}));
        let rec = d.request(json!({"cmd": "reconcile", "call_timeout_ms": CALL_TIMEOUT_MS}), STEP).await?;
        require_ok(&rec, "reconcile")?;
        let row = ctx.operation(&late_op).await?;
        ctx.check(Check::expect(
            "the reconciler never converges an operation to a resource another intent created under its name",
            row["status"] != "succeeded",
            format!(
                "after reconcile the ledger row is {} remote_id {}; reconcile answered {}",
                row["status"],
                row["remote_id"],
                data(&rec)
            ),
        ));
    } else {
        ctx.check(Check::fail(
            "the 503 leaves the operation unknown",
            format!(
                "ledger row {} after a 503 (the dispatcher reported `{}`)",
                before["status"],
                reported(&ev, &late_op)
            ),
        ));
    }
    d.shutdown(STEP).await?;
    require_ok(&w.request(json!({"cmd": "release"}), STEP).await?, "release")?;
    w.shutdown(STEP).await?;
    let rows = ctx.commits().await?;
    ctx.checks.extend(invariants::all(&rows, &[CONTROL]));
    Ok(())
}

pub async fn replan(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let tools = ctx.spawn_tools().await?;
    let run_id = runs::create_run(&ctx.pool, "task-e-replan", json!({}))
        .await
        .map_err(|e| HarnessError::Other(e.to_string()))?;
    let request = exacting_request(json!({"to": "acct-1"}));
    let mut a = ctx.spawn_worker("a", vec![]).await?;
    let acq = a
        .request(
            json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 600, "heartbeat_ms": 100, "renew_timeout_ms": 300}),
            STEP,
        )
        .await?;
    require_ok(&acq, "A acquire")?;
    require_ok(&a.request(json!({"cmd": "start"}), STEP).await?, "A start")?;
    let plan_a = a.request(json!({"cmd": "plan", "step_id": "pay", "tool": "idem", "request": request}), STEP).await?;
    require_ok(&plan_a, "A plan")?;
    let op_a = data(&plan_a)["operation_id"].as_str().unwrap_or_default().to_string();

    // A is paused past its lease; B takes over and resumes the same plan.
    let paused = a.pause().await?;
    ctx.wait_lease_expired(run_id).await?;
    let mut b = ctx.spawn_worker("b", vec![]).await?;
    require_ok(&b.request(acquire(run_id), STEP).await?, "B takeover")?;
    let plan_b = b.request(json!({"cmd": "plan", "step_id": "pay", "tool": "idem", "request": request}), STEP).await?;
    let op_b = data(&plan_b)["operation_id"].as_str().unwrap_or_default().to_string();
    let ops: Vec<String> = sqlx::query_scalar(
        "SELECT operation_id FROM tool_operations WHERE run_id = $1 AND step_id = 'pay' ORDER BY operation_id",
    )
    .bind(run_id)
    .fetch_all(&ctx.pool)
    .await?;
    ctx.check(Check::expect(
        "the new term's plan of the same step and request keeps the operation_id: one intent registered",
        outcome(&plan_b) == "ok" && op_b == op_a && ops == vec![op_a.clone()],
        format!(
            "A planned {op_a}; B's plan answered `{}` {op_b:?} ({}); the ledger holds {ops:?} for step pay",
            outcome(&plan_b),
            data(&plan_b)["registration"]
        ),
    ));

    // A modified effect is a new intent beside the original, which stays for audit.
    let changed = exacting_request(json!({"to": "acct-2"}));
    let plan_v2 = b
        .request(
            json!({"cmd": "plan", "step_id": "pay", "tool": "idem", "effect_version": 2, "request": changed}),
            STEP,
        )
        .await?;
    let op_v2 = data(&plan_v2)["operation_id"].as_str().unwrap_or_default().to_string();
    let rows: Vec<(String, i32)> = sqlx::query_as(
        "SELECT operation_id, effect_version FROM tool_operations WHERE run_id = $1 AND step_id = 'pay' ORDER BY effect_version",
    )
    .bind(run_id)
    .fetch_all(&ctx.pool)
    .await?;
    ctx.check(Check::expect(
        "a modified effect (effect_version 2, another request) is registered under a new operation_id beside the original",
        outcome(&plan_v2) == "ok" && op_v2 != op_a && rows.len() == 2 && rows.iter().any(|(o, v)| o == &op_v2 && *v == 2),
        format!("plan of v2 answered `{}` {op_v2:?}; the ledger holds {rows:?}", outcome(&plan_v2)),
    ));

    // Executing the step: one resource for the intent, however many terms planned it.
    let mut d = ctx.spawn_dispatcher("d", &tools).await?;
    let ev = d
        .request(json!({"cmd": "dispatch", "claim_ttl_ms": CLAIM_TTL_MS, "call_timeout_ms": 5000, "limit": 10}), STEP)
        .await?;
    require_ok(&ev, "dispatch")?;
    d.shutdown(STEP).await?;
    let entries = ledger::entries(&tools.ledger)?;
    // The intent's digest as the harness computes it from the registered body (not the stored one).
    let digest = canonical_digest(&ctx.operation(&op_a).await?["request_body"]);
    let same_intent = entries.iter().filter(|e| e["kind"] == "created" && e["body_digest"] == digest.as_str()).count();
    ctx.check(Check::equal("the planned intent was executed once (tools' ledger, under any key)", same_intent, 1));
    a.resume(paused).await?;
    a.kill().await?;
    require_ok(&b.request(json!({"cmd": "release"}), STEP).await?, "B release")?;
    b.shutdown(STEP).await?;
    ctx.check(invariants::one_effect_per_operation(&entries, &["idem", "detid", "plain", "opquery"]));
    let rows = ctx.commits().await?;
    ctx.checks.extend(invariants::all(&rows, &[CONTROL]));
    Ok(())
}
