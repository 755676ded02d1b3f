//! Experiment K — the database server's own clock jumps (spec 10). The experiment starts a server
//! of its own under libfaketime ([`crate::frozen_clock`]), running at real time, and moves its
//! clock while workers hold leases. Database time removes client clock skew, not the server's own
//! jumps; what must hold is that protected transactions keep state safe whatever the clock does.
//!
//! - `K-forward`: the clock jumps forward past A's TTL. B's takeover succeeds early, long before
//!   A's TTL has passed in real time: reported as early, with the real time it took. A, which
//!   believes it still holds the lease, then saves: nothing of A's may commit after the takeover.
//! - `K-backward`: A stops (killed) and the clock jumps back. The lease, stamped with the earlier
//!   clock, now outlives its TTL: recovery is delayed. The delay is measured on the server and
//!   reported against the TTL; B is refused meanwhile (no second owner), and once the clock is
//!   healed B takes over with the next epoch.

use std::time::Instant;

use fenceproof_harness::check::Check;
use fenceproof_harness::record::oracle;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::json;

use crate::ctx::{outcome, require_ok, Ctx, STEP, TAKEOVER_IS_NEXT_EPOCH};
use crate::experiment::{Checks, Experiment, Judges, Need};
use crate::frozen_clock::FrozenServer;

pub const TITLE_FORWARD: &str = "Database clock jumps forward past the TTL: early takeover reported, no stale write";
pub const TITLE_BACKWARD: &str =
    "Database clock jumps back: recovery delayed, measured against the TTL, no second owner";

/// Its registration: what it needs and what it judges.
pub const FORWARD: Experiment = Experiment {
    id: "K-forward",
    title: TITLE_FORWARD,
    section: "05, 10",
    needs: &[Need::ClockServer],
    judges: Judges::Protocol,
    checks: Checks::NO_ANSWERS,
    operator_of: &[],
    run: |c| Box::pin(forward(c)),
};

/// Its registration: what it needs and what it judges.
pub const BACKWARD: Experiment = Experiment {
    id: "K-backward",
    title: TITLE_BACKWARD,
    section: "05, 10",
    needs: &[Need::ClockServer],
    judges: Judges::Protocol,
    checks: Checks::NO_ANSWERS,
    operator_of: &[],
    run: |c| Box::pin(backward(c)),
};

/// The names of its checks (the rule catalogue links rules to them).
pub const FORWARD_EARLY_TAKEOVER: &str =
    "[clock.jumps-keep-state-safe] the forward jump's takeover is early and reported: B's epoch is A's + 1";
pub const NOTHING_OF_A_AFTER_EARLY_TAKEOVER: &str =
    "[clock.jumps-keep-state-safe] after the early takeover nothing of A's commits (oracle)";
pub const BACKWARD_DELAYS_RECOVERY: &str = "[clock.jumps-keep-state-safe] after the backward jump the dead holder's lease outlives its TTL: recovery is delayed, not doubled";

/// A's lease: long in real time, so that only the jump can end it.
const FORWARD_TTL_MS: i64 = 30_000;
const BACKWARD_TTL_MS: i64 = 2_000;

pub async fn forward(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let server = FrozenServer::enter(ctx, "+0").await?;
    let r = forward_on(ctx, &server).await;
    server.leave(ctx).await?;
    r
}

