//! Experiment J — a network partition (spec 05, 06). Worker A reaches the server only through
//! its own proxy; the harness partitions it (every connection of A stalls in both directions and
//! new ones go unanswered) while its process keeps running, for longer than its lease. A's
//! heartbeat cannot confirm a renewal and must cancel the execution; the lease expires on the
//! database clock; worker B (not partitioned) takes over and saves. The partition heals: A's
//! stalled statements reach the server late, and the harness makes A attempt renew, save,
//! succeed, fail and release. None of them may commit, and A's metrics must show the unknown
//! renewal and the lost ones.

use fenceproof_harness::check::Check;
use fenceproof_harness::faults::proxy::Proxy;
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::record::{metrics, oracle};
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::json;
use uuid::Uuid;

use crate::b_old_owner_resumes::TAKEOVER_EPOCH;
use crate::ctx::{outcome, require_ok, scrape, Ctx, StaleChecks, STEP};
use crate::experiment::{Checks, Experiment, Judges};
use crate::lock_waits;
use crate::measured::{self, LeaseTimes};

pub const TITLE: &str = "Partition: a running worker cut off past its TTL, takeover, heal, stale writes rejected";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "J-partition",
    title: TITLE,
    section: "05.2, 07",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

/// The names of its checks, in the order it makes them (the rule catalogue links rules to them).
pub const CANCELLED_WHILE_CUT: &str =
    "[lease.renew-unknown-cancels] A's heartbeat cancels the execution when the partition leaves its renewal unanswered";
// B's takeover: the same check as B's (`b_old_owner_resumes::TAKEOVER_EPOCH`).
pub const NOTHING_COMMITS_AFTER_TAKEOVER: &str =
    "[lease.partition-stale-rejected] nothing A sends after the takeover commits, late or new (oracle)";
pub const ROWS_UNCHANGED_BY_HEALED: &str =
    "[lease.partition-stale-rejected] B's lease and the run are unchanged by the healed A (database rows)";
pub const TOLD_NO_AFTER_HEAL: &str = "A is told no for every attempt after the heal (worker's word)";
pub const METRICS_SHOW_RENEWALS: &str =
    "A's metrics show the unanswered renewal as unknown and the refused one as lost";

/// A's lease on an unloaded machine: short, so the partition outlasts it soon. The row stretches
/// it by its measured round trip ([`measured::LeaseTimes::sized`]).
const A_LEASE: LeaseTimes = LeaseTimes { ttl_ms: 800, heartbeat_ms: 100, renew_timeout_ms: 300 };

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let Setup { run_id, mut a, proxy, epoch_a, lease, rt } = setup(ctx).await?;
    let held_ms = ctx.lease_left_ms(run_id, &a.owner, epoch_a).await?;

    // Fault: A is cut off from the server; its process runs on.
    let lapse = std::time::Duration::from_millis(lease.ttl_ms as u64);
    let partition = fenceproof_harness::faults::inject(proxy.partition(STEP * 2 + lapse), &ctx.timeline).await?;
    let cut_at = std::time::Instant::now();
    ctx.wait_lease_expired(run_id).await?;
    judge_cancelled_while_cut(ctx, &mut a, STEP + lapse).await;

    // B takes over and saves.
    let (mut b, takeover, before) = take_over(ctx, run_id, epoch_a, &a.owner).await?;

    // Heal: A's stalled statements flow again; then A tries everything.
    partition.heal().await?;
    let cut_ms = cut_at.elapsed().as_millis();
    let (attempts, stale) = ctx
        .judge_stale_after_takeover(
            &mut a,
            run_id,
            takeover,
            &before,
            StaleChecks { nothing_commits: NOTHING_COMMITS_AFTER_TAKEOVER, rows_unchanged: ROWS_UNCHANGED_BY_HEALED },
        )
        .await?;
    ctx.check(Check::expect(TOLD_NO_AFTER_HEAL, attempts.iter().all(|s| !s.ends_with("=ok")), attempts.join(" ")));
    let text = scrape(&mut a, &ctx.dir).await?;
    let unknown = metrics::value(&text, "lease_renew_total{outcome=\"unknown\"}").unwrap_or(0.0);
    let lost = metrics::value(&text, "lease_renew_total{outcome=\"lost\"}").unwrap_or(0.0);
    ctx.note(format!(
        "round trip {} → A's {}; A held the lease when cut ({}); A partitioned {cut_ms} ms; B took over epoch {}; A after the heal: {}; {} stale commits; renewals unknown {unknown}, lost {lost}",
        rt.describe(),
        lease.describe(),
        held_ms.map(|ms| format!("{ms} ms left on the database clock")).unwrap_or_else(|| "no: its term had lapsed".into()),
        epoch_a + 1,
        attempts.join(" "),
        stale
    ));
    ctx.check(Check::expect(
        METRICS_SHOW_RENEWALS,
        unknown >= 1.0 && lost >= 1.0,
        format!("lease_renew_total{{outcome=\"unknown\"}} {unknown}, lease_renew_total{{outcome=\"lost\"}} {lost}"),
    ));
    require_ok(&b.request(json!({"cmd": "succeed"}), STEP).await?, "B succeed")?;
    drop(proxy);
    a.shutdown(STEP).await?;
    b.shutdown(STEP).await?;
    Ok(())
}

