//! Experiment C — same-epoch reorder: two saves carrying the same expected revision are put in
//! flight together inside one worker. Both transactions are held on a barrier the harness holds in
//! the database (seen waiting through pg_blocking_pids), then released at once. Exactly one may
//! commit, and the revision may rise by one only.
//!
//! With `verify --barriers proxy` the worker needs no `faults` support: its own wire-protocol proxy
//! holds the first statement of each protected write before the server sees it, and releases both.

use fenceproof_harness::check::{invariants, Check};
use fenceproof_harness::faults::proxy::{patterns, Hold};
use fenceproof_harness::faults::DbBarrier;
use fenceproof_harness::record::oracle;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::json;

use crate::ctx::{outcome, require_ok, Barriers, Ctx, CONTROL, STEP};

pub const TITLE: &str = "Same-epoch reorder: two concurrent saves with one expected revision";

const BARRIER_KEY: i64 = 0x0C0C;

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let run_id =
        runs::create_run(&ctx.pool, "task-c", json!({})).await.map_err(|e| HarnessError::Other(e.to_string()))?;
    let (mut w, proxy) = match ctx.barriers {
        Barriers::Proxy => ctx.spawn_worker_proxied("w", vec![]).await.map(|(w, p)| (w, Some(p)))?,
        Barriers::Worker => (ctx.spawn_worker("w", vec![]).await?, None),
    };
    require_ok(&w.request(json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 10_000, "heartbeat_ms": 1000, "renew_timeout_ms": 2000}), STEP).await?, "acquire")?;
    require_ok(&w.request(json!({"cmd": "start"}), STEP).await?, "start")?;
    let rev0 = oracle::run_state(&ctx.pool, run_id).await?.run["revision"].as_i64().unwrap_or(-1);
    let mark = ctx.oracle_mark().await?;

    // Fault: both saves wait inside their transactions on the harness's barrier (or, with the
    // proxy, before their first protected statement reaches the server).
    enum Held {
        Db(DbBarrier),
        Proxy(Hold),
    }
    let (held, faults) = match &proxy {
        Some(p) => (Held::Proxy(p.hold_n(patterns::PROTECTED_ENTRY, 2, STEP)?), None),
        None => {
            let barrier = DbBarrier::hold(&ctx.db_url, BARRIER_KEY).await?;
            ctx.timeline.record("harness", "barrier_hold", "database", json!({"key": BARRIER_KEY}));
            (Held::Db(barrier), Some(json!({"barriers": [{"point": "after_begin", "key": BARRIER_KEY}]})))
        }
    };
    let save = |writer: &str| {
        let mut c = json!({"cmd": "save", "checkpoint": {"writer": writer}, "expected_revision": rev0});
        if let Some(f) = &faults {
            c["faults"] = f.clone();
        }
        c
    };
    let id1 = w.send(save("first")).await?;
    let id2 = w.send(save("second")).await?;
    let blocked: Vec<String> = match held {
        Held::Db(barrier) => {
            let pids = barrier.wait_blocked(&ctx.pool, &[w.owner.clone()], 2, STEP).await?;
            ctx.timeline.record("harness", "observed", "database", json!({"blocked_on_barrier": pids}));
            ctx.check(Check::equal("both saves in flight inside the database before release", pids.len(), 2));
            barrier.release().await?;
            ctx.timeline.record("harness", "barrier_release", "database", json!({"key": BARRIER_KEY}));
            pids.iter().map(|p| format!("in-db pid {p}")).collect()
        }
        Held::Proxy(hold) => {
            let held = hold.held_n(2, STEP).await?;
            ctx.check(Check::equal("both saves in flight, held by the proxy before release", held.len(), 2));
            hold.release();
            held.iter().map(|h| format!("proxy connection {}", h.connection)).collect()
        }
    };

    let r1 = w.reply(id1, STEP).await?;
    let r2 = w.reply(id2, STEP).await?;
    let mut outcomes = vec![outcome(&r1).to_string(), outcome(&r2).to_string()];
    outcomes.sort();
    // A late arrival of the same epoch (spec §01: ordering within an epoch, so late arrivals
    // cannot overwrite newer results): a third save still naming the revision both raced at. A
    // worker that re-reads the revision instead of comparing the one it was given would commit it.
    let before_late = ctx.oracle_mark().await?;
    let late =
        w.request(json!({"cmd": "save", "checkpoint": {"writer": "late"}, "expected_revision": rev0}), STEP).await?;
    let late_commits = ctx.commits().await?.iter().filter(|r| r.seq > before_late && r.is_runs()).count();
    ctx.check(Check::expect(
        "a late save naming the raced revision is refused as a conflict and commits nothing",
        outcome(&late) == "conflict" && late_commits == 0,
        format!(
            "the late save at revision {rev0} answered `{}`; {late_commits} run commit(s) after it",
            outcome(&late)
        ),
    ));
    require_ok(&w.request(json!({"cmd": "release"}), STEP).await?, "release")?;
    w.shutdown(STEP).await?;

    let rows = ctx.commits().await?;
    let saves: Vec<_> =
        rows.iter().filter(|r| r.seq > mark && r.seq <= before_late && r.is_runs() && r.op == "UPDATE").collect();
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
        "2 saves held ({}) then raced: {}; revision {rev0}→{rev1}; winner {}",
        blocked.join(", "),
        outcomes.join("+"),
        winner.unwrap_or_else(|| "none".into())
    ));
    std::fs::write(ctx.dir.join("final_state.json"), serde_json::to_string_pretty(&fin).expect("json"))?;
    Ok(())
}
