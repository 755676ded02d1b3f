//! Probe `lease`: the outcomes the rows compare exactly (`busy`, `conflict`, `lease_lost`,
//! `invalid_state`, `not_found`), the heartbeat's events when a renewal is refused, release, and
//! the metric names and label values the rows read.

use std::time::Duration;

use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::record::metrics;
use fenceproof_harness::HarnessError;
use serde_json::json;

use super::{acquire, new_run, run_row, steal_lease, Points};
use fenceproof_scenarios::ctx::{outcome, scrape, Ctx, STEP};

pub async fn run(ctx: &mut Ctx, p: &mut Points) -> Result<(), HarnessError> {
    let run_id = new_run(ctx, "conf-lease").await?;
    let mut a = ctx.spawn_worker("a", vec![]).await?;
    let mut b = ctx.spawn_worker("b", vec![]).await?;
    if !acquire_and_renew(ctx, p, &mut a, &mut b, run_id).await? {
        return Ok(());
    }
    writes_under_the_lease(ctx, p, &mut a, run_id).await?;
    after_the_term_is_taken(ctx, p, &mut a, run_id).await?;
    ended_runs(ctx, p, &mut b).await?;
    exit(p, &mut a).await?;
    b.shutdown(STEP).await?;
    Ok(())
}

/// A's acquire (its answer and epoch), its heartbeat's renewals, and B's acquire of a held lease
/// and of a run that does not exist; false when A's acquire failed (nothing else can be probed).
async fn acquire_and_renew(
    ctx: &Ctx,
    p: &mut Points,
    a: &mut WorkerProc,
    b: &mut WorkerProc,
    run_id: uuid::Uuid,
) -> Result<bool, HarnessError> {
    // A acquires with a fast heartbeat and a long TTL: it keeps the lease until it is taken away.
    let acq = a
        .request(json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 60_000, "heartbeat_ms": 150, "renew_timeout_ms": 2000}), STEP)
        .await?;
    if !p.outcome("acquire of a free lease", &acq, "ok") {
        return Ok(false);
    }
    p.advise(
        "an answer is named after its command (`\"event\": \"acquire\"`)",
        acq["event"] == "acquire",
        format!("the answer to acquire is named {}", acq["event"]),
    );
    p.expect(
        "an ok acquire names the lease's epoch (1 for a new run)",
        acq["epoch"] == 1,
        format!("acquire answered epoch {}; expected 1", acq["epoch"]),
    );
    // The heartbeat renews: the expiry moves on, every heartbeat_ms, to ttl_ms past the database's now.
    let expiry = || async {
        let (left_ms, at): (f64, chrono::DateTime<chrono::Utc>) = sqlx::query_as(
            "SELECT extract(epoch FROM expires_at - clock_timestamp())::float8 * 1000, expires_at
               FROM worker_leases WHERE run_id = $1",
        )
        .bind(run_id)
        .fetch_one(&ctx.pool)
        .await?;
        Ok::<_, HarnessError>((left_ms, at))
    };
    let (_, first) = expiry().await?;
    let renewed =
        fenceproof_harness::wait::until("the heartbeat to renew the lease", Duration::from_secs(3), || async {
            let (left, at) = expiry().await?;
            Ok((at != first).then_some(left))
        })
        .await;
    p.expect(
        "the heartbeat renews the lease every heartbeat_ms (150 ms here)",
        renewed.is_ok(),
        "the lease's expiry did not move within 3 s of an acquire with heartbeat_ms 150",
    );
    if let Ok(left) = renewed {
        p.expect(
            "a renewal sets the expiry ttl_ms past the database's clock",
            (55_000.0..=60_500.0).contains(&left),
            format!("after a renewal with ttl_ms 60000 the lease had {left:.0} ms left"),
        );
    }
    let held = b.request(acquire(run_id), STEP).await?;
    p.outcome("acquire while another term holds the lease", &held, "busy");
    let missing = b.request(acquire(uuid::Uuid::new_v4()), STEP).await?;
    p.outcome("acquire of a run that does not exist", &missing, "not_found");
    p.advisory_last();

    Ok(true)
}

