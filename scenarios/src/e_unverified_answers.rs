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

use fenceproof_harness::check::evidence::shown;
use fenceproof_harness::check::intents::canonical_digest;
use fenceproof_harness::check::{invariants, Check};
use fenceproof_harness::faults;
use fenceproof_harness::faults::tools::{self as remote, ArmedToolFault, ToolFault};
use fenceproof_harness::procs::tools::ToolsProc;
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::record::ledger;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::{json, Value};

use crate::ctx::{data, outcome, require_ok, Ctx, STEP};
use crate::experiment::{Checks, Experiment, Judges};
use crate::outbox_setup::exacting_request;

pub const TITLE_NO_ANSWER: &str = "Remote call with no verified answer (503, hang, answer lost after the create)";
pub const TITLE_CONFLICT: &str = "Deterministic-id conflicts: own earlier creation vs a name taken by another intent";
pub const TITLE_REPLAN: &str = "Takeover plans the same step again: same operation_id, one execution";

/// Its registration: what it needs and what it judges.
pub const NO_ANSWER: Experiment = Experiment {
    id: "E-no-answer",
    title: TITLE_NO_ANSWER,
    section: "11 E; 08, 09",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(no_answer(c)),
};

/// Its registration: what it needs and what it judges.
pub const CONFLICT: Experiment = Experiment {
    id: "E-conflict",
    title: TITLE_CONFLICT,
    section: "11 E; 08, 09",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(conflict(c)),
};

/// Its registration: what it needs and what it judges.
pub const REPLAN: Experiment = Experiment {
    id: "E-replan",
    title: TITLE_REPLAN,
    section: "11 E; 08, 09",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(replan(c)),
};

/// The names of its checks (the rule catalogue links rules to them). E-no-answer names each call's checks `{tool}, {fault mode}: {what}` (see `call_check`); the `ANY_` patterns match them for every call.
pub const UNVERIFIED_LEAVES_UNKNOWN: &str =
    "the unverified call leaves the operation unknown (not failed, not succeeded)";
pub const ANY_UNVERIFIED_LEAVES_UNKNOWN: &str =
    "*: the unverified call leaves the operation unknown (not failed, not succeeded)";
pub const CALL_REACHED_TOOL: &str = "the call reached the tool as often as the fault lets it create (tools' ledger)";
pub const ANY_CALL_REACHED_TOOL: &str =
    "*: the call reached the tool as often as the fault lets it create (tools' ledger)";
pub const STILL_UNKNOWN_AFTER_RECONCILE: &str =
    "after reconcile the operation is still unknown and raised, with no second create";
pub const ANY_STILL_UNKNOWN_AFTER_RECONCILE: &str =
    "*: after reconcile the operation is still unknown and raised, with no second create";
pub const RECONCILE_CONVERGES: &str = "reconcile converges it to the remote fact: succeeded, exactly one resource";
pub const ANY_RECONCILE_CONVERGES: &str =
    "*: reconcile converges it to the remote fact: succeeded, exactly one resource";
pub const OWN_409_IS_OWN_CREATION: &str =
    "a 409 carrying the operation's own operation_id is its own creation: succeeded with that resource";
pub const STILL_ONE_RESOURCE: &str = "and still one resource of that name (tools' ledger)";
pub const FOREIGN_409_NOT_SUCCESS: &str = "a 409 naming another intent is never recorded as this operation's success";
pub const NEVER_CONVERGES_TO_FOREIGN: &str =
    "the reconciler never converges an operation to a resource another intent created under its name";
pub const FIVE_OH_THREE_LEAVES_UNKNOWN: &str = "the 503 leaves the operation unknown";
pub const REPLAN_KEEPS_OPERATION_ID: &str =
    "the new term's plan of the same step and request keeps the operation_id: one intent registered";
pub const MODIFIED_EFFECT_NEW_ID: &str =
    "a modified effect (effect_version 2, another request) is registered under a new operation_id beside the original";