/// A holding a live lease, started, with one checkpoint saved: what the partition cuts.
struct Setup {
    run_id: Uuid,
    a: WorkerProc,
    proxy: Proxy,
    epoch_a: i64,
    lease: LeaseTimes,
    rt: measured::RoundTrip,
}

/// A's base lease for each try. On a loaded machine a renewal can come back later than its timeout
/// before the partition; A then rightly lets its lease lapse and refuses its own next step. That is
/// observed on the database (A's term lapsed and nobody took over), and the setup is made again on
/// a fresh run with a longer lease; a refusal while A's lease is live stays a FAIL.
const A_LEASE_TRIES: [u64; 3] = [1, 2, 4];

async fn setup(ctx: &mut Ctx) -> Result<Setup, HarnessError> {
    for (i, factor) in A_LEASE_TRIES.iter().enumerate() {
        // A task of its own per try: the lapsed try's run stays live (only one per task).
        let (task, name) = if i == 0 {
            ("task-j".into(), "a".into())
        } else {
            (format!("task-j-try{}", i + 1), format!("a-try{}", i + 1))
        };
        let run_id =
            runs::create_run(&ctx.pool, &task, json!({})).await.map_err(|e| HarnessError::Other(e.to_string()))?;
        let (mut a, proxy) = ctx.spawn_worker_proxied(&name, vec![]).await?;
        let rt = measured::round_trip(ctx, &mut a).await?;
        let base = LeaseTimes {
            ttl_ms: A_LEASE.ttl_ms * *factor as i64,
            heartbeat_ms: A_LEASE.heartbeat_ms * factor,
            renew_timeout_ms: A_LEASE.renew_timeout_ms * factor,
        };
        let lease = LeaseTimes::sized(base, &rt);
        let acq = a.request(lease.acquire(run_id), STEP).await?;
        require_ok(&acq, "A acquire")?;
        let epoch_a = acq["epoch"].as_i64().unwrap_or(-1);
        let start = a.request(json!({"cmd": "start"}), STEP).await?;
        let save = if outcome(&start) == "ok" {
            a.request(json!({"cmd": "save", "checkpoint": {"step": 1, "by": "a"}}), STEP).await?
        } else {
            start.clone()
        };
        if outcome(&save) != "ok" && measured::lapsed_untaken(ctx, run_id, &a.owner, epoch_a).await? {
            ctx.note(format!(
                "try {}: A's {} lapsed before its first save (a renewal later than its timeout: a loaded machine); the setup was made again with a longer lease",
                i + 1,
                lease.describe()
            ));
            drop(proxy);
            a.shutdown(STEP).await?;
            continue;
        }
        require_ok(&start, "A start")?;
        require_ok(&save, "A save")?;
        return Ok(Setup { run_id, a, proxy, epoch_a, lease, rt });
    }
    Err(HarnessError::Inconclusive(format!(
        "A's lease lapsed before its first save at every lease tried ({A_LEASE_TRIES:?} × {}): the machine is too loaded to make the moment",
        A_LEASE.describe()
    )))
}

/// A's heartbeat cannot confirm a renewal across the partition: it must cancel the execution.
async fn judge_cancelled_while_cut(ctx: &mut Ctx, a: &mut WorkerProc, bound: std::time::Duration) {
    let cancelled =
        a.wait_event("execution cancelled during the partition", bound, |e| e["event"] == "execution_cancelled").await;
    ctx.check(Check::expect(
        CANCELLED_WHILE_CUT,
        cancelled.is_ok(),
        match &cancelled {
            Ok(_) => "execution_cancelled while partitioned".to_string(),
            Err(e) => e.to_string(),
        },
    ));
}

