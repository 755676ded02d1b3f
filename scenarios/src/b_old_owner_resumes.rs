//! Experiment B — the old owner resumes. Worker A holds the lease and has committed a checkpoint.
//! While A's lease is live, worker B's takeover is refused. Then the harness SIGSTOPs A's process,
//! waits until the lease has expired on the database clock, and B takes over (epoch + 1) and saves.
//! The harness SIGCONTs A: A's heartbeat must find the lease lost and cancel its execution, and the
//! harness makes A attempt renew, save, succeed, fail and release anyway (a stale worker that
//! ignores its cancellation). None of them may commit anything, and A never writes a terminal state.
//!
//! `B-same-owner` runs the same story with A and B sharing one owner id (a restarted host that
//! reuses its hostname): then only the epoch tells the stale term from the current one.

use fenceproof_harness::check::evidence::listed;
use fenceproof_harness::check::{invariants, Check};
use fenceproof_harness::faults::PauseKind;
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::record::{metrics, oracle};
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::ctx::{outcome, require_ok, scrape, stale_acquire, stale_attempts, Ctx, STEP};
use crate::experiment::{Checks, Experiment, Judges};
use crate::measured::{self, LeaseTimes};

pub const TITLE: &str = "Old owner resumes: SIGSTOP, lease expiry, takeover, SIGCONT";
pub const TITLE_FREEZE: &str = "Old owner resumes: cgroup freeze (as docker pause), lease expiry, takeover, thaw";
pub const TITLE_SAME_OWNER: &str = "Old owner resumes, with the owner id reused by the new term";

/// Its registration: what it needs and what it judges.
pub const SIGSTOP: Experiment = Experiment {
    id: "B-sigstop",
    title: TITLE,
    section: "11 B; 05, 06",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c, false, PauseKind::Sigstop)),
};

/// Its registration: what it needs and what it judges.
pub const FREEZE: Experiment = Experiment {
    id: "B-freeze",
    title: TITLE_FREEZE,
    section: "11 B; 05, 06",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c, false, PauseKind::Freeze)),
};

/// Its registration: what it needs and what it judges.
pub const SAME_OWNER: Experiment = Experiment {
    id: "B-same-owner",
    title: TITLE_SAME_OWNER,
    section: "11 B; 05, 06",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c, true, PauseKind::Sigstop)),
};

/// The names of the story's checks, in the order it makes them (the rule catalogue links to them).
pub const EARLY_TAKEOVER_REFUSED: &str = "a takeover while A's lease is live is refused";
pub const TAKEOVER_EPOCH: &str = "B's takeover is epoch A + 1";
pub const HEARTBEAT_CANCELS: &str = "A's heartbeat cancels its execution once it runs again";
pub const STALE_ACQUIRE_BUSY: &str = "A's acquire while B's lease is live is answered busy";
pub const METRICS_COUNT_REJECTIONS: &str = "A's metrics count the rejected stale writes and the lost renewals";
/// The lease row after A's attempts (its renew and release are fenced by owner and epoch).
pub const STALE_LEAVES_LEASE: &str = "A's renew/release leave B's lease unchanged (lease row)";
/// The run row after A's attempts (its save, succeed and fail are protected writes): a changed
/// run breaks the protected-write rule, not the renewal's, whatever else A tried.
pub const STALE_LEAVES_RUN: &str = "A's save/succeed/fail leave the run unchanged (run row)";
pub const NOTHING_COMMITS_WHILE_STALE: &str = "nothing commits while only the stale A acts (oracle)";
pub const STALE_TOLD_LEASE_LOST: &str = "A is told lease_lost for every attempt (worker's word)";
pub const HOLDER_COMPLETES: &str = "B, the holder, completes and releases";
pub const ONLY_TERMINAL_IS_HOLDERS: &str = "the only terminal write is B's completion, after A's attempts";
pub const RUN_ENDS_BY_HOLDER: &str = "run ends succeeded by B with B's checkpoint";
pub const RELEASE_KEEPS_EPOCH: &str = "release keeps B's epoch (never zeroed)";