async fn forward_on(ctx: &mut Ctx, server: &FrozenServer) -> Result<(), HarnessError> {
    let run_id =
        runs::create_run(&ctx.pool, "task-k-fwd", json!({})).await.map_err(|e| HarnessError::Other(e.to_string()))?;
    let mut a = ctx.spawn_worker("a", vec![]).await?;
    let acq = a
        .request(json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": FORWARD_TTL_MS, "heartbeat_ms": 20_000, "renew_timeout_ms": 5000}), STEP)
        .await?;
    require_ok(&acq, "A acquire")?;
    let acquired = Instant::now();
    let epoch_a = acq["epoch"].as_i64().unwrap_or(-1);
    require_ok(&a.request(json!({"cmd": "start"}), STEP).await?, "A start")?;
    require_ok(&a.request(json!({"cmd": "save", "checkpoint": {"step": 1, "by": "a"}}), STEP).await?, "A save")?;

    // Fault: the server's clock jumps two TTLs ahead.
    server.set("+60")?;
    let mut b = ctx.spawn_worker("b", vec![]).await?;
    let acq_b = b
        .request(json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 120_000, "heartbeat_ms": 60_000, "renew_timeout_ms": 5000}), STEP)
        .await?;
    let real = acquired.elapsed();
    require_ok(&acq_b, "B's takeover after the forward jump")?;
    let takeover = ctx.oracle_mark().await?;
    ctx.note(format!(
        "early takeover: B took the lease {} ms (real time) after A acquired it, against a TTL of {} s: the forward jump cut A's term short by {:.1} s",
        real.as_millis(),
        FORWARD_TTL_MS / 1000,
        FORWARD_TTL_MS as f64 / 1000.0 - real.as_secs_f64()
    ));
    ctx.check(Check::expect(
        FORWARD_EARLY_TAKEOVER,
        acq_b["epoch"].as_i64() == Some(epoch_a + 1) && (real.as_millis() as i64) < FORWARD_TTL_MS,
        format!(
            "B epoch {} (A {epoch_a}) after {:.1} s of real time; TTL {} s",
            acq_b["epoch"],
            real.as_secs_f64(),
            FORWARD_TTL_MS / 1000
        ),
    ));
    require_ok(&b.request(json!({"cmd": "save", "checkpoint": {"step": 2, "by": "b"}}), STEP).await?, "B save")?;

    // A still believes it holds the lease (its heartbeat has not run): it writes.
    let before = oracle::run_state(&ctx.pool, run_id).await?;
    let current = before.run["revision"].as_i64().unwrap_or(-1);
    let mut said = Vec::new();
    for (label, cmd) in [
        ("save", json!({"cmd": "save", "checkpoint": {"step": 2, "by": "a (early-expired)"}})),
        (
            "save@current",
            json!({"cmd": "save", "checkpoint": {"step": 3, "by": "a (early-expired)"}, "expected_revision": current}),
        ),
        ("succeed@current", json!({"cmd": "succeed", "expected_revision": current})),
    ] {
        let ev = a.request(cmd, STEP).await?;
        said.push(format!("{label}={}", outcome(&ev)));
    }
    let stale: Vec<_> = ctx.commits().await?.into_iter().filter(|c| c.seq > takeover && c.writer == a.owner).collect();
    ctx.check(
        Check::expect(
            NOTHING_OF_A_AFTER_EARLY_TAKEOVER,
            stale.is_empty(),
            format!("{} commits by A after the takeover #{takeover}; A was told: {}", stale.len(), said.join(" ")),
        )
        .citing(stale.iter().map(|c| c.seq)),
    );
    require_ok(&b.request(json!({"cmd": "succeed"}), STEP).await?, "B succeed")?;
    a.shutdown(STEP).await?;
    b.shutdown(STEP).await?;
    Ok(())
}

pub async fn backward(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let server = FrozenServer::enter(ctx, "+0").await?;
    let r = backward_on(ctx, &server).await;
    server.leave(ctx).await?;
    r
}

