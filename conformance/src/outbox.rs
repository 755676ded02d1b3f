//! Probe `outbox`: plan (operation_id, masked request, digest, the secret store the worker
//! creates), a re-plan with another request, a dispatch held at `before_result_write` whose claim
//! moves on meanwhile (`write_rejected`), a reconciler pass, and advance on a settled, an
//! unsettled and another run's operation.

use fenceproof_harness::check::intents;
use fenceproof_harness::faults::{self, DbBarrier};
use fenceproof_harness::procs::tools::ToolsProc;
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::record::ledger;
use fenceproof_harness::HarnessError;
use serde_json::{json, Value};

use super::{acquire, new_run, Points};
use fenceproof_scenarios::ctx::{data, outcome, Ctx, STEP};
use fenceproof_scenarios::outbox_setup::exacting_request;

const KEY: i64 = 0x0C10;

pub async fn run(ctx: &mut Ctx, p: &mut Points) -> Result<(), HarnessError> {
    let secret = format!("sk_conformance_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let store_before = ctx.secrets_dir().exists();
    let tools = ctx.spawn_tools().await?;
    let mut w = ctx.spawn_dispatcher("w", &tools).await?;
    let run_id = new_run(ctx, "conf-outbox").await?;
    w.request(acquire(run_id), STEP).await?;
    w.request(json!({"cmd": "start"}), STEP).await?;
    let Some(want_op) = plan_with_a_secret(ctx, p, &mut w, run_id, &secret, store_before).await? else {
        return Ok(());
    };
    refused_result_write(ctx, p, &mut w, &tools, &want_op, &secret).await?;
    reconcile_and_advance(ctx, p, &mut w, &tools, &want_op).await?;
    let mut w2 = another_runs_operation(ctx, p, &mut w, &tools).await?;
    expired_claim(ctx, p, &mut w, &mut w2, &tools).await?;
    w.shutdown(STEP).await?;
    w2.shutdown(STEP).await?;
    Ok(())
}

/// Plan a step whose request carries a secret: its operation_id, the masked request, its digest
/// and the secret store; then a re-plan with another request. The operation_id, or `None` when the
/// plan failed (nothing else can be probed).
async fn plan_with_a_secret(
    ctx: &Ctx,
    p: &mut Points,
    w: &mut WorkerProc,
    run_id: uuid::Uuid,
    secret: &str,
    store_before: bool,
) -> Result<Option<String>, HarnessError> {
    let store = ctx.secrets_dir();
    // Every RFC 8785 rule shapes the body (see `exacting_request`), so only a canonical digest matches.
    let request = exacting_request(json!({"amount": 5, "auth": {"$secret": {"name": "api-key", "value": secret}}}));
    let plan = w.request(json!({"cmd": "plan", "step_id": "pay", "tool": "idem", "request": request}), STEP).await?;
    if !p.outcome("plan of a new step", &plan, "ok") {
        return Ok(None);
    }
    // Contract v2: the operation_id is the team's format; it must name this intent's ledger row and
    // carry no owner id (the matrix judges its stability across terms from behaviour, E-replan).
    let want_op = data(&plan)["operation_id"].as_str().unwrap_or_default().to_string();
    let row = ctx.operation(&want_op).await.unwrap_or(Value::Null);
    p.expect(
        "plan answers the operation_id under which the intent (run, step, effect_version 1) is registered",
        row["run_id"] == json!(run_id) && row["step_id"] == "pay" && row["effect_version"] == 1,
        format!(
            "plan answered operation_id {want_op:?}; the ledger row under it: run_id {}, step_id {}, effect_version {}",
            row["run_id"], row["step_id"], row["effect_version"]
        ),
    );
    p.expect(
        "the operation_id does not carry the owner id",
        !want_op.contains(&w.owner),
        format!("plan answered operation_id {want_op:?}, which contains the worker's owner id {}", w.owner),
    );
    let masked = exacting_request(json!({"amount": 5, "auth": {"$secret": "api-key"}}));
    p.expect(
        "the plan registers the intent `prepared` with the secret replaced by its reference",
        row["status"] == "prepared" && row["request_body"] == masked,
        format!("the ledger row after plan: status {}, request_body {}", row["status"], row["request_body"]),
    );
    let digest = fenceproof_protocol::operation::request_digest(&masked);
    let stored = row["request_digest"].as_str().unwrap_or_default();
    p.expect(
        intents::DIGEST_POINT,
        stored == digest,
        if stored == digest {
            format!("request_digest {digest}, the SHA-256 of the body's RFC 8785 text")
        } else {
            intents::digest_deviation_reported(&masked, stored, data(&plan)["digest_input"].as_str())
        },
    );
    let files = std::fs::read_dir(&store).map(|d| d.count()).unwrap_or(0);
    p.expect(
        "the worker creates --secrets-dir and keeps the secret there",
        !store_before && files > 0,
        format!(
            "--secrets-dir {} {} after a plan with a secret field",
            store.display(),
            if store.exists() { format!("holds {files} file(s)") } else { "does not exist".into() }
        ),
    );
    let other = json!({"amount": 6});
    let again = w.request(json!({"cmd": "plan", "step_id": "pay", "tool": "idem", "request": other}), STEP).await?;
    p.outcome("plan of a step already planned with another request", &again, "intent_mismatch");

    Ok(Some(want_op))
}

/// Dispatch, held after the remote call and before the result write; meanwhile the claim moves
/// on (as a reconciler would after its expiry). The result write must be refused and reported.
async fn refused_result_write(
    ctx: &Ctx,
    p: &mut Points,
    w: &mut WorkerProc,
    tools: &ToolsProc,
    want_op: &str,
    secret: &str,
) -> Result<(), HarnessError> {
    let barrier = faults::inject(DbBarrier::new(&ctx.db_url, KEY).at("before_result_write"), &ctx.timeline).await?;
    let id = w
        .send(json!({"cmd": "dispatch", "claim_ttl_ms": 60_000,
                     "faults": {"barriers": [{"point": "before_result_write", "key": KEY}]}}))
        .await?;
    match barrier.wait_blocked(&ctx.pool, std::slice::from_ref(&w.owner), 1, STEP).await {
        Ok(pids) => {
            if let Some(why) = inside_transaction(ctx, pids[0]).await? {
                // Moving the claim could now wait on the worker's own transaction while the worker
                // waits on the barrier: name the deviation, let the dispatch go, judge no more here.
                p.expect("`before_result_write` is held outside any transaction", false, why);
                barrier.heal().await?;
                let _ = w.reply(id, STEP).await?;
                return Ok(());
            }
            p.expect("`before_result_write` is held outside any transaction", true, "");
            let entries = ledger::entries(&tools.ledger)?;
            let created = ledger::created_for(&entries, want_op);
            p.expect(
                "at `before_result_write` the remote call has been made, with the secret put back",
                created.len() == 1 && created[0].to_string().contains(secret),
                format!(
                    "held at before_result_write: {} creation(s) for {want_op} in the tools' ledger",
                    created.len()
                ),
            );
            sqlx::query(
                "UPDATE tool_operations SET status = 'unknown', dispatch_owner = NULL, dispatch_until = NULL,
                        result = '{\"unknown_because\": \"conformance moved the claim\"}', revision = revision + 1,
                        updated_at = clock_timestamp()
                  WHERE operation_id = $1 AND status = 'dispatching'",
            )
            .bind(want_op)
            .execute(&ctx.pool)
            .await?;
            barrier.heal().await?;
            let ev = w.reply(id, STEP).await?;
            let entry = data(&ev).get(0).cloned().unwrap_or(Value::Null);
            p.expect(
                "a result write refused because the claim moved on is reported as `write_rejected` in dispatch's data",
                outcome(&ev) == "ok" && entry["operation_id"] == json!(want_op) && entry["outcome"] == "write_rejected",
                format!("dispatch answered `{}` with data {}", outcome(&ev), data(&ev)),
            );
        }
        Err(_) => {
            barrier.heal().await?;
            let ev = w.reply(id, STEP).await?;
            p.expect(
                "a dispatch armed at `before_result_write` waits there inside the database",
                false,
                format!(
                    "dispatch with a barrier at `before_result_write` answered `{}` without waiting on it",
                    outcome(&ev)
                ),
            );
        }
    }
    let status = ctx.operation(want_op).await?["status"].clone();
    p.expect(
        "the refused result write left the ledger row as the claim's new holder made it",
        status == "unknown",
        format!("after the refused write the operation is {status}"),
    );

    Ok(())
}

/// Why the session `pid`, waiting at `before_result_write`, is inside a transaction, if it is: it
/// waits on the transaction-level advisory lock, it has written (a transaction id), or it holds a
/// lock on a table or row that only an open transaction keeps.
async fn inside_transaction(ctx: &Ctx, pid: i32) -> Result<Option<String>, HarnessError> {
    let (query, xid, held): (String, bool, Option<String>) = sqlx::query_as(
        "SELECT a.query, a.backend_xid IS NOT NULL,
                (SELECT string_agg(DISTINCT l.mode || ' on ' || coalesce(c.relname, l.locktype), ', ')
                   FROM pg_locks l LEFT JOIN pg_class c ON c.oid = l.relation
                  WHERE l.pid = a.pid AND l.granted
                    AND l.locktype NOT IN ('virtualxid', 'transactionid', 'advisory')
                    AND coalesce(c.relnamespace <> 'pg_catalog'::regnamespace, true))
           FROM pg_stat_activity a WHERE a.pid = $1",
    )
    .bind(pid)
    .fetch_one(&ctx.pool)
    .await?;
    let query: String = query.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(120).collect();
    let why = if query.to_lowercase().contains("advisory_xact_lock") {
        Some(format!("waits with a transaction-level lock (`{query}`)"))
    } else if xid {
        Some("waits in a transaction that has already written".to_string())
    } else {
        held.map(|h| format!("waits in a transaction that holds {h}"))
    };
    Ok(why.map(|w| {
        format!("the dispatcher held at `before_result_write` {w}; it must wait outside any transaction (`pg_advisory_lock_shared`, then unlock)")
    }))
}

/// The reconciler converges the unknown idempotent operation without a second creation; the run
/// advances on it.
async fn reconcile_and_advance(
    ctx: &Ctx,
    p: &mut Points,
    w: &mut WorkerProc,
    tools: &ToolsProc,
    want_op: &str,
) -> Result<(), HarnessError> {
    // The reconciler: an unknown operation of an idempotent tool converges by a retry with the same key.
    let rec = w.request(json!({"cmd": "reconcile"}), STEP).await?;
    let converged = data(&rec)["converged"].as_array().cloned().unwrap_or_default();
    let status = ctx.operation(want_op).await?["status"].clone();
    p.expect(
        "reconcile retries an unknown idempotent operation with its operation_id and converges it to succeeded",
        outcome(&rec) == "ok" && status == "succeeded",
        format!("reconcile answered `{}` with data {}; the operation is then {status}", outcome(&rec), data(&rec)),
    );
    p.advise(
        "reconcile reports what it converged in data.converged as [operation_id, status] pairs",
        converged.contains(&json!([want_op, "succeeded"])),
        format!("reconcile converged {want_op} and answered data.converged {}", data(&rec)["converged"]),
    );
    let entries = ledger::entries(&tools.ledger)?;
    let n = ledger::created_for(&entries, want_op).len();
    p.expect(
        "the retry created nothing new remotely",
        n == 1,
        format!("{n} creations for {want_op} after the reconciler"),
    );
    let adv = w.request(json!({"cmd": "advance", "operation_id": want_op}), STEP).await?;
    p.outcome("advance on the run's own succeeded operation", &adv, "ok");

    Ok(())
}

/// Another run's operation, first unsettled, then dispatched: advance refuses it; dispatch's
/// answer names it. The second dispatcher, for the next probe.
async fn another_runs_operation(
    ctx: &Ctx,
    p: &mut Points,
    w: &mut WorkerProc,
    tools: &ToolsProc,
) -> Result<WorkerProc, HarnessError> {
    let mut w2 = ctx.spawn_dispatcher("w2", tools).await?;
    let r2 = new_run(ctx, "conf-outbox-2").await?;
    w2.request(acquire(r2), STEP).await?;
    w2.request(json!({"cmd": "start"}), STEP).await?;
    let plan2 =
        w2.request(json!({"cmd": "plan", "step_id": "ship", "tool": "plain", "request": {"n": 1}}), STEP).await?;
    let op2 = data(&plan2)["operation_id"].as_str().unwrap_or_default().to_string();
    let foreign = w.request(json!({"cmd": "advance", "operation_id": op2}), STEP).await?;
    p.outcome("advance on another run's operation", &foreign, "foreign_operation");
    let early = w2.request(json!({"cmd": "advance", "operation_id": op2}), STEP).await?;
    p.outcome("advance on an operation not yet succeeded", &early, "operation_not_settled");
    let d = w2.request(json!({"cmd": "dispatch"}), STEP).await?;
    let entry = data(&d).get(0).cloned().unwrap_or(Value::Null);
    p.expect(
        "dispatch answers one data entry per claimed operation: its operation_id and outcome",
        outcome(&d) == "ok" && entry["operation_id"] == json!(op2) && entry["outcome"] == "succeeded",
        format!("dispatch answered `{}` with data {}", outcome(&d), data(&d)),
    );
    p.advise(
        "a dispatch entry names the operation's tool",
        entry["tool"] == "plain",
        format!("dispatch's entry for a `plain` operation has tool {}", entry["tool"]),
    );

    Ok(w2)
}

/// A dispatcher killed after its remote call on a deterministic-id tool: once its claim expires
/// the reconciler moves it to unknown, finds the resource by the request's `name` and converges.
async fn expired_claim(
    ctx: &Ctx,
    p: &mut Points,
    w: &mut WorkerProc,
    w2: &mut WorkerProc,
    tools: &ToolsProc,
) -> Result<(), HarnessError> {
    let name = format!("conf-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let plan3 =
        w2.request(json!({"cmd": "plan", "step_id": "book", "tool": "detid", "request": {"name": name}}), STEP).await?;
    let op3 = data(&plan3)["operation_id"].as_str().unwrap_or_default().to_string();
    let mut doomed = ctx.spawn_dispatcher("doomed", tools).await?;
    let barrier = faults::inject(DbBarrier::new(&ctx.db_url, KEY).at("before_result_write"), &ctx.timeline).await?;
    doomed
        .send(json!({"cmd": "dispatch", "claim_ttl_ms": 300,
                     "faults": {"barriers": [{"point": "before_result_write", "key": KEY}]}}))
        .await?;
    let held = barrier.wait_blocked(&ctx.pool, &[doomed.owner.clone()], 1, STEP).await;
    doomed.kill().await?;
    barrier.heal().await?;
    if held.is_ok() {
        ctx.wait_claim_expired(&op3).await?;
        let rec = w.request(json!({"cmd": "reconcile"}), STEP).await?;
        let marked = data(&rec)["marked_unknown"].as_array().cloned().unwrap_or_default();
        let converged = data(&rec)["converged"].as_array().cloned().unwrap_or_default();
        p.expect(
            "reconcile moves an expired claim to unknown and reports it in data.marked_unknown",
            marked.contains(&json!(op3)),
            format!("reconcile after the claim expired answered `{}` with data {}", outcome(&rec), data(&rec)),
        );
        let status = ctx.operation(&op3).await?["status"].clone();
        p.expect(
            "reconcile finds a deterministic-id resource by the request's `name` and converges the operation",
            status == "succeeded",
            format!(
                "reconcile of the unknown detid operation answered data {}; the operation is then {status}",
                data(&rec)
            ),
        );
        p.advise(
            "reconcile reports the converged detid operation in data.converged",
            converged.contains(&json!([op3, "succeeded"])),
            format!("data.converged {}", data(&rec)["converged"]),
        );
        let entries = ledger::entries(&tools.ledger)?;
        let n = ledger::created_for(&entries, &op3).len();
        p.expect("the detid resource exists once", n == 1, format!("{n} creations for {op3}"));
    }
    Ok(())
}
