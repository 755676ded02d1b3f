//! Probe `script`: scripted mode (rows A and B-dbfreeze). With `--script --run-id R --steps N
//! --pace-ms MS --ttl-ms --heartbeat-ms --renew-timeout-ms` the worker runs the task alone:
//! acquire, start, N checkpoints `{"step": i, "of": N}`, succeed, release; `script_end` with
//! outcome `ok`, exit 0. Once its execution is cancelled (a renewal refused) it stops at once
//! without any terminal write, says `script_end` `stopped` and exits non-zero.

use std::time::Duration;

use fenceproof_harness::HarnessError;
use serde_json::{json, Value};

use super::{new_run, run_row, steal_lease, Points, THIEF};
use fenceproof_scenarios::ctx::{outcome, Ctx, Script, STEP};

fn script_args(run_id: uuid::Uuid, steps: u32, pace_ms: u64, heartbeat_ms: u64) -> Script {
    Script { run_id, steps, pace_ms, ttl_ms: 60_000, heartbeat_ms, renew_timeout_ms: 2000 }
}

pub async fn run(ctx: &mut Ctx, p: &mut Points) -> Result<(), HarnessError> {
    let run_id = new_run(ctx, "conf-script").await?;
    let mark = ctx.oracle_mark().await?;
    let mut w = ctx.spawn_worker("s", script_args(run_id, 3, 0, 10_000)).await?;
    let end = w.wait_event("script_end", STEP, |e| e["event"] == "script_end").await?;
    let code = w.wait_exit(STEP).await?;
    p.expect(
        "a scripted task run to its end says `script_end` `ok` and exits 0",
        outcome(&end) == "ok" && code == Some(0),
        format!("script_end `{}`, exit status {code:?}", outcome(&end)),
    );
    let (status, revision, checkpoint) = run_row(ctx, run_id).await?;
    let saved: Vec<Value> = ctx
        .commits()
        .await?
        .into_iter()
        .filter(|r| {
            r.seq > mark
                && r.is_runs()
                && r.new_str("status") == Some("running")
                && r.old_str("status") == Some("running")
        })
        .filter_map(|r| r.new_field("checkpoint").cloned())
        .collect();
    let want: Vec<Value> = (1..=3).map(|i| json!({"step": i, "of": 3})).collect();
    p.expect(
        "scripted mode saves the checkpoints {\"step\": i, \"of\": N} in order, one commit each",
        saved == want,
        format!("the scripted checkpoints committed: {}", Value::from(saved.clone())),
    );
    let (owner,): (Option<String>,) =
        sqlx::query_as("SELECT owner FROM worker_leases WHERE run_id = $1").bind(run_id).fetch_one(&ctx.pool).await?;
    p.expect(
        "scripted mode starts, saves, succeeds and releases: the run ends `succeeded` at revision N + 2, the lease free",
        status == "succeeded" && revision == 5 && owner.is_none() && checkpoint == json!({"step": 3, "of": 3}),
        format!("after the script: run {status} at revision {revision}, lease owner {owner:?}"),
    );

    // Cancelled mid-task: the lease is taken away while it paces between steps.
    let r2 = new_run(ctx, "conf-script-2").await?;
    let mut w = ctx.spawn_worker("t", script_args(r2, 1000, 50, 100)).await?;
    let started = fenceproof_harness::wait::until("the scripted task to save a checkpoint", STEP, || async {
        Ok((run_row(ctx, r2).await?.1 >= 2).then_some(()))
    })
    .await;
    if started.is_err() {
        p.expect("the scripted task saves its first checkpoint", false, "no checkpoint within the step timeout");
        return Ok(());
    }
    steal_lease(ctx, r2).await?;
    let end = w.wait_event("script_end", Duration::from_secs(10), |e| e["event"] == "script_end").await;
    let code = w.wait_exit(STEP).await?;
    let (status, ..) = run_row(ctx, r2).await?;
    let (owner,): (Option<String>,) =
        sqlx::query_as("SELECT owner FROM worker_leases WHERE run_id = $1").bind(r2).fetch_one(&ctx.pool).await?;
    p.expect(
        "after its execution is cancelled a scripted worker says `script_end` `stopped` and exits non-zero",
        end.as_ref().is_ok_and(|e| outcome(e) == "stopped") && code.is_some_and(|c| c != 0),
        format!(
            "after the lease was taken: script_end {}, exit status {code:?}",
            end.as_ref().map(|e| format!("`{}`", outcome(e))).unwrap_or_else(|_| "never came".into())
        ),
    );
    p.expect(
        "a cancelled scripted worker writes nothing terminal (the run stays `running`, the new term keeps its lease)",
        status == "running" && owner.as_deref() == Some(THIEF),
        format!("after the cancelled script: run {status}, lease owner {owner:?}"),
    );
    Ok(())
}