/// B (not partitioned) takes over (epoch A + 1) and saves: B, the oracle's mark at the takeover,
/// and the run and lease after B's save. A takeover that waits on a row lock of A's (a transaction
/// A opened before the cut, which nothing on A's side can end) is a liveness finding, said with
/// the server's settings that bound it; the harness then ends A's session as they would.
async fn take_over(
    ctx: &mut Ctx,
    run_id: uuid::Uuid,
    epoch_a: i64,
    a_owner: &str,
) -> Result<(WorkerProc, i64, oracle::RunState), HarnessError> {
    let mut b = ctx.spawn_worker("b", vec![]).await?;
    let acq = json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 120_000, "heartbeat_ms": 60_000, "renew_timeout_ms": 2000});
    let pool = ctx.pool.clone();
    let watched = lock_waits::request_watched(&ctx.pool, &mut b, acq, STEP, a_owner, |w| async move {
        lock_waits::end_session(&pool, w.holder_pid).await;
    })
    .await;
    if let Some(w) = &watched.waited {
        let bounds = lock_waits::session_bounds(&ctx.pool).await;
        ctx.note(blocked_takeover(w, &bounds));
    }
    let acq_b = watched.answer?;
    require_ok(&acq_b, "B takeover")?;
    ctx.check(Check::equal(TAKEOVER_EPOCH, acq_b["epoch"].as_i64(), Some(epoch_a + 1)));
    let takeover = ctx.oracle_mark().await?;
    require_ok(&b.request(json!({"cmd": "save", "checkpoint": {"step": 2, "by": "b"}}), STEP).await?, "B save")?;
    let before = oracle::run_state(&ctx.pool, run_id).await?;
    Ok((b, takeover, before))
}

/// The liveness finding of a takeover blocked by the cut-off holder's open transaction.
pub fn blocked_takeover(w: &lock_waits::LockWait, bounds: &str) -> String {
    format!(
        "liveness: B's takeover waited on a row lock of A's, not on a timeout: {}. The partition cut A off inside that transaction, and nothing on A's side can end it: only the server does, after idle_in_transaction_session_timeout, or when TCP keepalives find A's host gone (here {bounds}; 0 is no bound). With neither set, a takeover waits as long as the partition lasts. The harness ended A's backend, as that bound would, and the row went on",
        w.describe()
    )
}

#[cfg(test)]
mod tests {
    use fenceproof_harness::check::rule::matches;

    use super::*;
    use crate::tags;

    #[test]
    fn a_blocked_takeover_is_a_liveness_finding_naming_the_holder_and_the_bounds() {
        let w = lock_waits::LockWait {
            waiter_pid: 9,
            waiter: "worker-b".into(),
            waiter_query: "UPDATE worker_leases SET owner = $2".into(),
            holder_pid: 8,
            holder: "worker-a".into(),
            holder_state: "idle in transaction".into(),
            holder_since: "2026-12-07 21:00:00+00".into(),
            holder_open_ms: 1500,
            holder_query: "select owner from worker_leases where run_id = $1 for update".into(),
        };
        let s = blocked_takeover(&w, "idle_in_transaction_session_timeout=0ms, tcp_keepalives_idle=0s");
        for part in
            ["liveness", "worker-a's backend 8", "for update", "idle_in_transaction_session_timeout", "TCP keepalives"]
        {
            assert!(s.contains(part), "{part} missing from {s}");
        }
        assert!(!s.contains("timed out"), "{s}");
    }

    #[test]
    fn every_tagged_check_matches_its_tag() {
        for (name, any) in [
            (CANCELLED_WHILE_CUT, tags::ANY_LEASE_RENEW_UNKNOWN_CANCELS),
            (NOTHING_COMMITS_AFTER_TAKEOVER, tags::ANY_LEASE_PARTITION_STALE_REJECTED),
            (ROWS_UNCHANGED_BY_HEALED, tags::ANY_LEASE_PARTITION_STALE_REJECTED),
        ] {
            assert!(matches(any, name), "{name} does not match {any}");
        }
    }
}