pub const EXECUTED_ONCE: &str = "the planned intent was executed once (tools' ledger, under any key)";

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
    let tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let mut ops = Vec::new();
    for (i, (tool, fault)) in no_answer_cases().into_iter().enumerate() {
        let op = plan_call(&mut w, i, tool, fault, &tag).await?;
        let armed =
            faults::inject(ArmedToolFault::new(tools.addr, tool, fault).for_operation(&op), &ctx.timeline).await?;
        judge_unverified_call(ctx, &mut d, &tools, (tool, fault), &op).await?;
        armed.heal().await?;
        ops.push((tool.to_string(), fault, op));
    }

    // A reconciler pass: what can be asked converges, what cannot stays unknown and is raised.
    judge_reconcile(ctx, &mut d, &tools, &ops).await?;
    d.shutdown(STEP).await?;
    require_ok(&w.request(json!({"cmd": "release"}), STEP).await?, "release")?;
    w.shutdown(STEP).await?;
    let entries = ledger::entries(&tools.ledger)?;
    ctx.check(invariants::one_effect_per_operation(&entries, &["idem", "detid", "plain", "opquery"]));
    let _rows = ctx.commits().await?;
    Ok(())
}

/// The (tool, fault) pairs of `E-no-answer`: every fault on the plain tool, and the faults each
/// querying or deduplicating tool must survive.
fn no_answer_cases() -> Vec<(&'static str, ToolFault)> {
    ToolFault::ALL
        .iter()
        .map(|f| ("plain", *f))
        .chain([
            ("idem", ToolFault::Error5xx),
            ("idem", ToolFault::DropAfterCommit),
            ("opquery", ToolFault::Error5xx),
            ("opquery", ToolFault::DropAfterCommit),
            ("detid", ToolFault::Hang),
        ])
        .collect()
}

/// The name of a check about one call of `E-no-answer`: `{tool}, {fault mode}: {what}`.
pub(crate) fn call_check(tool: &str, fault: ToolFault, what: &str) -> String {
    format!("{tool}, {}: {what}", fault.mode())
}

/// Case `i`: plan one call of `tool` whose request tells the tool which `fault` it is under.
async fn plan_call(
    w: &mut WorkerProc,
    i: usize,
    tool: &str,
    fault: ToolFault,
    tag: &str,
) -> Result<String, HarnessError> {
    let step = format!("call-{i}-{}", fault.mode().replace('_', "-"));
    let plan = w
        .request(json!({"cmd": "plan", "step_id": step, "tool": tool, "request": exacting_request(json!({"n": i, "fault": fault.mode(), "name": format!("na-{tag}-{i}")}))}), STEP)
        .await?;
    require_ok(&plan, "plan")?;
    Ok(data(&plan)["operation_id"].as_str().unwrap_or_default().to_string())
}

/// The call of `op` is dispatched alone under its armed fault: it must leave the operation
/// unknown, and reach the tool as often as the fault lets it create.
async fn judge_unverified_call(
    ctx: &mut Ctx,
    d: &mut WorkerProc,
    tools: &ToolsProc,
    (tool, fault): (&str, ToolFault),
    op: &str,
) -> Result<(), HarnessError> {
    let ev = d
        .request(
            json!({"cmd": "dispatch", "claim_ttl_ms": CLAIM_TTL_MS, "call_timeout_ms": CALL_TIMEOUT_MS, "limit": 1}),
            STEP,
        )
        .await?;
    let row = ctx.operation(op).await?;
    // The tools append a creation once it is made, which may be after the dispatcher gave up and
    // returned: read the ledger once it holds what the fault lets the call create, or its end.
    let want = usize::from(fault.creates());
    let entries = settled_ledger(tools, |e| created(e, op) >= want).await?;
    let n = created(&entries, op);
    ctx.check(Check::expect(
        call_check(tool, fault, UNVERIFIED_LEAVES_UNKNOWN),
        row["status"] == "unknown",
        format!(
            "ledger row {} after the dispatch (the dispatcher reported `{}`); the tool created {n} resource(s)",
            row["status"],
            reported(&ev, op)
        ),
    ));
    if n < want {
        // The call never reached the tool before the dispatcher's timeout (a starved machine):
        // `unknown` is right and no creation is owed; the moment this check needs was not made.
        ctx.notes.push(format!("{tool}/{}: the call did not reach the tool; not judged", fault.mode()));
        return Ok(());
    }
    ctx.check(Check::equal(call_check(tool, fault, CALL_REACHED_TOOL), n, want));
    Ok(())
}

