//! W-clock: the worker at the exact instant of expiry, on a server whose clock the harness freezes
//! (libfaketime; see [`crate::frozen_clock`]). At `expires_at = clock` the worker's lease has
//! expired: its save commits nothing and another worker's takeover succeeds. At
//! `dispatch_until = clock` a dispatcher's claim has expired: a reconciler moves it on (to unknown,
//! and then to the remote fact).

use fenceproof_harness::check::evidence::listed;
use fenceproof_harness::check::{invariants, Check};
use fenceproof_harness::procs::tools::ToolsProc;
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::json;

use crate::ctx::{outcome, require_ok, Ctx, STEP};
use crate::experiment::{Checks, Experiment, Judges, Need};
use crate::frozen_clock::FrozenServer;
use crate::outbox_setup;
use crate::tags::{self, tagged};

pub const TITLE: &str = "The worker at the exact instant of expiry (database clock frozen with libfaketime)";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "W-clock",
    title: TITLE,
    section: "05, 10",
    needs: &[Need::ClockServer],
    judges: Judges::Protocol,
    checks: Checks::NO_ANSWERS,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

const T0: &str = "2030-01-01 00:00:00";
const T1: &str = "2030-01-01 00:00:01";
const T2: &str = "2030-01-01 00:00:02";

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let server = FrozenServer::enter(ctx, T0).await?;
    let res = steps(ctx, &server).await;
    server.leave(ctx).await?;
    res
}

async fn steps(ctx: &mut Ctx, server: &FrozenServer) -> Result<(), HarnessError> {
    let err = |e: fenceproof_protocol::ProtocolError| HarnessError::Other(e.to_string());
    let run = runs::create_run(&ctx.pool, "task-wk", json!({})).await.map_err(err)?;
    let acquire = |ttl: i64| json!({"cmd": "acquire", "run_id": run, "ttl_ms": ttl, "heartbeat_ms": 600_000, "renew_timeout_ms": 5_000});
    let mut a = ctx.spawn_worker("a", vec![]).await?;
    require_ok(&a.request(acquire(1_000), STEP).await?, &format!("A takes a 1 s lease at {T0}"))?;
    require_ok(&a.request(json!({"cmd": "start"}), STEP).await?, "A starts")?;

    server.set(T1)?;
    let mark = ctx.oracle_mark().await?;
    let saved = a.request(json!({"cmd": "save", "checkpoint": {"at": T1}}), STEP).await?;
    let rows = ctx.commits().await?;
    let late: Vec<i64> = rows.iter().filter(|r| r.seq > mark && r.writer == a.owner).map(|r| r.seq).collect();
    ctx.check(
        Check::expect(
            tagged(
                tags::COMMIT_LEASE_OWNER_EPOCH_LIVE,
                &format!("at {T1}, the instant A's lease expires, A's save commits nothing"),
            ),
            late.is_empty(),
            format!(
                "A's save answered {}; commits by A: {}",
                outcome(&saved),
                listed(late.iter().map(|s| format!("#{s}")))
            ),
        )
        .citing(late.iter().copied()),
    );
    let mut b = ctx.spawn_worker("b", vec![]).await?;
    let took = b.request(acquire(600_000), STEP).await?;
    ctx.check(Check::expect(
        tagged(
            tags::LEASE_ACQUIRE_FREE_OR_EXPIRED,
            &format!("at {T1}, the instant A's lease expires, B's takeover succeeds"),
        ),
        outcome(&took) == "ok" && took["epoch"] == 2,
        format!("B's acquire answered {took}"),
    ));
    a.shutdown(STEP).await?;
    if outcome(&took) != "ok" {
        return Err(HarnessError::StepRefused {
            step: "B's takeover of an expired lease".into(),
            answer: took.to_string(),
        });
    }

    // A claim due at T2 whose dispatcher is gone after the remote call.
    let tools = ctx.spawn_tools().await?;
    let mut r = claim_due_at_t2(ctx, server, &mut b, &tools).await?;
    for p in [&mut b, &mut r] {
        p.shutdown(STEP).await?;
    }
    let entries = fenceproof_harness::record::ledger::entries(&tools.ledger)?;
    ctx.check(invariants::one_effect_per_operation(&entries, &["idem"]));
    let _rows = ctx.commits().await?;
    ctx.note(format!("{} checks at the frozen instants {T1} and {T2}", ctx.checks.len()));
    Ok(())
}

/// B plans a step; its dispatcher claims it (until T2), calls the tool and is killed before the
/// result; at T2, the instant the claim is due, a reconciler `r` moves it on. Returns `r`.
async fn claim_due_at_t2(
    ctx: &mut Ctx,
    server: &FrozenServer,
    b: &mut WorkerProc,
    tools: &ToolsProc,
) -> Result<WorkerProc, HarnessError> {
    let request = json!({"name": "clock-resource", "size": 1});
    let planned =
        b.request(json!({"cmd": "plan", "step_id": "create", "tool": "idem", "request": request}), STEP).await?;
    require_ok(&planned, "B plans a step")?;
    let op = planned["data"]["operation_id"].as_str().unwrap_or_default().to_string();
    let mut held = outbox_setup::dispatch_held_before_result(ctx, tools, "d", 0x636c_6f63, 1_000).await?;
    held.dispatcher.kill().await?;
    held.barrier.heal().await?;
    let claimed = ctx.operation(&op).await?;
    server.set(T2)?;
    let mut r = ctx.spawn_dispatcher("r", tools).await?;
    let pass = r.request(json!({"cmd": "reconcile"}), STEP).await?;
    let after = ctx.operation(&op).await?;
    ctx.check(Check::expect(
        tagged(
            tags::UNKNOWN_EXPIRED_CLAIM_AS_SEEN,
            &format!("at {T2}, the instant the claim is due, the reconciler moves it on"),
        ),
        claimed["status"] == "dispatching" && after["status"] != "dispatching",
        format!(
            "claim until {}, status {} before the pass; reconcile answered {}; status after {}",
            claimed["dispatch_until"],
            claimed["status"],
            outcome(&pass),
            after["status"]
        ),
    ));
    Ok(r)
}
