//! Experiment B — the old owner resumes. Worker A holds the lease and has committed a checkpoint.
//! While A's lease is live, worker B's takeover is refused. Then the harness SIGSTOPs A's process,
//! waits until the lease has expired on the database clock, and B takes over (epoch + 1) and saves.
//! The harness SIGCONTs A: A's heartbeat must find the lease lost and cancel its execution, and the
//! harness makes A attempt renew, save, succeed, fail and release anyway (a stale worker that
//! ignores its cancellation). None of them may commit anything, and A never writes a terminal state.
//!
//! `B-same-owner` runs the same story with A and B sharing one owner id (a restarted host that
//! reuses its hostname): then only the epoch tells the stale term from the current one.

use fenceproof_harness::check::{invariants, Check};
use fenceproof_harness::faults::PauseKind;
use fenceproof_harness::record::{metrics, oracle};
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::json;

use crate::ctx::{outcome, require_ok, scrape, stale_acquire, stale_attempts, Ctx, CONTROL, STEP};

pub const TITLE: &str = "Old owner resumes: SIGSTOP, lease expiry, takeover, SIGCONT";
pub const TITLE_FREEZE: &str = "Old owner resumes: cgroup freeze (as docker pause), lease expiry, takeover, thaw";
pub const TITLE_SAME_OWNER: &str = "Old owner resumes, with the owner id reused by the new term";

/// A's lease is short so that its expiry comes quickly once A is stopped.
const A_TTL_MS: i64 = 600;
const A_HEARTBEAT_MS: u64 = 100;