/// Start and save under A's lease: one revision each, the checkpoint as sent, the writer's session
/// named after its owner, and the revision a save names compared.
async fn writes_under_the_lease(
    ctx: &Ctx,
    p: &mut Points,
    a: &mut WorkerProc,
    run_id: uuid::Uuid,
) -> Result<(), HarnessError> {
    p.outcome("start of a pending run", &a.request(json!({"cmd": "start"}), STEP).await?, "ok");
    let saved = a.request(json!({"cmd": "save", "checkpoint": {"conformance": 1}}), STEP).await?;
    p.outcome("save without expected_revision (the last revision the worker knows)", &saved, "ok");
    let (_, rev, cp) = run_row(ctx, run_id).await?;
    p.expect(
        "start and save each commit one revision, the checkpoint exactly as sent",
        rev == 2 && cp == json!({"conformance": 1}),
        format!("after start and save the run is at revision {rev} with checkpoint {cp}; expected 2 and {{\"conformance\":1}}"),
    );
    let writers: std::collections::BTreeSet<String> =
        ctx.commits().await?.into_iter().filter(|r| r.is_runs() && r.op == "UPDATE").map(|r| r.writer).collect();
    p.expect(
        "the worker connects with application_name = its owner id (the oracle tells writers apart by it)",
        writers.len() == 1 && writers.contains(&a.owner),
        format!("the run's commits were made by sessions named {writers:?}; expected only {:?}", a.owner),
    );
    let stale =
        a.request(json!({"cmd": "save", "checkpoint": {"conformance": 2}, "expected_revision": 0}), STEP).await?;
    p.outcome("save naming a revision that is not current", &stale, "conflict");
    let named =
        a.request(json!({"cmd": "save", "checkpoint": {"conformance": 3}, "expected_revision": 2}), STEP).await?;
    p.outcome("save naming the current revision", &named, "ok");

    Ok(())
}

/// The term taken away from A: the heartbeat's events, every write refused as lease_lost, and
/// the metrics that count it.
async fn after_the_term_is_taken(
    ctx: &Ctx,
    p: &mut Points,
    a: &mut WorkerProc,
    run_id: uuid::Uuid,
) -> Result<(), HarnessError> {
    // The term is taken away (a later epoch holds the lease): every write is refused as lease_lost,
    // and the heartbeat reports the refused renewal, then the cancellation.
    steal_lease(ctx, run_id).await?;
    let lost = a.wait_event("heartbeat_lost", Duration::from_secs(5), |e| e["event"] == "heartbeat_lost").await;
    p.expect(
        "a refused renewal is reported as `heartbeat_lost` (outcome `lease_lost`)",
        lost.as_ref().is_ok_and(|e| outcome(e) == "lease_lost"),
        match &lost {
            Ok(e) => format!("heartbeat_lost came with outcome `{}`", outcome(e)),
            Err(_) => "no heartbeat_lost within 5 s of the lease being taken (heartbeat every 150 ms)".into(),
        },
    );
    let cancelled =
        a.wait_event("execution_cancelled", Duration::from_secs(5), |e| e["event"] == "execution_cancelled").await;
    p.expect(
        "`execution_cancelled` follows a lost or unconfirmed renewal",
        cancelled.is_ok(),
        "no execution_cancelled event after heartbeat_lost",
    );
    let w = a.request(json!({"cmd": "save", "checkpoint": {"conformance": 4}}), STEP).await?;
    p.outcome("save after the lease was taken (the worker keeps obeying)", &w, "lease_lost");
    p.outcome("renew after the lease was taken", &a.request(json!({"cmd": "renew"}), STEP).await?, "lease_lost");
    p.outcome("succeed after the lease was taken", &a.request(json!({"cmd": "succeed"}), STEP).await?, "lease_lost");
    p.outcome("release after the lease was taken", &a.request(json!({"cmd": "release"}), STEP).await?, "lease_lost");
    let text = scrape(a, &ctx.dir).await?;
    for (series, what) in [
        ("lease_renew_total{outcome=\"lost\"}", "a refused renewal"),
        ("protected_write_rejected_total{reason=\"lease\"}", "a write refused for the lease"),
    ] {
        let v = metrics::value(&text, series);
        p.expect(
            format!("metrics count {what} in {series}"),
            v.is_some_and(|v| v >= 1.0),
            format!("after {what}, {series} is {}", v.map_or("absent".into(), |v| v.to_string())),
        );
    }

    Ok(())
}

