//! Experiment C — same-epoch reorder: two saves carrying the same expected revision are put in
//! flight together inside one worker. Both transactions are held on a barrier the harness holds in
//! the database (seen waiting through pg_blocking_pids), then released at once. Exactly one may
//! commit, and the revision may rise by one only.
//!
//! With `verify --barriers proxy` the worker needs no `faults` support: its own wire-protocol proxy
//! holds the first statement of each protected write before the server sees it, and releases both.

use fenceproof_harness::check::Check;
use fenceproof_harness::faults::proxy::{patterns, Hold};
use fenceproof_harness::faults::{self, DbBarrier, Injected};
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::record::oracle;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::json;

use crate::ctx::{outcome, require_ok, Barriers, Ctx, STEP};
use crate::experiment::{Checks, Experiment, Judges};

pub const TITLE: &str = "Same-epoch reorder: two concurrent saves with one expected revision";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "C",
    title: TITLE,
    section: "11 C; 06",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

/// The names of its checks, in the order it makes them (the rule catalogue links rules to them).
pub const BOTH_IN_FLIGHT_IN_DB: &str = "both saves in flight inside the database before release";
pub const BOTH_IN_FLIGHT_IN_PROXY: &str = "both saves in flight, held by the proxy before release";
pub const LATE_SAVE_REFUSED: &str =
    "a late save naming the raced revision is refused as a conflict and commits nothing";
pub const EXACTLY_ONE_SAVE: &str = "exactly one save commits (oracle)";
pub const TOLD_OK_AND_CONFLICT: &str = "the worker is told: one ok, one conflict";
pub const REVISION_PLUS_ONE: &str = "revision rose by exactly one";
pub const FINAL_IS_WINNERS: &str = "final checkpoint is the committed save's";

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
    let (held, faults) = match &proxy {
        Some(p) => {
            (Held::Proxy(faults::inject(p.hold_n(patterns::PROTECTED_ENTRY, 2, STEP)?, &ctx.timeline).await?), None)
        }
        None => {
            let barrier =
                faults::inject(DbBarrier::new(&ctx.db_url, ctx.lock_key(BARRIER_KEY)).at("after_begin"), &ctx.timeline)
                    .await?;
            (Held::Db(barrier), Some(json!({"barriers": [{"point": "after_begin", "key": ctx.lock_key(BARRIER_KEY)}]})))
        }
    };
    let id1 = w.send(save(rev0, "first", &faults)).await?;
    let id2 = w.send(save(rev0, "second", &faults)).await?;
    let blocked = release_both(ctx, &w, held).await?;

    let r1 = w.reply(id1, STEP).await?;
    let r2 = w.reply(id2, STEP).await?;
    let mut outcomes = vec![outcome(&r1).to_string(), outcome(&r2).to_string()];
    outcomes.sort();
    let before_late = judge_late_save(ctx, &mut w, rev0).await?;
    require_ok(&w.request(json!({"cmd": "release"}), STEP).await?, "release")?;
    w.shutdown(STEP).await?;
    verdict(ctx, run_id, (rev0, mark, before_late), &outcomes, &blocked).await
}

/// What holds the two saves: the harness's barrier in the database, or the worker's proxy.
enum Held {
    Db(Injected<DbBarrier>),
    Proxy(Injected<Hold>),
}

/// A save at `rev0` by `writer`, with the barrier `faults` when the worker holds itself.
fn save(rev0: i64, writer: &str, faults: &Option<serde_json::Value>) -> serde_json::Value {
    let mut c = json!({"cmd": "save", "checkpoint": {"writer": writer}, "expected_revision": rev0});
    if let Some(f) = faults {
        c["faults"] = f.clone();
    }
    c
}

/// Both saves are seen in flight, then released at once; returns where each was held.
async fn release_both(ctx: &mut Ctx, w: &WorkerProc, held: Held) -> Result<Vec<String>, HarnessError> {
    Ok(match held {
        Held::Db(barrier) => {
            let pids = barrier.wait_blocked(&ctx.pool, std::slice::from_ref(&w.owner), 2, STEP).await?;
            ctx.timeline.record("harness", "observed", "database", json!({"blocked_on_barrier": pids}));
            ctx.check(Check::equal(BOTH_IN_FLIGHT_IN_DB, pids.len(), 2));
            barrier.heal().await?;
            pids.iter().map(|p| format!("in-db pid {p}")).collect()
        }
        Held::Proxy(hold) => {
            let held = hold.held_n(2, STEP).await?;
            ctx.check(Check::equal(BOTH_IN_FLIGHT_IN_PROXY, held.len(), 2));
            hold.heal().await?;
            held.iter().map(|h| format!("proxy connection {}", h.connection)).collect()
        }
    })
}

/// A late arrival of the same epoch (spec §01: ordering within an epoch, so late arrivals
/// cannot overwrite newer results): a third save still naming the revision both raced at. A
/// worker that re-reads the revision instead of comparing the one it was given would commit it.
/// Returns the oracle's mark before it.
async fn judge_late_save(ctx: &mut Ctx, w: &mut WorkerProc, rev0: i64) -> Result<i64, HarnessError> {
    let before_late = ctx.oracle_mark().await?;
    let late =
        w.request(json!({"cmd": "save", "checkpoint": {"writer": "late"}, "expected_revision": rev0}), STEP).await?;
    let late_commits = ctx.commits().await?.iter().filter(|r| r.seq > before_late && r.is_runs()).count();
    ctx.check(Check::expect(
        LATE_SAVE_REFUSED,
        outcome(&late) == "conflict" && late_commits == 0,
        format!(
            "the late save at revision {rev0} answered `{}`; {late_commits} run commit(s) after it",
            outcome(&late)
        ),
    ));
    Ok(before_late)
}

/// Verdict from the oracle: exactly one of the raced saves committed, +1, and its checkpoint is
/// the run's. `marks` are the revision before the race, and the oracle's marks before the race
/// and before the late save.
async fn verdict(
    ctx: &mut Ctx,
    run_id: uuid::Uuid,
    marks: (i64, i64, i64),
    outcomes: &[String],
    blocked: &[String],
) -> Result<(), HarnessError> {
    let (rev0, mark, before_late) = marks;
    let rows = ctx.commits().await?;
    let saves: Vec<_> =
        rows.iter().filter(|r| r.seq > mark && r.seq <= before_late && r.is_runs() && r.op == "UPDATE").collect();
    ctx.check(Check::equal(EXACTLY_ONE_SAVE, saves.len(), 1));
    ctx.check(Check::equal(TOLD_OK_AND_CONFLICT, outcomes.to_vec(), vec!["conflict".to_string(), "ok".to_string()]));
    let fin = oracle::run_state(&ctx.pool, run_id).await?;
    let rev1 = fin.run["revision"].as_i64().unwrap_or(-1);
    ctx.check(Check::equal(REVISION_PLUS_ONE, rev1 - rev0, 1));
    let winner =
        saves.first().and_then(|r| r.new_field("checkpoint")).and_then(|c| c["writer"].as_str()).map(str::to_string);
    ctx.check(Check::equal(
        FINAL_IS_WINNERS,
        fin.run["checkpoint"]["writer"].as_str().map(str::to_string),
        winner.clone(),
    ));
    ctx.note(format!(
        "2 saves held ({}) then raced: {}; revision {rev0}→{rev1}; winner {}",
        blocked.join(", "),
        outcomes.join("+"),
        winner.unwrap_or_else(|| "none".into())
    ));
    std::fs::write(ctx.dir.join("final_state.json"), serde_json::to_string_pretty(&fin).expect("json"))?;
    Ok(())
}
