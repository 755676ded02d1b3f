//! Experiment B-running — a loss confirmed while the worker runs (spec §05.2, §07). Worker A runs a
//! scripted task through its own wire proxy: checkpoints with long pacing (its work). After A's
//! first checkpoint commits, the harness holds A's next renewal in the proxy, waits until the lease
//! has expired on the database clock, and lets worker B take over. Then it releases the held
//! renewal: it reaches the server after the takeover, so it matches zero rows — a confirmed loss,
//! while A is in the middle of its work. A must cancel its execution and start nothing new: the
//! proxy logs every statement A sends, and no run write may follow that renewal. The fencing
//! would reject such writes anyway; only the wire shows a worker that keeps working for a run it
//! no longer owns.

use fenceproof_harness::check::evidence::exited;
use fenceproof_harness::check::{after_loss, Check};
use fenceproof_harness::faults::{inject, proxy::patterns};
use fenceproof_harness::wait;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::json;
use uuid::Uuid;

use crate::ctx::{outcome, require_ok, Ctx, STEP};
use crate::experiment::{Checks, Experiment, Judges};
use crate::lock_waits;

pub const TITLE: &str = "A loss confirmed while the worker runs: no new work after the zero-row renewal";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "B-running",
    title: TITLE,
    section: "05.2, 07",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

/// The names of its own checks.
pub const A_STOPS: &str = "A stops its task without completing it once the loss is confirmed";
pub const HOLDER_COMPLETES: &str = "B, the holder, completes and releases";
pub const NO_TRANSACTION_DURING_WORK: &str =
    "no transaction of the worker stays open across a step's work (watched through its pacing)";

/// A's pacing between checkpoints: its work, long beside the lease's expiry and B's takeover, so
/// A is inside it when the loss is confirmed even on a loaded machine. A worker that stops costs
/// nothing of it; one that goes on is seen at its next checkpoint.
const PACE_MS: u64 = 10_000;
/// Long enough that a slow start on a loaded machine keeps the lease.
const A_TTL_MS: i64 = 2000;
const A_HEARTBEAT_MS: u64 = 100;
/// Long, so that the held renewal is answered (zero rows), not abandoned as unconfirmed.
const A_RENEW_TIMEOUT_MS: u64 = 30_000;

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let run_id = runs::create_run(&ctx.pool, "task-b-running", json!({}))
        .await
        .map_err(|e| HarnessError::Other(e.to_string()))?;
    let (mut a, proxy) = ctx.spawn_worker_proxied("a", script(run_id)).await?;
    let owner = a.owner.clone();
    a.unless_exited(first_checkpoint(ctx, &owner, run_id)).await?;
    let held_open = open_across_work(ctx, &a.owner).await?;
    ctx.check(Check::from_violations(
        NO_TRANSACTION_DURING_WORK,
        held_open,
        "A's sessions held no transaction idle for 3 s or more in 4 s of its step's work (every 100 ms)",
    ));

    // B starts before the fault, so that its takeover is one request, not an interpreter's start
    // on a loaded machine while A's pacing runs out.
    let mut b = ctx.spawn_worker("b", vec![]).await?;
    b.wait_event("B's ready event", STEP, |e| e["event"] == "ready").await?;
    // Fault: A's next renewal is held while its lease expires and B takes over. Held at its first
    // statement: a renewal that locks the lease row before its UPDATE is held before the lock.
    let hold = proxy.hold(patterns::RENEWAL_ENTRY, STEP)?;
    let held = inject(hold, &ctx.timeline).await?;
    held.held(STEP).await?;
    ctx.wait_lease_expired(run_id).await?;
    let acq =
        json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 60_000, "heartbeat_ms": 20_000, "renew_timeout_ms": 2000});
    let pool = ctx.pool.clone();
    let watched = lock_waits::request_watched(&ctx.pool, &mut b, acq, STEP, &owner, |w| async move {
        lock_waits::end_session(&pool, w.holder_pid).await;
    })
    .await;
    if let Some(w) = watched.waited {
        // A held the lease row in a transaction of its own when the harness held its statement:
        // the takeover can only follow that transaction, so no renewal can reach the server after it.
        held.heal().await?;
        return Err(HarnessError::Inconclusive(format!(
            "B's takeover waited on a row lock of A, not on the machine: {}; the harness held A's next statement inside that transaction, so no renewal of A could reach the server after a takeover (the harness ended A's backend)",
            w.describe()
        )));
    }
    require_ok(&watched.answer?, "B takeover")?;
    let from = proxy.statements().len();

    // Heal: the renewal reaches the server after the takeover and matches zero rows.
    held.heal().await?;
    let code = a.wait_exit(STEP + STEP).await;
    if !after_loss::loss_confirmed(&proxy.statements(), from) {
        // A learned the loss otherwise (its next step, refused) before the held renewal went on:
        // the moment of a zero-row renewal was not made, and nothing is judged of it.
        return Err(HarnessError::Inconclusive(format!(
            "no renewal of A reached the server after B's takeover (A's exit: {}): the zero-row renewal was not made",
            exited(&code)
        )));
    }
    if after_loss::step_under_way(&proxy.statements(), from) {
        // A's next step reached the server before the zero rows reached A (a machine slow
        // enough for A's pacing to run out): that step's later statements cannot be told from
        // new work, so the moment of a loss confirmed inside A's work was not made.
        return Err(HarnessError::Inconclusive(format!(
            "A's next step was under way before the zero-row renewal's answer reached it (A's exit: {}): the loss was not confirmed inside A's work",
            exited(&code)
        )));
    }
    ctx.check(after_loss::no_write_after_loss(&proxy.statements(), from));
    ctx.check(Check::expect(A_STOPS, matches!(code, Ok(Some(c)) if c != 0), format!("A's exit: {}", exited(&code))));

    let done = outcome(&b.request(json!({"cmd": "succeed"}), STEP).await?).to_string();
    let released = outcome(&b.request(json!({"cmd": "release"}), STEP).await?).to_string();
    ctx.check(Check::equal(HOLDER_COMPLETES, (done.as_str(), released.as_str()), ("ok", "ok")));
    b.shutdown(STEP).await?;
    Ok(())
}