/// The tools' ledger once `done` holds of it, or as it stands after a bounded wait (a call that
/// never reached the tools leaves it short).
async fn settled_ledger(tools: &ToolsProc, done: impl Fn(&[Value]) -> bool) -> Result<Vec<Value>, HarnessError> {
    let wait = std::time::Duration::from_millis(4 * CALL_TIMEOUT_MS as u64);
    let found = fenceproof_harness::wait::until("the tools' ledger entry of the call", wait, || async {
        let entries = ledger::entries(&tools.ledger)?;
        Ok(done(&entries).then_some(entries))
    })
    .await;
    match found {
        Ok(entries) => Ok(entries),
        Err(_) => Ok(ledger::entries(&tools.ledger)?),
    }
}

/// A reconciler pass with the cases' call timeout; while an operation whose remote fact can be
/// read is still unknown after it, another pass with a call timeout of [`SLOW_CALL_TIMEOUT_MS`]
/// (at most two more): on a busy machine the tools' answer to a query can come after the first
/// pass's timeout, and leaving the row unknown is then the reconciler's right answer. The last
/// pass's answer.
async fn reconciled(
    ctx: &mut Ctx,
    d: &mut WorkerProc,
    ops: &[(String, ToolFault, String)],
) -> Result<Value, HarnessError> {
    let mut timeout = CALL_TIMEOUT_MS;
    for pass in 1..=3 {
        let wait = if pass == 1 { STEP } else { STEP * 4 };
        let rec = d.request(json!({"cmd": "reconcile", "call_timeout_ms": timeout}), wait).await?;
        require_ok(&rec, "reconcile")?;
        let mut open = false;
        for (tool, fault, op) in ops {
            open |= !stays_unknown(tool, *fault) && ctx.operation(op).await?["status"] == "unknown";
        }
        if !open || pass == 3 {
            return Ok(rec);
        }
        ctx.timeline.record(
            "harness",
            "reconcile_again",
            "d",
            json!({"pass": pass + 1, "call_timeout_ms": SLOW_CALL_TIMEOUT_MS}),
        );
        timeout = SLOW_CALL_TIMEOUT_MS;
    }
    unreachable!("the third pass returns")
}

/// The call timeout of a reconciler's second and third pass.
const SLOW_CALL_TIMEOUT_MS: i64 = 10_000;

/// Whether a case's operation must stay unknown after reconciling: nothing proves what a tool
/// without a query did, nor what an operation query that finds nothing means (its acceptance
/// records may have gaps).
fn stays_unknown(tool: &str, fault: ToolFault) -> bool {
    tool == "plain" || (tool == "opquery" && !fault.creates())
}

/// One reconciler pass over every case: what can be asked converges to the remote fact with one
/// resource; what cannot stays unknown and is raised, with no second create.
async fn judge_reconcile(
    ctx: &mut Ctx,
    d: &mut WorkerProc,
    tools: &ToolsProc,
    ops: &[(String, ToolFault, String)],
) -> Result<(), HarnessError> {
    let rec = reconciled(ctx, d, ops).await?;
    let entries = ledger::entries(&tools.ledger)?;
    for (tool, fault, op) in ops {
        let row = ctx.operation(op).await?;
        let n = created(&entries, op);
        if stays_unknown(tool, *fault) {
            let raised = data(&rec)["raised"].as_array().is_some_and(|r| r.iter().any(|x| x[0] == op.as_str()));
            ctx.check(Check::expect(
                call_check(tool, *fault, STILL_UNKNOWN_AFTER_RECONCILE),
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
                call_check(tool, *fault, RECONCILE_CONVERGES),
                row["status"] == "succeeded" && n == 1 && row["remote_id"].as_str().map(str::to_string) == remote_id,
                format!(
                    "ledger row {} remote_id {}; {n} creation(s) under its operation_id",
                    row["status"], row["remote_id"]
                ),
            ));
        }
    }
    Ok(())
}

