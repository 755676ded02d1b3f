//! Experiment B-running — a loss confirmed while the worker runs (spec §05.2, §07). Worker A runs a
//! scripted task through its own wire proxy: checkpoints with long pacing (its work). After A's
//! first checkpoint commits, the harness holds A's next renewal in the proxy, waits until the lease
//! has expired on the database clock, and lets worker B take over. Then it releases the held
//! renewal: it reaches the server after the takeover, so it matches zero rows — a confirmed loss,
//! while A is in the middle of its work. A must cancel its execution and start nothing new: the
//! proxy logs every statement A sends, and no run write may follow that renewal. The fencing
//! would reject such writes anyway; only the wire shows a worker that keeps working for a run it
//! no longer owns.

use fenceproof_harness::check::{after_loss, invariants, Check};
use fenceproof_harness::faults::{inject, proxy::patterns};
use fenceproof_harness::wait;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::json;
use uuid::Uuid;

use crate::ctx::{outcome, require_ok, Ctx, CONTROL, STEP};
use crate::experiment::{Checks, Experiment, Judges};

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
    "no transaction of the worker stays open across a step's work (seen twice, a second apart, inside its pacing)";

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
    first_checkpoint(ctx, &a.owner, run_id).await?;
    let held_open = open_across_work(ctx, &a.owner).await?;
    ctx.check(Check::from_violations(
        NO_TRANSACTION_DURING_WORK,
        held_open,
        "A's sessions held no transaction open across a second of its step's work",
    ));

    // Fault: A's next renewal is held while its lease expires and B takes over.
    let hold = proxy.hold(patterns::LEASE_RENEW, STEP)?;
    let held = inject(hold, &ctx.timeline).await?;
    held.held(STEP).await?;
    ctx.wait_lease_expired(run_id).await?;
    let mut b = ctx.spawn_worker("b", vec![]).await?;
    let acq =
        json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 60_000, "heartbeat_ms": 20_000, "renew_timeout_ms": 2000});
    require_ok(&b.request(acq, STEP).await?, "B takeover")?;
    let from = proxy.statements().len();

    // Heal: the renewal reaches the server after the takeover and matches zero rows.
    held.heal().await?;
    let code = a.wait_exit(STEP + STEP).await;
    ctx.check(after_loss::no_write_after_loss(&proxy.statements(), from));
    ctx.check(Check::expect(A_STOPS, matches!(code, Ok(Some(c)) if c != 0), format!("A's exit: {code:?}")));

    let done = outcome(&b.request(json!({"cmd": "succeed"}), STEP).await?).to_string();
    let released = outcome(&b.request(json!({"cmd": "release"}), STEP).await?).to_string();
    ctx.check(Check::equal(HOLDER_COMPLETES, (done.as_str(), released.as_str()), ("ok", "ok")));
    b.shutdown(STEP).await?;
    ctx.checks.extend(invariants::all(&ctx.commits().await?, &[CONTROL]));
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

/// A's sessions idle inside one and the same transaction at two looks a second apart, while A is
/// inside its pacing (a transaction spanning the step's work: spec §06, no waits inside).
async fn open_across_work(ctx: &Ctx, owner: &str) -> Result<Vec<String>, HarnessError> {
    const IDLE_IN_TX: &str = "SELECT pid, xact_start::text FROM pg_stat_activity
         WHERE application_name = $1 AND state LIKE 'idle in transaction%' AND xact_start IS NOT NULL";
    let first: Vec<(i32, String)> = sqlx::query_as(IDLE_IN_TX).bind(owner).fetch_all(&ctx.pool).await?;
    if first.is_empty() {
        return Ok(Vec::new());
    }
    // The second look is the observation, not a synchronization: a transaction still open a
    // second later, unchanged, spans the work.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let second: Vec<(i32, String)> = sqlx::query_as(IDLE_IN_TX).bind(owner).fetch_all(&ctx.pool).await?;
    Ok(first
        .iter()
        .filter(|s| second.contains(s))
        .map(|(pid, since)| format!("backend {pid} idle in a transaction open since {since}, across the step's work"))
        .collect())
}

/// A's scripted task: paced checkpoints, a short lease and heartbeat, a long renewal timeout.
fn script(run_id: uuid::Uuid) -> Vec<String> {
    crate::ctx::Script {
        run_id,
        steps: 3,
        pace_ms: PACE_MS,
        ttl_ms: A_TTL_MS,
        heartbeat_ms: A_HEARTBEAT_MS,
        renew_timeout_ms: A_RENEW_TIMEOUT_MS,
    }
    .args()
}