/// Wait (bounded) until A's first checkpoint committed: A is then inside its pacing.
async fn first_checkpoint(ctx: &Ctx, owner: &str, run_id: Uuid) -> Result<(), HarnessError> {
    wait::until("A's first checkpoint to commit", STEP, || async {
        let saved = ctx.commits().await?.iter().any(|r| {
            r.is_runs()
                && r.writer == owner
                && r.run_id == Some(run_id)
                && r.old_str("status") == Some("running")
                && r.new_str("status") == Some("running")
        });
        Ok(saved.then_some(()))
    })
    .await
}

/// How long the harness watches A's sessions inside its pacing, and how long a transaction must
/// sit idle (waiting on the worker, not the server) to span the step's work. A legal protected
/// write is a few statements; a worker starved between two of them on a loaded machine may sit
/// idle for a moment, never for seconds on end.
const WATCH_MS: u64 = 4_000;
const IDLE_SPAN_MS: i64 = 3_000;

/// A's sessions idle inside a transaction open for [`IDLE_SPAN_MS`] or more (on the database's
/// clock), looked for every 100 ms through the first [`WATCH_MS`] of A's pacing: the whole window
/// is watched, not one moment of it, so a transaction spanning the work is seen in every run.
async fn open_across_work(ctx: &Ctx, owner: &str) -> Result<Vec<String>, HarnessError> {
    const IDLE_IN_TX: &str = "SELECT pid, xact_start::text,
                (extract(epoch FROM clock_timestamp() - xact_start) * 1000)::bigint
           FROM pg_stat_activity
          WHERE application_name = $1 AND state LIKE 'idle in transaction%' AND xact_start IS NOT NULL";
    let mut seen: Vec<String> = Vec::new();
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
    let t0 = std::time::Instant::now();
    while t0.elapsed() < std::time::Duration::from_millis(WATCH_MS) {
        tick.tick().await;
        let rows: Vec<(i32, String, i64)> = sqlx::query_as(IDLE_IN_TX).bind(owner).fetch_all(&ctx.pool).await?;
        for (pid, since, age_ms) in rows.into_iter().filter(|r| r.2 >= IDLE_SPAN_MS) {
            let what =
                format!("backend {pid} idle in a transaction open since {since} ({age_ms} ms), across the step's work");
            if !seen.iter().any(|s| s.starts_with(&format!("backend {pid} idle in a transaction open since {since} ")))
            {
                seen.push(what);
            }
        }
    }
    Ok(seen)
}

/// A's scripted task: paced checkpoints, a short lease and heartbeat, a long renewal timeout.
fn script(run_id: uuid::Uuid) -> crate::ctx::Script {
    crate::ctx::Script {
        run_id,
        steps: 3,
        pace_ms: PACE_MS,
        ttl_ms: A_TTL_MS,
        heartbeat_ms: A_HEARTBEAT_MS,
        renew_timeout_ms: A_RENEW_TIMEOUT_MS,
    }
}
