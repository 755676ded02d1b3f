//! W-clock-behind: the workers' clocks an hour ahead of the database's (the server started with its
//! clock behind real time, libfaketime). A's lease is live on the database clock for its whole
//! term and long expired on every worker's clock; B's takeover must be refused. A worker that decides
//! "expired" on its own clock and writes the lease without the expiry condition takes a live lease:
//! its commit is a step the model refuses (`lease.acquire-free-or-expired`, judged by trace
//! validation on the database clock), besides this row's own check of B's answer. W-clock is the
//! other side: the database clock ahead, where such a worker refuses a takeover the database allows.

use fenceproof_harness::check::Check;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::json;

use crate::ctx::{outcome, require_ok, Ctx, STEP};
use crate::experiment::{Checks, Experiment, Judges, Need};
use crate::frozen_clock::FrozenServer;
use crate::tags::{self, tagged};

pub const TITLE: &str = "A takeover while the lease is live on the database clock and expired on the worker's";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "W-clock-behind",
    title: TITLE,
    section: "05, 10",
    needs: &[Need::ClockServer],
    judges: Judges::Protocol,
    checks: Checks::NO_ANSWERS,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

/// The server's clock, behind real time (it runs; the workers read real time).
const BEHIND: &str = "-1h";

/// A's term: far shorter than the hour the workers' clocks are ahead, far longer than the row.
const TTL_MS: i64 = 60_000;

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let server = FrozenServer::enter(ctx, BEHIND).await?;
    let res = steps(ctx).await;
    server.leave(ctx).await?;
    res
}

async fn steps(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let err = |e: fenceproof_protocol::ProtocolError| HarnessError::Other(e.to_string());
    let run = runs::create_run(&ctx.pool, "task-wb", json!({})).await.map_err(err)?;
    let acquire =
        json!({"cmd": "acquire", "run_id": run, "ttl_ms": TTL_MS, "heartbeat_ms": 600_000, "renew_timeout_ms": 5_000});
    let mut a = ctx.spawn_worker("a", vec![]).await?;
    require_ok(&a.request(acquire.clone(), STEP).await?, "A takes a 60 s lease")?;
    let until: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT expires_at FROM worker_leases WHERE run_id = $1::text::uuid")
            .bind(run.to_string())
            .fetch_one(&ctx.pool)
            .await?;
    let mark = ctx.oracle_mark().await?;
    let mut b = ctx.spawn_worker("b", vec![]).await?;
    let took = b.request(acquire, STEP).await?;
    let rows = ctx.commits().await?;
    // B's lease commits while A's term ran on the database clock: a takeover of a live lease.
    let live: Vec<i64> = rows
        .iter()
        .filter(|r| r.seq > mark && r.writer == b.owner && r.is_leases() && r.committed_at < until)
        .map(|r| r.seq)
        .collect();
    let lapsed = outcome(&took) == "ok" && live.is_empty();
    ctx.check(Check::expect(
        tagged(
            tags::LEASE_ACQUIRE_FREE_OR_EXPIRED,
            "B's takeover of A's lease, live on the database clock and expired on B's, is refused",
        ),
        (outcome(&took) == "busy" || lapsed) && live.is_empty(),
        format!(
            "A's lease until {until} on the database clock ({BEHIND} from real time); B's acquire answered {}; \
             B's lease commits before that: {live:?}",
            outcome(&took)
        ),
    ));
    for p in [&mut a, &mut b] {
        p.shutdown(STEP).await?;
    }
    if lapsed {
        // The machine held B's command past A's whole term: B's takeover was legal, and proves nothing.
        return Err(HarnessError::Inconclusive(format!("B's acquire came after A's {TTL_MS} ms term had run out")));
    }
    ctx.note(format!("the database clock {BEHIND} from the workers'; A's term {TTL_MS} ms; B: {}", outcome(&took)));
    Ok(())
}