/// A's lease is short so that its expiry comes quickly once A is stopped; it stretches with A's
/// measured round trip ([`LeaseTimes::sized`]), so that A's own renewals keep it live on a loaded
/// machine until the harness stops A. Should A's renewals still come late past the TTL, A lets its
/// lease lapse (as the spec asks of a worker whose renewal goes unanswered) and B's early acquire
/// legally takes an expired lease: that is observed from the oracle (A's expiry against the
/// takeover's commit time), and the setup is made again with the next, longer base TTL; the
/// verdict is never retried.
const A_LEASE: LeaseTimes = LeaseTimes { ttl_ms: 600, heartbeat_ms: 100, renew_timeout_ms: 300 };
const A_TTL_TRIES_MS: [i64; 3] = [A_LEASE.ttl_ms, 1_500, 4_000];

pub async fn run(ctx: &mut Ctx, same_owner: bool, kind: PauseKind) -> Result<(), HarnessError> {
    let mut s = setup(ctx, same_owner).await?;

    // Fault: a real pause of A's whole process, heartbeat included.
    let paused = s.a.pause_with(kind).await?;
    ctx.wait_lease_expired(s.run_id).await?;
    let taken = take_over(ctx, &mut s).await?;

    // Heal: resume A. Its overdue heartbeat must find the lease gone and cancel the execution.
    let before = oracle::run_state(&ctx.pool, s.run_id).await?;
    let window_start = ctx.oracle_mark().await?;
    s.a.resume(paused).await?;
    judge_heartbeat_cancels(ctx, &mut s.a).await;
    let stale = judge_stale_attempts(ctx, &mut s, &before, window_start).await?;

    // B completes normally.
    let done = outcome(&s.b.request(json!({"cmd": "succeed"}), STEP).await?).to_string();
    let released = outcome(&s.b.request(json!({"cmd": "release"}), STEP).await?).to_string();
    ctx.check(Check::equal(HOLDER_COMPLETES, (done.as_str(), released.as_str()), ("ok", "ok")));
    s.a.shutdown(STEP).await?;
    s.b.shutdown(STEP).await?;
    verdict(ctx, &s, same_owner, kind, &taken, &stale).await
}

/// What the story carries from one phase to the next.
struct Story {
    run_id: Uuid,
    a: WorkerProc,
    b: WorkerProc,
    epoch_a: i64,
    /// B's acquire: its lease, once it has one, is long and its heartbeat slow, so B commits
    /// nothing on its own while the stale A acts.
    b_acquire: Value,
}

/// B's takeover: its epoch and the oracle's mark right after it.
struct Takeover {
    epoch_b: i64,
    seq: i64,
}