pub async fn conflict(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let tools = ctx.spawn_tools().await?;
    let mut w = started_run(ctx, "task-e-conflict").await?;
    let mut d = ctx.spawn_dispatcher("d", &tools).await?;
    let tag = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let other_intent = format!("tenant1/{}/elsewhere/v1", uuid::Uuid::new_v4());

    // 1. The resource already exists under this very operation_id (an earlier execution whose
    //    result the database never recorded): the 409 is the operation's own creation.
    judge_own_creation(ctx, (&mut w, &mut d), &tools, tag).await?;
    // 2. The name is taken by another intent: the dispatcher's 409 is not this operation's success.
    judge_name_taken(ctx, (&mut w, &mut d), &tools, tag, &other_intent).await?;
    // 3. The same, found by the reconciler's query: the call got no answer (503, nothing created),
    //    and meanwhile another intent took the name.
    judge_name_taken_meanwhile(ctx, (&mut w, &mut d), &tools, tag, &other_intent).await?;
    d.shutdown(STEP).await?;
    require_ok(&w.request(json!({"cmd": "release"}), STEP).await?, "release")?;
    w.shutdown(STEP).await?;
    let _rows = ctx.commits().await?;
    Ok(())
}

/// A dispatch of one operation, as the conflict cases send it.
fn dispatch_one() -> Value {
    json!({"cmd": "dispatch", "claim_ttl_ms": CLAIM_TTL_MS, "call_timeout_ms": CALL_TIMEOUT_MS, "limit": 1})
}

/// The run's owner `w` plans a step `step` on the deterministic-id tool naming the resource `name`.
async fn plan_named(w: &mut WorkerProc, step: &str, name: &str) -> Result<String, HarnessError> {
    let plan =
        w.request(json!({"cmd": "plan", "step_id": step, "tool": "detid", "request": {"name": name}}), STEP).await?;
    require_ok(&plan, "plan")?;
    Ok(data(&plan)["operation_id"].as_str().unwrap_or_default().to_string())
}

/// The resource already exists under the operation's own operation_id: the 409 is its creation.
async fn judge_own_creation(
    ctx: &mut Ctx,
    (w, d): (&mut WorkerProc, &mut WorkerProc),
    tools: &ToolsProc,
    tag: &str,
) -> Result<(), HarnessError> {
    let own_name = format!("own-{tag}");
    let own_op = plan_named(w, "own", &own_name).await?;
    remote::plant(tools.addr, "detid", &own_op, &json!({"name": own_name})).await?;
    ctx.timeline.record("harness", "planted", "tools", json!({"name": own_name, "operation_id": own_op}));
    let ev = d.request(dispatch_one(), STEP).await?;
    let row = ctx.operation(&own_op).await?;
    let answered = |e: &[Value]| e.iter().any(|x| x["operation_id"] == own_op.as_str() && x["kind"] == "answered");
    let entries = if row["status"] == "unknown" {
        settled_ledger(tools, answered).await?
    } else {
        ledger::entries(&tools.ledger)?
    };
    if row["status"] == "unknown" && (answered_too_late(&entries, &own_op) || !answered(&entries)) {
        return Err(HarnessError::Inconclusive(format!(
            "the tools' 409 for {own_op} came after the dispatcher's {CALL_TIMEOUT_MS} ms call timeout (its caller had gone): \
             `unknown` is the right answer to no answer, and the moment of a received 409 was not made"
        )));
    }
    ctx.check(Check::expect(
        OWN_409_IS_OWN_CREATION,
        row["status"] == "succeeded" && row["remote_id"] == own_name.as_str(),
        format!(
            "ledger row {} remote_id {} (the dispatcher reported `{}`)",
            row["status"],
            row["remote_id"],
            reported(&ev, &own_op)
        ),
    ));
    ctx.check(Check::equal(STILL_ONE_RESOURCE, created(&entries, &own_op), 1));
    Ok(())
}

/// Whether the tools answered `operation_id`'s call only after its caller stopped waiting (the
/// tools found no process holding the call's socket, or their observation alone took the call
/// timeout or longer): a
/// dispatcher that never received the answer rightly leaves the operation unknown.
fn answered_too_late(entries: &[Value], operation_id: &str) -> bool {
    entries.iter().any(|e| {
        e["operation_id"] == operation_id
            && e["kind"] == "answered"
            && (e["observed"]["caller"]["error"].as_str().is_some_and(|x| x.starts_with("no process holds"))
                || e["observed"]["took_ms"].as_i64().is_some_and(|t| t >= CALL_TIMEOUT_MS))
    })
}

