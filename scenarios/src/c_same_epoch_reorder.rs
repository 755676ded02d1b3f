//! Experiment C — same-epoch reorder: two saves carrying the same expected revision are put in
//! flight together inside one worker. Both transactions are held on a barrier the harness holds in
//! the database (seen waiting through pg_blocking_pids), then released at once. Exactly one may
//! commit, and the revision may rise by one only.

use fenceproof_harness::check::{invariants, Check};
use fenceproof_harness::faults::DbBarrier;
use fenceproof_harness::record::oracle;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::json;

use crate::ctx::{outcome, require_ok, Ctx, CONTROL, STEP};

pub const TITLE: &str = "Same-epoch reorder: two concurrent saves with one expected revision";

const BARRIER_KEY: i64 = 0x0C0C;

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let run_id =
        runs::create_run(&ctx.pool, "task-c", json!({})).await.map_err(|e| HarnessError::Other(e.to_string()))?;
    let mut w = ctx.spawn_worker("w", vec![]).await?;
    require_ok(&w.request(json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 10_000, "heartbeat_ms": 1000, "renew_timeout_ms": 2000}), STEP).await?, "acquire")?;
    require_ok(&w.request(json!({"cmd": "start"}), STEP).await?, "start")?;
    let rev0 = oracle::run_state(&ctx.pool, run_id).await?.run["revision"].as_i64().unwrap_or(-1);
    let mark = ctx.oracle_mark().await?;

    // Fault: both saves wait inside their transactions on the harness's barrier.
    let barrier = DbBarrier::hold(&ctx.db_url, BARRIER_KEY).await?;
    ctx.timeline.record("harness", "barrier_hold", "database", json!({"key": BARRIER_KEY}));
    let faults = json!({"barriers": [{"point": "after_begin", "key": BARRIER_KEY}]});
    let id1 = w
        .send(json!({"cmd": "save", "checkpoint": {"writer": "first"}, "expected_revision": rev0, "faults": faults}))
        .await?;
    let id2 = w
        .send(json!({"cmd": "save", "checkpoint": {"writer": "second"}, "expected_revision": rev0, "faults": faults}))
        .await?;
    let blocked = barrier.wait_blocked(&ctx.pool, &[w.owner.clone()], 2, STEP).await?;
    ctx.timeline.record("harness", "observed", "database", json!({"blocked_on_barrier": blocked}));
    ctx.check(Check::equal("both saves in flight inside the database before release", blocked.len(), 2));
    barrier.release().await?;
    ctx.timeline.record("harness", "barrier_release", "database", json!({"key": BARRIER_KEY}));

    let r1 = w.reply(id1, STEP).await?;
    let r2 = w.reply(id2, STEP).await?;
    let mut outcomes = vec![outcome(&r1).to_string(), outcome(&r2).to_string()];
    outcomes.sort();
    require_ok(&w.request(json!({"cmd": "release"}), STEP).await?, "release")?;
    w.shutdown(STEP).await?;

    let rows = ctx.commits().await?;
    let saves: Vec<_> = rows.iter().filter(|r| r.seq > mark && r.is_runs() && r.op == "UPDATE").collect();
    ctx.check(Check::equal("exactly one save commits (oracle)", saves.len(), 1));
    ctx.check(Check::equal(
        "the worker is told: one ok, one conflict",
        outcomes.clone(),
        vec!["conflict".to_string(), "ok".to_string()],
    ));
    let fin = oracle::run_state(&ctx.pool, run_id).await?;
    let rev1 = fin.run["revision"].as_i64().unwrap_or(-1);
    ctx.check(Check::equal("revision rose by exactly one", rev1 - rev0, 1));
    let winner =
        saves.first().and_then(|r| r.new_field("checkpoint")).and_then(|c| c["writer"].as_str()).map(str::to_string);
    ctx.check(Check::equal(
        "final checkpoint is the committed save's",
        fin.run["checkpoint"]["writer"].as_str().map(str::to_string),
        winner.clone(),
    ));
    ctx.checks.extend(invariants::all(&rows, &[CONTROL]));
    ctx.note(format!(
        "2 saves held in-db (pids {blocked:?}) then raced: {}; revision {rev0}→{rev1}; winner {}",
        outcomes.join("+"),
        winner.unwrap_or_else(|| "none".into())
    ));
    std::fs::write(ctx.dir.join("final_state.json"), serde_json::to_string_pretty(&fin).expect("json"))?;
    Ok(())
}