/// What the stale A was told and what its metrics counted; `window_end` is the oracle's mark
/// after its last attempt.
struct StaleA {
    attempts: Vec<(&'static str, String)>,
    window_end: i64,
    rejected: f64,
    lost: f64,
}

/// Setup: A acquires, starts and saves one checkpoint; while A's lease is live, B cannot take over.
/// Made again with a longer TTL when A's lease had lapsed before B's early acquire committed.
async fn setup(ctx: &mut Ctx, same_owner: bool) -> Result<Story, HarnessError> {
    for (i, ttl_ms) in A_TTL_TRIES_MS.iter().enumerate() {
        match try_setup(ctx, same_owner, *ttl_ms, i).await? {
            Ok(story) => return Ok(story),
            Err(lapsed) => ctx.note(lapsed),
        }
    }
    Err(HarnessError::Inconclusive(format!(
        "A's lease lapsed before B's early acquire at every TTL tried ({A_TTL_TRIES_MS:?} ms): the machine is too loaded to create the moment"
    )))
}

/// A starts and saves its first checkpoint on its short lease. Refused after that lease lapsed
/// untaken on the database clock (A's renewal came later than its timeout: a loaded machine),
/// the step proves nothing: why, so the setup is made again with a longer lease; refused while it
/// was live, it is a refused legal step (a FAIL).
async fn first_save(
    ctx: &Ctx,
    a: &mut WorkerProc,
    run_id: Uuid,
    epoch_a: i64,
    lease: &LeaseTimes,
) -> Result<Option<String>, HarnessError> {
    let start = a.request(json!({"cmd": "start"}), STEP).await?;
    let save = if outcome(&start) == "ok" {
        a.request(json!({"cmd": "save", "checkpoint": {"step": 1, "by": "a"}}), STEP).await?
    } else {
        start.clone()
    };
    if outcome(&save) != "ok" && measured::lapsed_untaken(ctx, run_id, &a.owner, epoch_a).await? {
        return Ok(Some(format!(
            "A's {} lapsed before its first save (a renewal later than its timeout); the setup was made again with a longer lease",
            lease.describe()
        )));
    }
    require_ok(&start, "A start")?;
    require_ok(&save, "A save")?;
    Ok(None)
}

/// One try of the setup with A's TTL `ttl_ms`: the story, or (inner `Err`) why the moment was not
/// made (A's lease had already lapsed when B's acquire committed), after stopping this try's workers.
async fn try_setup(
    ctx: &mut Ctx,
    same_owner: bool,
    ttl_ms: i64,
    try_no: usize,
) -> Result<Result<Story, String>, HarnessError> {
    // A task of its own per try: the lapsed try's run stays live (only one per task).
    let task = if try_no == 0 { "task-b".to_string() } else { format!("task-b-try{}", try_no + 1) };
    let run_id = runs::create_run(&ctx.pool, &task, json!({})).await.map_err(|e| HarnessError::Other(e.to_string()))?;
    let shared = format!("host-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let name = |w: &str| if try_no == 0 { w.to_string() } else { format!("{w}-try{}", try_no + 1) };
    let mut a = if same_owner {
        ctx.spawn_worker_as(&name("a"), &shared, vec![]).await?
    } else {
        ctx.spawn_worker(&name("a"), vec![]).await?
    };
    let rt = measured::round_trip(ctx, &mut a).await?;
    let lease = LeaseTimes::sized(LeaseTimes { ttl_ms, ..A_LEASE }, &rt);
    ctx.note(format!("round trip {} → A's {}", rt.describe(), lease.describe()));
    let ttl_ms = lease.ttl_ms;
    let acq = a.request(lease.acquire(run_id), STEP).await?;
    require_ok(&acq, "A acquire")?;
    let epoch_a = acq["epoch"].as_i64().unwrap_or(-1);
    if let Some(why) = first_save(ctx, &mut a, run_id, epoch_a, &lease).await? {
        a.shutdown(STEP).await?;
        return Ok(Err(why));
    }

    let mut b = if same_owner {
        ctx.spawn_worker_as(&name("b"), &shared, vec![]).await?
    } else {
        ctx.spawn_worker(&name("b"), vec![]).await?
    };
    // B's early attempt is one request of a running B, not its start-up.
    b.wait_event("B's ready event", STEP, |e| e["event"] == "ready").await?;
    let b_acquire = json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 120_000, "heartbeat_ms": 60_000, "renew_timeout_ms": 2000});
    let early = b.request(b_acquire.clone(), STEP).await?;
    let lease_now = oracle::run_state(&ctx.pool, run_id).await?.lease;
    if outcome(&early) == "ok" {
        if let Some(why) = lapsed_before_takeover(ctx, run_id, epoch_a + 1, ttl_ms).await? {
            a.shutdown(STEP).await?;
            b.shutdown(STEP).await?;
            return Ok(Err(why));
        }
    }
    ctx.check(Check::expect(
        EARLY_TAKEOVER_REFUSED,
        outcome(&early) == "busy" && lease_now["epoch"].as_i64() == Some(epoch_a),
        format!(
            "B's early acquire: {}; lease epoch then {} (A's TTL {ttl_ms} ms)",
            outcome(&early),
            lease_now["epoch"]
        ),
    ));
    Ok(Ok(Story { run_id, a, b, epoch_a, b_acquire }))
}

