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

use fenceproof_harness::check::evidence::shown;
use fenceproof_harness::check::{invariants, Check};
use fenceproof_harness::faults::proxy::{Hold, Proxy};
use fenceproof_harness::faults::{self, DbBarrier, Injected};
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::record::oracle;
use fenceproof_harness::{wait, HarnessError};
use fenceproof_protocol::runs;
use serde_json::json;

use crate::ctx::{outcome, require_ok, Barriers, Ctx, STEP};
use crate::experiment::{Checks, Experiment, Judges};
use crate::measured::{self, LeaseTimes};

pub const TITLE: &str = "Race after validation: takeover waits for the validated transaction";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "D",
    title: TITLE,
    section: "11 D; 05.1, 06",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

/// The names of its checks, in the order it makes them (the rule catalogue links rules to them).
pub const ONE_STATEMENT: &str =
    "A's protected write is one statement: nothing outside the server can come between its validation and its commit";
pub const TAKEOVER_WAITS: &str = "B's takeover waits on A's open transaction (pg_blocking_pids)";
pub const VALIDATED_SAVE_COMMITS: &str = "A's validated save commits (valid at check)";
pub const TAKEOVER_EPOCH: &str = "B then takes over with epoch A + 1";
pub const A_FENCED: &str = "A is fenced after the takeover";
pub const NEW_HOLDER_SAVES: &str = "B, the new holder, saves";
pub const SERIAL_ORDER: &str = "serial order: A's commit, then B's takeover (oracle)";

const BARRIER_KEY: i64 = 0x0D0D;

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let run_id =
        runs::create_run(&ctx.pool, "task-d", json!({})).await.map_err(|e| HarnessError::Other(e.to_string()))?;
    let (mut a, proxy) = match ctx.barriers {
        Barriers::Proxy => ctx.spawn_worker_proxied("a", vec![]).await.map(|(w, p)| (w, Some(p)))?,
        Barriers::Worker => (ctx.spawn_worker("a", vec![]).await?, None),
    };
    // A's heartbeat is slower than its TTL: the lease will lapse while A is held. The TTL covers
    // A's start and the save's validation: at least 1.5 s (400 ms did not: a start sent 436 ms
    // after the acquire answered was rightly refused) and at least K measured round trips for
    // each of the two requests; the lapse itself is observed, not timed.
    let rt = measured::round_trip(ctx, &mut a).await?;
    let lease =
        LeaseTimes { ttl_ms: measured::covering(1500, 2, &rt) as i64, heartbeat_ms: 60_000, renew_timeout_ms: 1000 };
    let acq = a.request(lease.acquire(run_id), STEP).await?;
    require_ok(&acq, "A acquire")?;
    ctx.note(format!("round trip {} → A's {}", rt.describe(), lease.describe()));
    let epoch_a = acq["epoch"].as_i64().unwrap_or(-1);
    // A start that came after the short lease lapsed on the database clock (a loaded machine)
    // is no verdict, never a FAIL.
    let start = a.request(json!({"cmd": "start"}), STEP).await?;
    ctx.require_ok_while_live(&start, "A start", run_id).await?;

    // Fault: A validates the lease, then waits on the barrier holding the lease row lock.
    let (held, a_pid, save_a) = match &proxy {
        None => hold_in_db(ctx, &mut a).await?,
        Some(p) => match hold_in_proxy(ctx, &mut a, p, run_id).await? {
            Some(held) => held,
            None => return Ok(()),
        },
    };
    ctx.timeline.record("harness", "observed", "database", json!({"a_held_after_validation": a_pid}));

    ctx.wait_lease_expired(run_id).await?;

    // B tries to take over: it must wait on A, never finish first.
    let mut b = ctx.spawn_worker("b", vec![]).await?;
    // B's start-up is not B's takeover: the wait on A below is for a running B's acquire.
    b.wait_event("B's ready event", STEP, |e| e["event"] == "ready").await?;
    let acq_b = b.send(json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 10_000, "heartbeat_ms": 1000, "renew_timeout_ms": 2000})).await?;
    let (b_pid, mut early) = judge_b_waits(ctx, &mut b, acq_b, a_pid).await?;

    // Heal: A's transaction goes on and commits; only then does B's takeover.
    match held {
        Held::Db(barrier) => barrier.heal().await?,
        Held::Proxy(hold) => hold.heal().await?,
    }
    let ra = a.reply(save_a, STEP).await?;
    let rb = match early.take() {
        Some(ev) => ev,
        None => b.reply(acq_b, STEP).await?,
    };
    let epoch_b = rb["epoch"].as_i64().unwrap_or(-1);
    ctx.check(Check::equal(VALIDATED_SAVE_COMMITS, outcome(&ra), "ok"));
    ctx.check(Check::equal(TAKEOVER_EPOCH, (outcome(&rb), epoch_b), ("ok", epoch_a + 1)));

    // After the takeover A is fenced; B writes normally.
    let stale = a.request(json!({"cmd": "save", "checkpoint": {"by": "a (stale)"}}), STEP).await?;
    ctx.check(Check::equal(A_FENCED, outcome(&stale), "lease_lost"));
    let rev_now = oracle::run_state(&ctx.pool, run_id).await?.run["revision"].as_i64();
    let b_save =
        b.request(json!({"cmd": "save", "checkpoint": {"by": "b"}, "expected_revision": rev_now}), STEP).await?;
    ctx.check(Check::equal(NEW_HOLDER_SAVES, outcome(&b_save), "ok"));
    a.shutdown(STEP).await?;
    b.shutdown(STEP).await?;
    verdict(ctx, (&a.owner, &b.owner), (epoch_a, epoch_b), (a_pid, b_pid)).await
}

