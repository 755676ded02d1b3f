//! `H-lease` — are the contract's lease parameters safe on this database? (spec section 07: TTL,
//! heartbeat and renewal timeout must be derived from p99 database latency and scheduling jitter.)
//!
//! The harness measures, on the experiment's database, the latency of real renewals (the
//! protocol's renew statement on a lease it holds) and its own scheduling jitter (how late a 10 ms
//! timer fires), then checks two margins with the contract's numbers:
//! - a renewal timeout above the p99 renewal latency (with room: twice p99), or healthy workers
//!   cancel themselves on ordinary slowness;
//! - heartbeat + p99 jitter + renewal timeout below the TTL, so a renewal that starts late and uses
//!   its whole timeout still lands before the lease expires.
//!
//! Timing is measured here, but the verdict compares the contract against measured numbers, not a
//! speed against a fixed budget.

use std::time::{Duration, Instant};

use fenceproof_harness::check::Check;
use fenceproof_harness::contract::Contract;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::{lease, runs, Ttl};
use serde_json::json;

use crate::ctx::Ctx;
use crate::experiment::{Checks, Experiment, Judges, Need};

pub const TITLE: &str = "Lease parameters: contract TTL / heartbeat / timeout against measured latency and jitter";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "H-lease",
    title: TITLE,
    section: "07; 11 H",
    needs: &[Need::QuietMachine],
    judges: Judges::Deployment,
    checks: Checks::MEASUREMENT,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

/// The names of its checks (the rule catalogue links rules to them).
pub const TIMEOUT_ABOVE_P99: &str = "renewal timeout leaves room above the p99 renewal latency (>= 2 x p99)";
pub const LATE_RENEWAL_IN_TIME: &str = "a late renewal that uses its whole timeout still lands before expiry";

const SAMPLES: usize = 200;

fn p(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let contract = ctx.contract.as_deref().cloned().unwrap_or_else(Contract::default_sync);
    let params = &contract.lease;
    let err = |e: fenceproof_protocol::ProtocolError| HarnessError::Other(e.to_string());
    let run_id = runs::create_run(&ctx.pool, "task-lease-params", json!({})).await.map_err(err)?;
    let ttl = Ttl::from_millis(params.ttl_ms).map_err(err)?;
    let held = lease::acquire(&ctx.pool, run_id, "lease-probe", ttl).await.map_err(err)?.lease;

    let mut renew_ms = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let t = Instant::now();
        lease::renew(&ctx.pool, &held, ttl).await.map_err(err)?;
        renew_ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let mut jitter_ms = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let t = Instant::now();
        // Measuring how late a timer fires is the point here; nothing waits on anything else.
        tokio::time::sleep(Duration::from_millis(10)).await;
        jitter_ms.push((t.elapsed().as_secs_f64() * 1000.0 - 10.0).max(0.0));
    }
    lease::release(&ctx.pool, &held).await.map_err(err)?;
    renew_ms.sort_by(f64::total_cmp);
    jitter_ms.sort_by(f64::total_cmp);
    let (r50, r99, rmax) = (p(&renew_ms, 0.5), p(&renew_ms, 0.99), p(&renew_ms, 1.0));
    let (j99, jmax) = (p(&jitter_ms, 0.99), p(&jitter_ms, 1.0));

    let timeout = params.renewal_timeout_ms as f64;
    ctx.check(Check::expect(
        TIMEOUT_ABOVE_P99,
        timeout >= 2.0 * r99,
        format!(
            "renewal_timeout_ms {timeout:.0} vs renewal latency p50 {r50:.2} ms, p99 {r99:.2} ms, max {rmax:.2} ms"
        ),
    ));
    let worst = params.heartbeat_ms as f64 + j99 + timeout;
    ctx.check(Check::expect(
        LATE_RENEWAL_IN_TIME,
        worst < params.ttl_ms as f64,
        format!(
            "heartbeat {} + jitter p99 {j99:.2} + timeout {timeout:.0} = {worst:.1} ms vs ttl {} ms",
            params.heartbeat_ms, params.ttl_ms
        ),
    ));
    let record = json!({
        "contract_lease": params, "samples": SAMPLES,
        "renewal_ms": {"p50": r50, "p99": r99, "max": rmax}, "jitter_ms": {"p99": j99, "max": jmax},
        "margin_ms": params.ttl_ms as f64 - worst,
    });
    std::fs::write(ctx.dir.join("lease_params.json"), serde_json::to_string_pretty(&record).expect("json"))?;
    ctx.note(format!(
        "ttl {} / heartbeat {} / timeout {} ms; renew p99 {r99:.2} ms, jitter p99 {j99:.2} ms; margin {:.0} ms",
        params.ttl_ms,
        params.heartbeat_ms,
        params.renewal_timeout_ms,
        params.ttl_ms as f64 - worst
    ));
    Ok(())
}