/// The name is taken by another intent before the dispatch: its 409 is not this operation's.
async fn judge_name_taken(
    ctx: &mut Ctx,
    (w, d): (&mut WorkerProc, &mut WorkerProc),
    tools: &ToolsProc,
    tag: &str,
    other_intent: &str,
) -> Result<(), HarnessError> {
    let taken = format!("taken-{tag}");
    remote::plant(tools.addr, "detid", other_intent, &json!({"name": taken})).await?;
    ctx.timeline.record("harness", "planted", "tools", json!({"name": taken, "operation_id": other_intent}));
    let taken_op = plan_named(w, "taken", &taken).await?;
    let ev = d.request(dispatch_one(), STEP).await?;
    let row = ctx.operation(&taken_op).await?;
    ctx.check(Check::expect(
        FOREIGN_409_NOT_SUCCESS,
        row["status"] != "succeeded" && row["status"] != "dispatching",
        format!(
            "ledger row {} remote_id {} (the dispatcher reported `{}`)",
            row["status"],
            row["remote_id"],
            reported(&ev, &taken_op)
        ),
    ));
    Ok(())
}

/// The call gets a 503 (nothing created) and another intent takes the name meanwhile: the
/// reconciler's query must not converge the operation to that resource.
async fn judge_name_taken_meanwhile(
    ctx: &mut Ctx,
    (w, d): (&mut WorkerProc, &mut WorkerProc),
    tools: &ToolsProc,
    tag: &str,
    other_intent: &str,
) -> Result<(), HarnessError> {
    let late = format!("late-{tag}");
    let late_op = plan_named(w, "late", &late).await?;
    let armed = faults::inject(ArmedToolFault::new(tools.addr, "detid", ToolFault::Error5xx), &ctx.timeline).await?;
    let ev = d.request(dispatch_one(), STEP).await?;
    armed.heal().await?;
    let before = ctx.operation(&late_op).await?;
    if before["status"] != "unknown" {
        ctx.check(Check::fail(
            FIVE_OH_THREE_LEAVES_UNKNOWN,
            format!(
                "ledger row {} after a 503 (the dispatcher reported `{}`)",
                before["status"],
                reported(&ev, &late_op)
            ),
        ));
        return Ok(());
    }
    remote::plant(tools.addr, "detid", other_intent, &json!({"name": late})).await?;
    ctx.timeline.record("harness", "planted", "tools", json!({"name": late, "operation_id": other_intent}));
    let rec = d.request(json!({"cmd": "reconcile", "call_timeout_ms": CALL_TIMEOUT_MS}), STEP).await?;
    require_ok(&rec, "reconcile")?;
    let row = ctx.operation(&late_op).await?;
    ctx.check(Check::expect(
        NEVER_CONVERGES_TO_FOREIGN,
        row["status"] != "succeeded",
        format!(
            "after reconcile the ledger row is {} remote_id {}; reconcile answered {}",
            row["status"],
            row["remote_id"],
            data(&rec)
        ),
    ));
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
    // A's 600 ms lease lives on its 100 ms heartbeat: a start or plan refused after it lapsed
    // (A starved on a busy machine) is no broken rule.
    let started = a.request(json!({"cmd": "start"}), STEP).await?;
    ctx.require_ok_while_live(&started, "A start", run_id).await?;
    let plan_a = a.request(json!({"cmd": "plan", "step_id": "pay", "tool": "idem", "request": request}), STEP).await?;
    ctx.require_ok_while_live(&plan_a, "A plan", run_id).await?;
    let op_a = data(&plan_a)["operation_id"].as_str().unwrap_or_default().to_string();

    // A is paused past its lease; B takes over and resumes the same plan.
    let paused = a.pause().await?;
    ctx.wait_lease_expired(run_id).await?;
    let mut b = ctx.spawn_worker("b", vec![]).await?;
    require_ok(&b.request(acquire(run_id), STEP).await?, "B takeover")?;
    judge_same_plan(ctx, &mut b, run_id, &request, &op_a).await?;
    judge_modified_effect(ctx, &mut b, run_id, &op_a).await?;
    let entries = judge_executed_once(ctx, &tools, &op_a).await?;
    a.resume(paused).await?;
    a.kill().await?;
    require_ok(&b.request(json!({"cmd": "release"}), STEP).await?, "B release")?;
    b.shutdown(STEP).await?;
    ctx.check(invariants::one_effect_per_operation(&entries, &["idem", "detid", "plain", "opquery"]));
    let _rows = ctx.commits().await?;
    Ok(())
}