/// Whether the committed takeover to `epoch` of `run_id` found the previous lease already expired
/// (its expires_at at or before the commit, both on the database clock): then the takeover was
/// legal and the moment this story needs was not made. The note says so, with the times.
async fn lapsed_before_takeover(
    ctx: &Ctx,
    run_id: Uuid,
    epoch: i64,
    ttl_ms: i64,
) -> Result<Option<String>, HarnessError> {
    let commits = ctx.commits().await?;
    let Some(c) =
        commits.iter().find(|c| c.is_leases() && c.run_id == Some(run_id) && c.new_i64("epoch") == Some(epoch))
    else {
        return Ok(None);
    };
    let expired_at = c
        .old_str("expires_at")
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&chrono::Utc));
    Ok(match expired_at {
        Some(t) if t <= c.committed_at => Some(format!(
            "A's lease (TTL {ttl_ms} ms) had lapsed {} ms before B's early acquire committed (A's renewals were late: a loaded machine); the setup was made again with a longer TTL",
            (c.committed_at - t).num_milliseconds()
        )),
        _ => None,
    })
}
/// B takes over (epoch A + 1) and saves.
async fn take_over(ctx: &mut Ctx, s: &mut Story) -> Result<Takeover, HarnessError> {
    let acq_b = s.b.request(s.b_acquire.clone(), STEP).await?;
    require_ok(&acq_b, "B takeover")?;
    let epoch_b = acq_b["epoch"].as_i64().unwrap_or(-1);
    ctx.check(Check::equal(TAKEOVER_EPOCH, epoch_b, s.epoch_a + 1));
    let seq = ctx.oracle_mark().await?;
    require_ok(&s.b.request(json!({"cmd": "save", "checkpoint": {"step": 2, "by": "b"}}), STEP).await?, "B save")?;
    Ok(Takeover { epoch_b, seq })
}

/// Once A runs again, its heartbeat finds the lease lost and cancels the execution.
async fn judge_heartbeat_cancels(ctx: &mut Ctx, a: &mut WorkerProc) {
    let cancelled =
        a.wait_event("execution cancelled after resume", STEP, |e| e["event"] == "execution_cancelled").await;
    ctx.check(Check::expect(
        HEARTBEAT_CANCELS,
        cancelled.is_ok(),
        match &cancelled {
            Ok(_) => "heartbeat renewal found the lease lost; execution cancelled".to_string(),
            Err(e) => e.to_string(),
        },
    ));
}

/// The stale worker tries everything anyway: first with the revision it knows, then with the
/// run's current revision (as a stale worker that re-read the row would), so that only the
/// lease check stands between it and B's state. `before` is the run and lease before A resumed,
/// at oracle mark `window_start`.
async fn judge_stale_attempts(
    ctx: &mut Ctx,
    s: &mut Story,
    before: &oracle::RunState,
    window_start: i64,
) -> Result<StaleA, HarnessError> {
    let current = before.run["revision"].as_i64().unwrap_or(-1);
    let attempts = stale_attempts(&mut s.a, current).await?;
    let again = stale_acquire(&mut s.a, s.run_id).await?;
    ctx.check(Check::equal(STALE_ACQUIRE_BUSY, again.as_str(), "busy"));
    let after = oracle::run_state(&ctx.pool, s.run_id).await?;
    let window_end = ctx.oracle_mark().await?;
    let (rejected, lost) = judge_metrics(ctx, &mut s.a).await?;
    judge_rows_left(ctx, before, &after);
    ctx.check(
        Check::expect(
            NOTHING_COMMITS_WHILE_STALE,
            window_end == window_start,
            format!("commits #{}..#{} in the window", window_start + 1, window_end),
        )
        .citing(window_start + 1..=window_end),
    );
    ctx.check(Check::expect(STALE_TOLD_LEASE_LOST, attempts.iter().all(|(_, o)| o == "lease_lost"), said(&attempts)));
    Ok(StaleA { attempts, window_end, rejected, lost })
}

/// A's attempts left B's lease row and the run row as they were, each judged on its own so that a
/// FAIL names the rule that broke: the lease's (renew, release) or the protected write's.
fn judge_rows_left(ctx: &mut Ctx, before: &oracle::RunState, after: &oracle::RunState) {
    let lease = |s: &oracle::RunState| {
        ["owner", "epoch", "expires_at"].map(|k| format!("{k} {}", plain(&s.lease[k]))).join(", ")
    };
    let run = |s: &oracle::RunState| {
        ["status", "revision", "checkpoint"].map(|k| format!("{k} {}", plain(&s.run[k]))).join(", ")
    };
    let said = |what: &str, b: String, a: String| {
        if a == b {
            format!("{what} unchanged: {a}")
        } else {
            format!("{what} changed: {b} -> {a}")
        }
    };
    ctx.check(Check::expect(
        STALE_LEAVES_LEASE,
        lease(before) == lease(after),
        said("lease", lease(before), lease(after)),
    ));
    ctx.check(Check::expect(STALE_LEAVES_RUN, run(before) == run(after), said("run", run(before), run(after))));
}