/// Runs of B: each transition from its own starting status only, an ended run stays ended,
/// release frees the lease and keeps its epoch, fail ends a run.
async fn ended_runs(ctx: &Ctx, p: &mut Points, b: &mut WorkerProc) -> Result<(), HarnessError> {
    // A second run: an ended run refuses further writes as invalid_state; release frees the lease.
    let r2 = new_run(ctx, "conf-lease-2").await?;
    p.outcome("acquire of a second run", &b.request(acquire(r2), STEP).await?, "ok");
    // Each transition from its own starting status only.
    let early = b.request(json!({"cmd": "save", "checkpoint": {"early": true}}), STEP).await?;
    p.outcome("save of a run still pending (never started)", &early, "invalid_state");
    let early = b.request(json!({"cmd": "succeed"}), STEP).await?;
    p.outcome("succeed of a run still pending", &early, "invalid_state");
    b.request(json!({"cmd": "start"}), STEP).await?;
    let again = b.request(json!({"cmd": "start"}), STEP).await?;
    p.outcome("start of a run already running", &again, "invalid_state");
    p.outcome("succeed of a running run", &b.request(json!({"cmd": "succeed"}), STEP).await?, "ok");
    let (status, ..) = run_row(ctx, r2).await?;
    p.expect(
        "succeed moves the run to `succeeded`",
        status == "succeeded",
        format!("after succeed the run is `{status}`"),
    );
    let late = b.request(json!({"cmd": "save", "checkpoint": {"late": true}}), STEP).await?;
    p.outcome("save on an ended run", &late, "invalid_state");
    let restart = b.request(json!({"cmd": "start"}), STEP).await?;
    p.outcome("start of an ended run", &restart, "invalid_state");
    let (status, ..) = run_row(ctx, r2).await?;
    p.expect(
        "an ended run stays ended",
        status == "succeeded",
        format!("after start and save on the succeeded run it is `{status}`"),
    );
    let text = scrape(b, &ctx.dir).await?;
    let v = metrics::value(&text, "protected_write_rejected_total{reason=\"state\"}");
    p.expect(
        "metrics count a write refused for the run's status in protected_write_rejected_total{reason=\"state\"}",
        v.is_some_and(|v| v >= 1.0),
        format!("after an invalid_state refusal the series is {}", v.map_or("absent".into(), |v| v.to_string())),
    );
    p.advisory_last();
    p.outcome("release of a held lease", &b.request(json!({"cmd": "release"}), STEP).await?, "ok");
    let (owner, epoch): (Option<String>, i64) =
        sqlx::query_as("SELECT owner, epoch FROM worker_leases WHERE run_id = $1")
            .bind(r2)
            .fetch_one(&ctx.pool)
            .await?;
    p.expect(
        "release frees the lease and keeps its epoch",
        owner.is_none() && epoch == 1,
        format!("after release the lease row has owner {owner:?}, epoch {epoch}; expected none and 1"),
    );
    let r3 = new_run(ctx, "conf-lease-3").await?;
    b.request(acquire(r3), STEP).await?;
    b.request(json!({"cmd": "start"}), STEP).await?;
    p.outcome("fail of a running run", &b.request(json!({"cmd": "fail"}), STEP).await?, "ok");
    let (status, ..) = run_row(ctx, r3).await?;
    p.expect("fail moves the run to `failed`", status == "failed", format!("after fail the run is `{status}`"));
    Ok(())
}

/// `exit` answers and ends the process with status 0.
async fn exit(p: &mut Points, a: &mut WorkerProc) -> Result<(), HarnessError> {
    let ex = a.request(json!({"cmd": "exit"}), STEP).await?;
    p.outcome("exit", &ex, "ok");
    p.advisory_last();
    let code = a.wait_exit(STEP).await?;
    p.advise(
        "exit ends the process with status 0",
        code == Some(0),
        format!("after exit the process ended with {code:?}"),
    );
    Ok(())
}
