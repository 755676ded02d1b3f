//! Setup steps shared by the side-effect experiments (E, F, G): a run whose current owner has
//! planned one tool operation, and a dispatcher held on a database barrier after the remote call
//! answered and before it writes the result — the precise "remote succeeded, caller not yet
//! recorded" moment, reached without any timing guess.

use fenceproof_harness::faults::{self, DbBarrier, Injected};
use fenceproof_harness::procs::tools::ToolsProc;
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::HarnessError;
use serde_json::json;
use uuid::Uuid;

use crate::ctx::{data, require_ok, Ctx, STEP};

pub struct Planned {
    pub run_id: Uuid,
    /// The run's current owner (heartbeat running).
    pub worker: WorkerProc,
    pub operation_id: String,
}

/// Acquire `run_id` with a new worker `name`, start it (when `start`), and plan one `tool` call.
pub async fn plan_operation(
    ctx: &Ctx,
    name: &str,
    run_id: Uuid,
    tool: &str,
    start: bool,
) -> Result<Planned, HarnessError> {
    let mut w = ctx.spawn_worker(name, vec![]).await?;
    let acq =
        json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 30_000, "heartbeat_ms": 2000, "renew_timeout_ms": 2000});
    require_ok(&w.request(acq, STEP).await?, "acquire")?;
    if start {
        require_ok(&w.request(json!({"cmd": "start"}), STEP).await?, "start")?;
    }
    // The deterministic-id tool names the resource after the request's `name`.
    let request = json!({"name": format!("res-{}", &run_id.simple().to_string()[..12]), "size": 1});
    let planned =
        w.request(json!({"cmd": "plan", "step_id": "create", "tool": tool, "request": request}), STEP).await?;
    require_ok(&planned, "plan")?;
    let operation_id = data(&planned)["operation_id"].as_str().unwrap_or_default().to_string();
    Ok(Planned { run_id, worker: w, operation_id })
}

pub struct HeldDispatch {
    pub dispatcher: WorkerProc,
    pub barrier: Injected<DbBarrier>,
    /// The id of the pending dispatch command.
    pub command: u64,
}

/// Start dispatcher `name`, let it claim and call the tool, and hold it before its result write.
pub async fn dispatch_held_before_result(
    ctx: &Ctx,
    tools: &ToolsProc,
    name: &str,
    key: i64,
    claim_ttl_ms: i64,
) -> Result<HeldDispatch, HarnessError> {
    let mut d = ctx.spawn_dispatcher(name, tools).await?;
    let barrier = faults::inject(DbBarrier::new(&ctx.db_url, key).at("before_result_write"), &ctx.timeline).await?;
    let faults = json!({"barriers": [{"point": "before_result_write", "key": key}]});
    let command = d.send(json!({"cmd": "dispatch", "claim_ttl_ms": claim_ttl_ms, "call_timeout_ms": 5000, "limit": 1, "faults": faults})).await?;
    barrier.wait_blocked(&ctx.pool, &[d.owner.clone()], 1, STEP).await?;
    ctx.timeline.record("harness", "observed", "database", json!({"dispatcher_held_before_result_write": d.owner}));
    Ok(HeldDispatch { dispatcher: d, barrier, command })
}

/// A request body that every RFC 8785 rule shapes: a float with an integral value (`7.0` is
/// spelled `7`), a fraction with a trailing zero, non-ASCII text (kept as UTF-8, not escaped), a
/// control character (escaped as `\u001f`), keys whose UTF-16 order differs from their code-point
/// order (U+FFFF sorts after U+10000's surrogates) and nested arrays and objects. A digest of
/// any other spelling of it (ASCII escapes, sorted by code point, `7.0`, spaces) differs.
pub fn exacting_request(extra: serde_json::Value) -> serde_json::Value {
    let mut v = json!({
        "amount": 7.0,
        "rate": 2.50,
        "memo": "café ☕ \u{1F600} naïve",
        "ctl": "a\u{1f}b\nc",
        "\u{ffff}-key": 1,
        "\u{10000}-key": 2,
        "nested": {"b": [1, 0.5, {"z": null, "a": true}], "a": "x/y"}
    });
    if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        for (k, x) in e {
            o.insert(k.clone(), x.clone());
        }
    }
    v
}