/// A JSON value as text: a string without its quotes.
fn plain(v: &serde_json::Value) -> String {
    v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())
}

/// A's own metrics must show the rejections (section 12): returns the rejected writes and the
/// lost renewals it counted.
async fn judge_metrics(ctx: &mut Ctx, a: &mut WorkerProc) -> Result<(f64, f64), HarnessError> {
    let text = scrape(a, &ctx.dir).await?;
    let rejected = metrics::value(&text, "protected_write_rejected_total{reason=\"lease\"}").unwrap_or(0.0);
    let lost = metrics::value(&text, "lease_renew_total{outcome=\"lost\"}").unwrap_or(0.0);
    // The explicit renew was answered lease_lost; the heartbeat's own renewal after the resume
    // counts as lost too when the database answered it in time, and as unconfirmed (no answer
    // within its timeout, which a loaded machine can cause) otherwise.
    let heartbeat_end =
        a.history.iter().find_map(|e| e["event"].as_str().filter(|ev| ev.starts_with("heartbeat_"))).unwrap_or("none");
    let expected_lost = if heartbeat_end == "heartbeat_lost" { 2.0 } else { 1.0 };
    ctx.check(Check::expect(
        METRICS_COUNT_REJECTIONS,
        rejected >= 4.0 && lost >= expected_lost,
        format!("protected_write_rejected_total{{reason=\"lease\"}} {rejected}, lease_renew_total{{outcome=\"lost\"}} {lost} (heartbeat ended: {heartbeat_end})"),
    ));
    Ok((rejected, lost))
}

/// The attempts as `label=outcome`, space-separated.
fn said(attempts: &[(&'static str, String)]) -> String {
    attempts.iter().map(|(c, o)| format!("{c}={o}")).collect::<Vec<_>>().join(" ")
}

/// Verdict from the oracle and the final rows.
async fn verdict(
    ctx: &mut Ctx,
    s: &Story,
    same_owner: bool,
    kind: PauseKind,
    taken: &Takeover,
    stale: &StaleA,
) -> Result<(), HarnessError> {
    let rows = ctx.commits().await?;
    if !same_owner {
        ctx.check(invariants::silent_after(&rows, &s.a.owner, taken.seq));
    }
    let terminal: Vec<i64> = rows
        .iter()
        .filter(|r| r.is_runs() && matches!(r.new_str("status"), Some("succeeded" | "failed" | "cancelled")))
        .map(|r| r.seq)
        .collect();
    let window_end = stale.window_end;
    ctx.check(Check::expect(
        ONLY_TERMINAL_IS_HOLDERS,
        terminal.len() == 1 && terminal[0] > window_end,
        format!(
            "terminal commits {}; A's attempts ended at #{window_end}",
            listed(terminal.iter().map(|s| format!("#{s}")))
        ),
    ));
    let fin = oracle::run_state(&ctx.pool, s.run_id).await?;
    ctx.check(Check::equal(
        RUN_ENDS_BY_HOLDER,
        (fin.run["status"].as_str(), fin.run["checkpoint"]["by"].as_str()),
        (Some("succeeded"), Some("b")),
    ));
    ctx.check(Check::equal(
        RELEASE_KEEPS_EPOCH,
        (fin.lease["epoch"].as_i64(), fin.lease["owner"].is_null()),
        (Some(taken.epoch_b), true),
    ));
    let (epoch_a, epoch_b, rejected, lost) = (s.epoch_a, taken.epoch_b, stale.rejected, stale.lost);
    ctx.note(format!(
        "{}A epoch {epoch_a} {}; B took over epoch {epoch_b}; A after {}: {}; A's metrics: {rejected} writes rejected (lease), {lost} renewals lost",
        if same_owner { "one owner id for both; " } else { "" },
        match kind { PauseKind::Sigstop => "SIGSTOPped", PauseKind::Freeze => "frozen (cgroup freezer)" },
        match kind { PauseKind::Sigstop => "SIGCONT", PauseKind::Freeze => "thaw" },
        said(&stale.attempts)
    ));
    std::fs::write(ctx.dir.join("final_state.json"), serde_json::to_string_pretty(&fin).expect("json"))?;
    Ok(())
}