pub async fn run(ctx: &mut Ctx, same_owner: bool, kind: PauseKind) -> Result<(), HarnessError> {
    let run_id =
        runs::create_run(&ctx.pool, "task-b", json!({})).await.map_err(|e| HarnessError::Other(e.to_string()))?;
    let shared = format!("host-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);

    // Setup: A acquires, starts and saves one checkpoint.
    let mut a = if same_owner {
        ctx.spawn_worker_as("a", &shared, vec![]).await?
    } else {
        ctx.spawn_worker("a", vec![]).await?
    };
    let acq = a.request(json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": A_TTL_MS, "heartbeat_ms": A_HEARTBEAT_MS, "renew_timeout_ms": 300}), STEP).await?;
    require_ok(&acq, "A acquire")?;
    let epoch_a = acq["epoch"].as_i64().unwrap_or(-1);
    require_ok(&a.request(json!({"cmd": "start"}), STEP).await?, "A start")?;
    require_ok(&a.request(json!({"cmd": "save", "checkpoint": {"step": 1, "by": "a"}}), STEP).await?, "A save")?;

    // While A's lease is live, B cannot take over. B's lease, once it has one, is long and its
    // heartbeat slow, so B commits nothing on its own while the stale A acts below.
    let mut b = if same_owner {
        ctx.spawn_worker_as("b", &shared, vec![]).await?
    } else {
        ctx.spawn_worker("b", vec![]).await?
    };
    let b_acquire = json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 120_000, "heartbeat_ms": 60_000, "renew_timeout_ms": 2000});
    let early = b.request(b_acquire.clone(), STEP).await?;
    let lease_now = oracle::run_state(&ctx.pool, run_id).await?.lease;
    ctx.check(Check::expect(
        "a takeover while A's lease is live is refused",
        outcome(&early) == "busy" && lease_now["epoch"].as_i64() == Some(epoch_a),
        format!("B's early acquire: {}; lease epoch then {}", outcome(&early), lease_now["epoch"]),
    ));

    // Fault: a real pause of A's whole process, heartbeat included.
    let paused = a.pause_with(kind).await?;
    ctx.wait_lease_expired(run_id).await?;

    // B takes over and saves.
    let acq_b = b.request(b_acquire, STEP).await?;
    require_ok(&acq_b, "B takeover")?;
    let epoch_b = acq_b["epoch"].as_i64().unwrap_or(-1);
    ctx.check(Check::equal("B's takeover is epoch A + 1", epoch_b, epoch_a + 1));
    let takeover_seq = ctx.oracle_mark().await?;
    require_ok(&b.request(json!({"cmd": "save", "checkpoint": {"step": 2, "by": "b"}}), STEP).await?, "B save")?;

    // Heal: resume A. Its overdue heartbeat must find the lease gone and cancel the execution.
    let before = oracle::run_state(&ctx.pool, run_id).await?;
    let window_start = ctx.oracle_mark().await?;
    a.resume(paused).await?;
    let cancelled =
        a.wait_event("execution cancelled after resume", STEP, |e| e["event"] == "execution_cancelled").await;
    ctx.check(Check::expect(
        "A's heartbeat cancels its execution once it runs again",
        cancelled.is_ok(),
        match &cancelled {
            Ok(_) => "heartbeat renewal found the lease lost; execution cancelled".to_string(),
            Err(e) => e.to_string(),
        },
    ));

    // The stale worker tries everything anyway: first with the revision it knows, then with the
    // run's current revision (as a stale worker that re-read the row would), so that only the
    // lease check stands between it and B's state.
    let current = before.run["revision"].as_i64().unwrap_or(-1);
    let attempts = stale_attempts(&mut a, current).await?;
    let again = stale_acquire(&mut a, run_id).await?;
    ctx.check(Check::equal("A's acquire while B's lease is live is answered busy", again.as_str(), "busy"));
    let after = oracle::run_state(&ctx.pool, run_id).await?;
    let window_end = ctx.oracle_mark().await?;
    // A's own metrics must show the rejections (section 12).
    let text = scrape(&mut a, &ctx.dir).await?;
    let rejected = metrics::value(&text, "protected_write_rejected_total{reason=\"lease\"}").unwrap_or(0.0);
    let lost = metrics::value(&text, "lease_renew_total{outcome=\"lost\"}").unwrap_or(0.0);
    // The explicit renew above was answered lease_lost; the heartbeat's own renewal after the
    // resume counts as lost too when the database answered it in time, and as unconfirmed (no
    // answer within its timeout, which a loaded machine can cause) otherwise.
    let heartbeat_end =
        a.history.iter().find_map(|e| e["event"].as_str().filter(|ev| ev.starts_with("heartbeat_"))).unwrap_or("none");
    let expected_lost = if heartbeat_end == "heartbeat_lost" { 2.0 } else { 1.0 };
    ctx.check(Check::expect(
        "A's metrics count the rejected stale writes and the lost renewals",
        rejected >= 4.0 && lost >= expected_lost,
        format!("protected_write_rejected_total{{reason=\"lease\"}} {rejected}, lease_renew_total{{outcome=\"lost\"}} {lost} (heartbeat ended: {heartbeat_end})"),
    ));
    let key = |s: &oracle::RunState| {
        (
            s.lease["owner"].clone(),
            s.lease["epoch"].clone(),
            s.run["status"].clone(),
            s.run["revision"].clone(),
            s.run["checkpoint"].clone(),
        )
    };
    ctx.check(Check::expect(
        "A's renew/save/succeed/fail/release leave B's lease and the run unchanged (database rows)",
        key(&before) == key(&after) && before.lease["expires_at"] == after.lease["expires_at"],
        format!("before {:?}; after {:?}", key(&before), key(&after)),
    ));
    ctx.check(Check::expect(
        "nothing commits while only the stale A acts (oracle)",
        window_end == window_start,
        format!("commits #{}..#{} in the window", window_start + 1, window_end),
    ));
    ctx.check(Check::expect(
        "A is told lease_lost for every attempt (worker's word)",
        attempts.iter().all(|(_, o)| o == "lease_lost"),
        attempts.iter().map(|(c, o)| format!("{c}={o}")).collect::<Vec<_>>().join(" "),
    ));

    // B completes normally.
    let done = outcome(&b.request(json!({"cmd": "succeed"}), STEP).await?).to_string();
    let released = outcome(&b.request(json!({"cmd": "release"}), STEP).await?).to_string();
    ctx.check(Check::equal("B, the holder, completes and releases", (done.as_str(), released.as_str()), ("ok", "ok")));
    a.shutdown(STEP).await?;
    b.shutdown(STEP).await?;

    // Verdict from the oracle and the final rows.
    let rows = ctx.commits().await?;
    if !same_owner {
        ctx.check(invariants::silent_after(&rows, &a.owner, takeover_seq));
    }
    let terminal: Vec<i64> = rows
        .iter()
        .filter(|r| r.is_runs() && matches!(r.new_str("status"), Some("succeeded" | "failed" | "cancelled")))
        .map(|r| r.seq)
        .collect();
    ctx.check(Check::expect(
        "the only terminal write is B's completion, after A's attempts",
        terminal.len() == 1 && terminal[0] > window_end,
        format!("terminal commits {terminal:?}; A's attempts ended at #{window_end}"),
    ));
    let fin = oracle::run_state(&ctx.pool, run_id).await?;
    ctx.check(Check::equal(
        "run ends succeeded by B with B's checkpoint",
        (fin.run["status"].as_str(), fin.run["checkpoint"]["by"].as_str()),
        (Some("succeeded"), Some("b")),
    ));
    ctx.check(Check::equal(
        "release keeps B's epoch (never zeroed)",
        (fin.lease["epoch"].as_i64(), fin.lease["owner"].is_null()),
        (Some(epoch_b), true),
    ));
    ctx.checks.extend(invariants::all(&rows, &[CONTROL]));
    ctx.note(format!(
        "{}A epoch {epoch_a} {}; B took over epoch {epoch_b}; A after {}: {}; A's metrics: {rejected} writes rejected (lease), {lost} renewals lost",
        if same_owner { "one owner id for both; " } else { "" },
        match kind { PauseKind::Sigstop => "SIGSTOPped", PauseKind::Freeze => "frozen (cgroup freezer)" },
        match kind { PauseKind::Sigstop => "SIGCONT", PauseKind::Freeze => "thaw" },
        attempts.iter().map(|(c, o)| format!("{c}={o}")).collect::<Vec<_>>().join(" ")
    ));
    std::fs::write(ctx.dir.join("final_state.json"), serde_json::to_string_pretty(&fin).expect("json"))?;
    Ok(())
}