/// The new term's plan of the same step and request gets A's operation_id, registered once.
async fn judge_same_plan(
    ctx: &mut Ctx,
    b: &mut WorkerProc,
    run_id: uuid::Uuid,
    request: &Value,
    op_a: &str,
) -> Result<(), HarnessError> {
    let plan_b = b.request(json!({"cmd": "plan", "step_id": "pay", "tool": "idem", "request": request}), STEP).await?;
    let op_b = data(&plan_b)["operation_id"].as_str().unwrap_or_default().to_string();
    let ops: Vec<String> = sqlx::query_scalar(
        "SELECT operation_id FROM tool_operations WHERE run_id = $1 AND step_id = 'pay' ORDER BY operation_id",
    )
    .bind(run_id)
    .fetch_all(&ctx.pool)
    .await?;
    ctx.check(Check::expect(
        REPLAN_KEEPS_OPERATION_ID,
        outcome(&plan_b) == "ok" && op_b == op_a && ops == vec![op_a.to_string()],
        format!(
            "A planned {op_a}; B's plan answered `{}` {op_b} ({}); the ledger holds {} for step pay",
            outcome(&plan_b),
            shown(&data(&plan_b)["registration"]),
            shown(&ops)
        ),
    ));
    Ok(())
}

/// A modified effect is a new intent beside the original, which stays for audit.
async fn judge_modified_effect(
    ctx: &mut Ctx,
    b: &mut WorkerProc,
    run_id: uuid::Uuid,
    op_a: &str,
) -> Result<(), HarnessError> {
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
        MODIFIED_EFFECT_NEW_ID,
        outcome(&plan_v2) == "ok"
            && op_v2 != op_a
            && rows.len() == 2
            && rows.iter().any(|(o, v)| o == &op_v2 && *v == 2),
        format!("plan of v2 answered `{}` {op_v2}; the ledger holds {}", outcome(&plan_v2), shown(&rows)),
    ));
    Ok(())
}

/// Executing the step: one resource for the intent, however many terms planned it. Returns the
/// tools' ledger.
async fn judge_executed_once(ctx: &mut Ctx, tools: &ToolsProc, op_a: &str) -> Result<Vec<Value>, HarnessError> {
    let mut d = ctx.spawn_dispatcher("d", tools).await?;
    let ev = d
        .request(json!({"cmd": "dispatch", "claim_ttl_ms": CLAIM_TTL_MS, "call_timeout_ms": 5000, "limit": 10}), STEP)
        .await?;
    require_ok(&ev, "dispatch")?;
    d.shutdown(STEP).await?;
    let entries = ledger::entries(&tools.ledger)?;
    // The intent's digest as the harness computes it from the registered body (not the stored one).
    let digest = canonical_digest(&ctx.operation(op_a).await?["request_body"]);
    let same_intent = entries.iter().filter(|e| e["kind"] == "created" && e["body_digest"] == digest.as_str()).count();
    ctx.check(Check::equal(EXECUTED_ONCE, same_intent, 1));
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use fenceproof_harness::check::rule::matches;

    use super::*;

    #[test]
    fn every_call_check_matches_its_pattern_and_no_other() {
        let pairs = [
            (UNVERIFIED_LEAVES_UNKNOWN, ANY_UNVERIFIED_LEAVES_UNKNOWN),
            (CALL_REACHED_TOOL, ANY_CALL_REACHED_TOOL),
            (STILL_UNKNOWN_AFTER_RECONCILE, ANY_STILL_UNKNOWN_AFTER_RECONCILE),
            (RECONCILE_CONVERGES, ANY_RECONCILE_CONVERGES),
        ];
        for (tool, fault) in no_answer_cases() {
            for (what, pattern) in pairs {
                let name = call_check(tool, fault, what);
                assert!(matches(pattern, &name), "{name} does not match {pattern}");
                for (_, other) in pairs.iter().filter(|(_, p)| *p != pattern) {
                    assert!(!matches(other, &name), "{name} also matches {other}");
                }
            }
        }
    }
}
