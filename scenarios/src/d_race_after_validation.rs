//! Experiment D — race after validation. Worker A's protected save locks and validates the lease
//! row, then is held inside that same transaction by a barrier the harness holds in the database.
//! While A waits, its lease expires on the database clock and worker B tries to take over. B must be
//! seen waiting on A's backend (pg_blocking_pids) and may proceed only after A's transaction ends:
//! takeover and commit get a deterministic serial order (spec section 06).
//!
//! With `verify --barriers proxy` the worker needs no `faults` support: its proxy holds the run
//! update that follows the lease check inside A's transaction. A worker whose protected write is
//! one statement (the fenced function, autocommit) has no point between validation and commit that
//! anything outside the server could hold; the row then says so and passes: the race inside the
//! function is judged by the P-api-commit probes.

use fenceproof_harness::check::{invariants, Check};
use fenceproof_harness::faults::proxy::Hold;
use fenceproof_harness::faults::DbBarrier;
use fenceproof_harness::record::oracle;
use fenceproof_harness::{wait, HarnessError};
use fenceproof_protocol::runs;
use serde_json::json;

use crate::ctx::{outcome, require_ok, Barriers, Ctx, CONTROL, STEP};

pub const TITLE: &str = "Race after validation: takeover waits for the validated transaction";