/// What holds A after its validation: the harness's barrier in the database, or A's proxy.
enum Held {
    Db(Injected<DbBarrier>),
    Proxy(Injected<Hold>),
}

/// A's save takes the worker's own barrier right after it validated the lease: what holds it,
/// A's backend pid, and the save's command id.
async fn hold_in_db(ctx: &mut Ctx, a: &mut WorkerProc) -> Result<(Held, i32, u64), HarnessError> {
    let barrier = faults::inject(
        DbBarrier::new(&ctx.db_url, ctx.lock_key(BARRIER_KEY)).at("after_lease_validated"),
        &ctx.timeline,
    )
    .await?;
    let faults = json!({"barriers": [{"point": "after_lease_validated", "key": ctx.lock_key(BARRIER_KEY)}]});
    let save_a = a.send(json!({"cmd": "save", "checkpoint": {"by": "a"}, "faults": faults})).await?;
    let a_pids = barrier.wait_blocked(&ctx.pool, std::slice::from_ref(&a.owner), 1, STEP).await?;
    Ok((Held::Db(barrier), a_pids[0], save_a))
}

/// A's proxy holds the run update that follows the lease check inside A's transaction. `None`
/// when A's protected write is one statement: then nothing outside the server can come between
/// its validation and its commit, and the row says so (judged and finished here).
async fn hold_in_proxy(
    ctx: &mut Ctx,
    a: &mut WorkerProc,
    p: &Proxy,
    run_id: uuid::Uuid,
) -> Result<Option<(Held, i32, u64)>, HarnessError> {
    let hold =
        faults::inject(p.hold(fenceproof_harness::faults::proxy::patterns::RUN_WRITE, STEP)?, &ctx.timeline).await?;
    let save_a = a.send(json!({"cmd": "save", "checkpoint": {"by": "a"}})).await?;
    let h = hold.held_n(1, STEP).await?.remove(0);
    if !h.in_transaction {
        hold.heal().await?;
        let ra = a.reply(save_a, STEP).await?;
        // Refused after A's short lease lapsed on the database clock: no verdict (a FAIL only
        // when it was refused while the lease was live).
        if matches!(ctx.ok_while_live(&ra, "A save", run_id).await, Ok(false)) {
            return Err(HarnessError::Inconclusive(format!(
                "A's one-statement save was answered {} after its lease lapsed on the database clock",
                outcome(&ra)
            )));
        }
        ctx.check(Check::expect(
            ONE_STATEMENT,
            outcome(&ra) == "ok",
            format!(
                "A's save ran as one autocommit statement ({}): {}",
                h.sql.chars().take(60).collect::<String>(),
                outcome(&ra)
            ),
        ));
        ctx.note("the protected write is one statement (autocommit): no point to hold between validation and commit outside the server; P-api-commit judges the race inside the function");
        a.shutdown(STEP).await?;
        return Ok(None);
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
    Ok(Some((Held::Proxy(hold), pid, save_a)))
}

/// B's takeover (command `acq_b`) must be seen waiting on A's backend `a_pid`: B's blocked
/// backend, or B's answer when it came while A was still held.
async fn judge_b_waits(
    ctx: &mut Ctx,
    b: &mut WorkerProc,
    acq_b: u64,
    a_pid: i32,
) -> Result<(Option<i32>, Option<serde_json::Value>), HarnessError> {
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
        TAKEOVER_WAITS,
        b_pid.is_some(),
        match (&b_pid, &early) {
            (Some(p), _) => format!("B backend {p} blocked by A backend {a_pid}"),
            (None, ev) => format!("B answered while A was still held: {}", shown(ev)),
        },
    ));
    Ok((b_pid, early))
}

/// Verdict from the oracle: A's commit, then B's takeover, and nothing of A after it.
async fn verdict(
    ctx: &mut Ctx,
    (a_owner, b_owner): (&str, &str),
    (epoch_a, epoch_b): (i64, i64),
    (a_pid, b_pid): (i32, Option<i32>),
) -> Result<(), HarnessError> {
    let rows = ctx.commits().await?;
    let a_commit = rows.iter().find(|r| {
        r.is_runs() && r.writer == a_owner && r.new_field("checkpoint").map(|c| c["by"] == "a").unwrap_or(false)
    });
    let b_takeover =
        rows.iter().find(|r| r.is_leases() && r.writer == b_owner && r.new_i64("epoch") == Some(epoch_a + 1));
    let order = a_commit.zip(b_takeover).map(|(x, y)| (x.seq, y.seq));
    let (a_at, b_at) =
        (shown(a_commit.map(|r| format!("#{}", r.seq))), shown(b_takeover.map(|r| format!("#{}", r.seq))));
    ctx.check(
        Check::expect(SERIAL_ORDER, order.is_some_and(|(x, y)| x < y), format!("A commit {a_at}, B takeover {b_at}"))
            .citing(a_commit.map(|r| r.seq)),
    );
    let live_at_commit = a_commit.and_then(|r| r.lease_live_at_commit);
    if let Some(seq) = b_takeover.map(|r| r.seq) {
        ctx.check(invariants::silent_after(&rows, a_owner, seq));
    }
    ctx.note(format!(
        "A held after validation (pid {a_pid}); B blocked by it (pid {}); A committed #{} (lease live at commit: {}) before B's takeover #{} to epoch {epoch_b}",
        b_pid.map(|p| p.to_string()).unwrap_or_else(|| "none".into()),
        a_commit.map(|r| r.seq.to_string()).unwrap_or_else(|| "none".into()),
        live_at_commit.map(|l| l.to_string()).unwrap_or_else(|| "?".into()),
        b_takeover.map(|r| r.seq.to_string()).unwrap_or_else(|| "none".into())
    ));
    Ok(())
}