async fn backward_on(ctx: &mut Ctx, server: &FrozenServer) -> Result<(), HarnessError> {
    let run_id =
        runs::create_run(&ctx.pool, "task-k-back", json!({})).await.map_err(|e| HarnessError::Other(e.to_string()))?;
    let mut a = ctx.spawn_worker("a", vec![]).await?;
    let acq = a
        .request(json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": BACKWARD_TTL_MS, "heartbeat_ms": 300, "renew_timeout_ms": 1000}), STEP)
        .await?;
    require_ok(&acq, "A acquire")?;
    let epoch_a = acq["epoch"].as_i64().unwrap_or(-1);
    // A's 2 s lease lives on its 300 ms heartbeat: a step refused after it lapsed (A starved on a
    // busy machine) is no broken rule, and leaves no moment to judge.
    let started = a.request(json!({"cmd": "start"}), STEP).await?;
    ctx.require_ok_while_live(&started, "A start", run_id).await?;
    let saved = a.request(json!({"cmd": "save", "checkpoint": {"step": 1, "by": "a"}}), STEP).await?;
    ctx.require_ok_while_live(&saved, "A save", run_id).await?;
    // A dies holding the lease; then the server's clock jumps back a minute.
    a.kill().await?;
    server.set("-60")?;
    let left_ms: f64 = sqlx::query_scalar(
        "SELECT (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::float8 FROM worker_leases WHERE run_id = $1",
    )
    .bind(run_id)
    .fetch_one(&ctx.pool)
    .await?;
    // The delay is the jump itself on top of what was left of the TTL; against the deployment's
    // own TTL (the contract's, or the default one) a jump of this size delays recovery by:
    let contract_ttl = ctx
        .contract
        .as_ref()
        .map(|c| c.lease.ttl_ms)
        .unwrap_or_else(|| fenceproof_harness::contract::Contract::default_async().lease.ttl_ms);
    ctx.note(format!(
        "recovery delayed: after a 60 s backward jump A's lease stays live {:.1} s more on the database clock, {:.0}× its TTL of {:.1} s; with the contract's TTL of {:.0} s recovery would take {:.1}× the TTL",
        left_ms / 1000.0,
        left_ms / BACKWARD_TTL_MS as f64,
        BACKWARD_TTL_MS as f64 / 1000.0,
        contract_ttl as f64 / 1000.0,
        (60_000.0 + contract_ttl as f64) / contract_ttl as f64
    ));
    let mut b = ctx.spawn_worker("b", vec![]).await?;
    let b_acquire =
        json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 60_000, "heartbeat_ms": 20_000, "renew_timeout_ms": 5000});
    let early = b.request(b_acquire.clone(), STEP).await?;
    ctx.check(Check::expect(
        BACKWARD_DELAYS_RECOVERY,
        outcome(&early) == "busy" && left_ms > BACKWARD_TTL_MS as f64,
        format!(
            "B's acquire: {}; A's lease has {:.1} s left on the database clock (TTL {} s)",
            outcome(&early),
            left_ms / 1000.0,
            BACKWARD_TTL_MS / 1000
        ),
    ));
    // Heal: the clock returns to real time; the lease expires within its TTL and B recovers.
    server.set("+0")?;
    let healed = Instant::now();
    ctx.wait_lease_expired(run_id).await?;
    let acq_b = b.request(b_acquire, STEP).await?;
    require_ok(&acq_b, "B's takeover after the clock healed")?;
    ctx.note(format!("after the heal B recovered in {:.1} s", healed.elapsed().as_secs_f64()));
    ctx.check(Check::equal(TAKEOVER_IS_NEXT_EPOCH, acq_b["epoch"].as_i64(), Some(epoch_a + 1)));
    require_ok(&b.request(json!({"cmd": "succeed"}), STEP).await?, "B succeed")?;
    b.shutdown(STEP).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use fenceproof_harness::check::rule::matches;

    use super::*;
    use crate::tags;

    #[test]
    fn every_tagged_check_matches_its_tag() {
        for name in [FORWARD_EARLY_TAKEOVER, NOTHING_OF_A_AFTER_EARLY_TAKEOVER, BACKWARD_DELAYS_RECOVERY] {
            assert!(matches(tags::ANY_CLOCK_JUMPS_KEEP_STATE_SAFE, name), "{name}");
        }
    }
}