const BARRIER_KEY: i64 = 0x0D0D;

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let run_id =
        runs::create_run(&ctx.pool, "task-d", json!({})).await.map_err(|e| HarnessError::Other(e.to_string()))?;
    let (mut a, proxy) = match ctx.barriers {
        Barriers::Proxy => ctx.spawn_worker_proxied("a", vec![]).await.map(|(w, p)| (w, Some(p)))?,
        Barriers::Worker => (ctx.spawn_worker("a", vec![]).await?, None),
    };
    // A's heartbeat is slower than its TTL: the lease will lapse while A is held.
    let acq = a.request(json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 400, "heartbeat_ms": 60_000, "renew_timeout_ms": 1000}), STEP).await?;
    require_ok(&acq, "A acquire")?;
    let epoch_a = acq["epoch"].as_i64().unwrap_or(-1);
    require_ok(&a.request(json!({"cmd": "start"}), STEP).await?, "A start")?;

    // Fault: A validates the lease, then waits on the barrier holding the lease row lock.
    enum Held {
        Db(DbBarrier),
        Proxy(Hold),
    }
    let (held, a_pid, save_a) = match &proxy {
        None => {
            let barrier = DbBarrier::hold(&ctx.db_url, BARRIER_KEY).await?;
            ctx.timeline.record("harness", "barrier_hold", "database", json!({"key": BARRIER_KEY}));
            let faults = json!({"barriers": [{"point": "after_lease_validated", "key": BARRIER_KEY}]});
            let save_a = a.send(json!({"cmd": "save", "checkpoint": {"by": "a"}, "faults": faults})).await?;
            let a_pids = barrier.wait_blocked(&ctx.pool, &[a.owner.clone()], 1, STEP).await?;
            (Held::Db(barrier), a_pids[0], save_a)
        }
        Some(p) => {
            let hold = p.hold(fenceproof_harness::faults::proxy::patterns::RUN_WRITE, STEP)?;
            let save_a = a.send(json!({"cmd": "save", "checkpoint": {"by": "a"}})).await?;
            let h = hold.held_n(1, STEP).await?.remove(0);
            if !h.in_transaction {
                hold.release();
                let ra = a.reply(save_a, STEP).await?;
                ctx.check(Check::expect(
                    "A's protected write is one statement: nothing outside the server can come between its validation and its commit",
                    outcome(&ra) == "ok",
                    format!("A's save ran as one autocommit statement ({}): {}", h.sql.chars().take(60).collect::<String>(), outcome(&ra)),
                ));
                ctx.note("the protected write is one statement (autocommit): no point to hold between validation and commit outside the server; P-api-commit judges the race inside the function");
                a.shutdown(STEP).await?;
                return Ok(());
            }
            // A's transaction has checked the lease and holds its row; find its backend.
            let owner = a.owner.clone();
            let pool = ctx.pool.clone();
            let pid = wait::until("A's held transaction to show as idle in transaction", STEP, || {
                let (pool, owner) = (pool.clone(), owner.clone());
                async move {
                    let pid: Option<i32> = sqlx::query_scalar(
                        "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle in transaction' LIMIT 1",
                    )
                    .bind(&owner)
                    .fetch_optional(&pool)
                    .await?;
                    Ok(pid)
                }
            })
            .await?;
            (Held::Proxy(hold), pid, save_a)
        }
    };
    ctx.timeline.record("harness", "observed", "database", json!({"a_held_after_validation": a_pid}));

    ctx.wait_lease_expired(run_id).await?;

    // B tries to take over: it must wait on A, never finish first.
    let mut b = ctx.spawn_worker("b", vec![]).await?;
    let acq_b = b.send(json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 10_000, "heartbeat_ms": 1000, "renew_timeout_ms": 2000})).await?;
    let b_owner = b.owner.clone();
    let pool = ctx.pool.clone();
    let mut early = None;
    let waited = wait::until("B's takeover to wait on A, or to answer", STEP, || {
        let pool = pool.clone();
        let b_owner = b_owner.clone();
        let answered = b.poll_event(|e| e["id"] == json!(acq_b));
        async move {
            if let Some(ev) = answered {
                return Ok(Some(Err(ev)));
            }
            let pids: Vec<i32> = sqlx::query_scalar(
                "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND $2 = ANY(pg_blocking_pids(pid))",
            )
            .bind(&b_owner)
            .bind(a_pid)
            .fetch_all(&pool)
            .await?;
            Ok(pids.first().map(|p| Ok(*p)))
        }
    })
    .await?;
    let b_pid = match waited {
        Ok(pid) => Some(pid),
        Err(ev) => {
            early = Some(ev);
            None
        }
    };
    ctx.timeline.record("harness", "observed", "database", json!({"b_blocked_by_a": b_pid, "b_answered_early": early}));
    ctx.check(Check::expect(
        "B's takeover waits on A's open transaction (pg_blocking_pids)",
        b_pid.is_some(),
        match (&b_pid, &early) {
            (Some(p), _) => format!("B backend {p} blocked by A backend {a_pid}"),
            (None, ev) => format!("B answered while A was still held: {ev:?}"),
        },
    ));

    match held {
        Held::Db(barrier) => {
            barrier.release().await?;
            ctx.timeline.record("harness", "barrier_release", "database", json!({"key": BARRIER_KEY}));
        }
        Held::Proxy(hold) => hold.release(),
    }
    let ra = a.reply(save_a, STEP).await?;
    let rb = match early.take() {
        Some(ev) => ev,
        None => b.reply(acq_b, STEP).await?,
    };
    let epoch_b = rb["epoch"].as_i64().unwrap_or(-1);
    ctx.check(Check::equal("A's validated save commits (valid at check)", outcome(&ra), "ok"));
    ctx.check(Check::equal("B then takes over with epoch A + 1", (outcome(&rb), epoch_b), ("ok", epoch_a + 1)));

    // After the takeover A is fenced; B writes normally.
    let stale = a.request(json!({"cmd": "save", "checkpoint": {"by": "a (stale)"}}), STEP).await?;
    ctx.check(Check::equal("A is fenced after the takeover", outcome(&stale), "lease_lost"));
    let rev_now = oracle::run_state(&ctx.pool, run_id).await?.run["revision"].as_i64();
    let b_save =
        b.request(json!({"cmd": "save", "checkpoint": {"by": "b"}, "expected_revision": rev_now}), STEP).await?;
    ctx.check(Check::equal("B, the new holder, saves", outcome(&b_save), "ok"));
    a.shutdown(STEP).await?;
    b.shutdown(STEP).await?;

    let rows = ctx.commits().await?;
    let a_commit = rows.iter().find(|r| {
        r.is_runs() && r.writer == a.owner && r.new_field("checkpoint").map(|c| c["by"] == "a").unwrap_or(false)
    });
    let b_takeover =
        rows.iter().find(|r| r.is_leases() && r.writer == b.owner && r.new_i64("epoch") == Some(epoch_a + 1));
    let order = a_commit.zip(b_takeover).map(|(x, y)| (x.seq, y.seq));
    ctx.check(Check::expect(
        "serial order: A's commit, then B's takeover (oracle)",
        order.is_some_and(|(x, y)| x < y),
        format!("A commit #{:?}, B takeover #{:?}", a_commit.map(|r| r.seq), b_takeover.map(|r| r.seq)),
    ));
    let live_at_commit = a_commit.and_then(|r| r.lease_live_at_commit);
    if let Some(seq) = b_takeover.map(|r| r.seq) {
        ctx.check(invariants::silent_after(&rows, &a.owner, seq));
    }
    ctx.checks.extend(invariants::all(&rows, &[CONTROL]));
    ctx.note(format!(
        "A held after validation (pid {a_pid}); B blocked by it (pid {}); A committed #{} (lease live at commit: {}) before B's takeover #{} to epoch {epoch_b}",
        b_pid.map(|p| p.to_string()).unwrap_or_else(|| "none".into()),
        a_commit.map(|r| r.seq.to_string()).unwrap_or_else(|| "none".into()),
        live_at_commit.map(|l| l.to_string()).unwrap_or_else(|| "?".into()),
        b_takeover.map(|r| r.seq.to_string()).unwrap_or_else(|| "none".into())
    ));
    Ok(())
}
