//! Experiment B-dbfreeze — the old owner whose renewal got no answer. Missed heartbeats do not only
//! come from a paused worker: a frozen database host, a VM pause or a network stall leave the
//! worker running while its renewal hangs. A renewal with no answer is not a renewal (the database
//! may or may not have applied it), so the worker must cancel its execution, stop committing new
//! steps and let the lease expire on its own.
//!
//! Worker A runs a scripted task (many paced checkpoints) with a short heartbeat and renewal
//! timeout. Once the oracle shows it committing, the harness freezes the whole database server
//! (native: the postmaster and its backends in one frozen cgroup; container: `docker pause`),
//! confirmed by the kernel or by Docker. A's own process keeps running; the harness waits for A to
//! report the unanswered renewal, thaws the server and reads the database clock. Verdict from the
//! oracle: after the thaw A commits at most the one checkpoint that was already in flight, and no
//! terminal state. Then B takes over once A's lease has expired untouched, and finishes the task.

use std::time::Duration;

use fenceproof_harness::check::evidence::{exited, shown};
use fenceproof_harness::check::Check;
use fenceproof_harness::faults::{self, ServerFreeze};
use fenceproof_harness::procs::signals;
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::record::oracle;
use fenceproof_harness::{wait, HarnessError};
use fenceproof_protocol::runs;
use serde_json::json;

use crate::ctx::{outcome, require_ok, Ctx, STEP};
use crate::experiment::{Checks, Experiment, Judges, Need};

pub const TITLE: &str =
    "Old owner whose renewal got no answer: the database server froze (cgroup freezer / docker pause)";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "B-dbfreeze",
    title: TITLE,
    section: "11 B; 05, 06",
    needs: &[Need::ServerFreeze, Need::OwnServer],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

/// The names of its checks, in the order it makes them (the rule catalogue links rules to them).
pub const SERVER_FROZEN: &str = "the whole database server was frozen";
pub const A_KEPT_RUNNING: &str =
    "A's own process kept running while the database was frozen (not a pause of the worker)";
pub const UNANSWERED_RENEWAL_LOST: &str =
    "A's heartbeat must take its unanswered renewal for a lost lease (heartbeat_unconfirmed)";
pub const AT_MOST_IN_FLIGHT_AFTER_THAW: &str = "after the thaw A committed at most the checkpoint already in flight";
pub const A_STOPPED_UNFINISHED: &str = "A stopped its task unfinished";
pub const A_LEFT_LEASE_TO_EXPIRE: &str =
    "A left its lease to expire: it did not release it after the unanswered renewal";
pub const B_FINISHED: &str = "B finished the task";

/// A's task: more checkpoints than it can finish before the freeze (five seconds of paced work
/// after the third: a loaded machine once took a second to freeze the server, and a 40-step task
/// was over by then).
const STEPS: u32 = 200;
const PACE_MS: u64 = 25;
/// A's lease: long enough to outlive the freeze with seconds to spare even on a loaded machine (so
/// a worker that ignored the unanswered renewal goes on committing after the thaw, and is caught),
/// short enough for B to wait out.
const A_TTL_MS: i64 = 6000;
const A_HEARTBEAT_MS: u64 = 100;
const A_RENEW_TIMEOUT_MS: u64 = 200;
/// Bound on A noticing: more than six times heartbeat + renewal timeout.
const NOTICE_WITHIN: Duration = Duration::from_secs(2);

/// The story on a server of the row's own, so that freezing it stops no other row.
pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let own = crate::own_server::OwnServer::enter(ctx).await?;
    let told = story(ctx).await;
    own.leave(ctx).await?;
    told
}

async fn story(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let target = ctx.server.clone().ok_or_else(|| {
        HarnessError::Other(
            "B-dbfreeze freezes the database server, so it runs only on servers the harness starts".into(),
        )
    })?;
    let run_id = runs::create_run(&ctx.pool, "task-b-dbfreeze", json!({}))
        .await
        .map_err(|e| HarnessError::Other(e.to_string()))?;
    let mut a = ctx.spawn_worker("a", script(run_id)).await?;
    let a_owner = a.owner.clone();
    // A is in the middle of its task: three checkpoints committed.
    a.unless_exited(wait_checkpoints(ctx, &a_owner, 3)).await?;

    // The fault: the whole server stops. Nothing may touch the database until it is thawed.
    let freeze = faults::inject(ServerFreeze::new(&target), &ctx.timeline).await?;
    let a_state = signals::proc_state(a.pid);
    let noticed =
        a.wait_event("A's renewal to go unanswered", NOTICE_WITHIN, |e| e["event"] == "heartbeat_unconfirmed").await;
    let confirmed = freeze.confirmed.clone();
    freeze.heal().await?;
    let thawed_at: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT clock_timestamp()").fetch_one(&ctx.pool).await?;
    // A wait that ran out on a starved machine says nothing about A: no verdict (STARVED).
    if let Err(HarnessError::Starved { .. }) = noticed {
        return noticed.map(|_| ());
    }
    // A that finished its whole task before the freeze took hold had no renewal to go unanswered:
    // the moment the row judges never came, which is no verdict, not a FAIL of A.
    if noticed.is_err() {
        unmade_moment(&ctx.commits().await?, &a_owner)?;
    }
    judge_freeze(ctx, &confirmed, a_state, &noticed);

    // A stops its task by itself; then no more commits of A can come.
    let stopped = judge_a_stops(ctx, &mut a, thawed_at).await?;

    // B takes over once A's lease has expired by itself, and finishes the task.
    let (mut b, epoch_b, refused) = take_over_once_expired(ctx, run_id).await?;
    judge_b_finishes(ctx, run_id, &a_owner, epoch_b, refused).await?;
    ctx.note(format!(
        "{confirmed}; A committed {total}/{STEPS} checkpoints, {after_thaw} after the thaw, exit {code}; B took over at epoch {epoch_b}",
        total = stopped.total,
        after_thaw = stopped.after_thaw,
        code = stopped.code.as_ref().ok().copied().flatten().map_or("-".to_string(), |c| c.to_string())
    ));
    b.kill().await?;
    Ok(())
}

/// A's scripted task: many paced checkpoints, a short heartbeat and renewal timeout.
fn script(run_id: uuid::Uuid) -> crate::ctx::Script {
    crate::ctx::Script {
        run_id,
        steps: STEPS,
        pace_ms: PACE_MS,
        ttl_ms: A_TTL_MS,
        heartbeat_ms: A_HEARTBEAT_MS,
        renew_timeout_ms: A_RENEW_TIMEOUT_MS,
    }
}

/// When A finished every checkpoint before the freeze took hold: by the database's clock, a task
/// paced as asked spans at least (STEPS - 1) × PACE_MS, and then the freeze came late (a busy
/// machine: no verdict, run again alone, STARVED); a task done in under half of that was not paced,
/// which the worker, not the machine, did (an ERROR naming it).
fn unmade_moment(rows: &[oracle::CommitRow], owner: &str) -> Result<(), HarnessError> {
    let done = checkpoints(rows, owner);
    if done < STEPS as usize {
        return Ok(());
    }
    let times: Vec<_> = rows
        .iter()
        .filter(|r| r.is_runs() && r.op == "UPDATE" && r.writer == owner)
        .filter(|r| r.old_str("status") == Some("running") && r.new_str("status") == Some("running"))
        .map(|r| r.committed_at)
        .collect();
    let span_ms = match (times.iter().min(), times.iter().max()) {
        (Some(a), Some(b)) => (*b - *a).num_milliseconds(),
        _ => 0,
    };
    let paced_ms = (STEPS as i64 - 1) * PACE_MS as i64;
    if span_ms * 2 < paced_ms {
        return Err(HarnessError::Worker {
            name: owner.to_string(),
            detail: format!(
                "its {done} checkpoints span {span_ms} ms on the database clock, asked to be paced {PACE_MS} ms apart \
                 (--pace-ms): the moment this row judges cannot be made"
            ),
        });
    }
    Err(HarnessError::Inconclusive(format!(
        "the moment was not created: A finished all {done} paced checkpoints ({span_ms} ms) before the server's \
         freeze took hold, so no renewal of A could go unanswered"
    )))
}

/// `owner`'s run-state commits (start, checkpoints, terminal), after `after` when given.
fn run_commits(rows: &[oracle::CommitRow], owner: &str, after: Option<chrono::DateTime<chrono::Utc>>) -> usize {
    rows.iter()
        .filter(|r| r.is_runs() && r.op == "UPDATE" && r.writer == owner)
        .filter(|r| after.is_none_or(|t| r.committed_at > t))
        .count()
}

/// `owner`'s checkpoints: run-state commits that keep the status `running`.
fn checkpoints(rows: &[oracle::CommitRow], owner: &str) -> usize {
    rows.iter()
        .filter(|r| r.is_runs() && r.op == "UPDATE" && r.writer == owner)
        .filter(|r| r.old_str("status") == Some("running") && r.new_str("status") == Some("running"))
        .count()
}

/// Wait until `owner` has committed `n` checkpoints.
async fn wait_checkpoints(ctx: &Ctx, owner: &str, n: usize) -> Result<(), HarnessError> {
    let (pool, schema) = (ctx.pool.clone(), ctx.oracle_schema.clone());
    wait::until("A to commit three checkpoints", STEP, || {
        let (pool, schema, owner) = (pool.clone(), schema.clone(), owner.to_string());
        async move {
            let rows = oracle::commits_in(&pool, &schema).await?;
            Ok((checkpoints(&rows, &owner) >= n).then_some(()))
        }
    })
    .await
}

/// The server was frozen, A's own process kept running, and A noticed the unanswered renewal.
fn judge_freeze(
    ctx: &mut Ctx,
    confirmed: &str,
    a_state: Option<char>,
    noticed: &Result<serde_json::Value, HarnessError>,
) {
    ctx.check(Check::pass(SERVER_FROZEN, confirmed.to_string()));
    ctx.check(Check::expect(
        A_KEPT_RUNNING,
        a_state.is_some_and(|s| s != 'T' && s != 't'),
        format!("A's process state {}", shown(a_state)),
    ));
    ctx.check(Check::expect(
        UNANSWERED_RENEWAL_LOST,
        noticed.is_ok(),
        match noticed {
            Ok(e) => format!("A said {}: {}", e["event"], e["detail"].as_str().unwrap_or("")),
            Err(e) => format!(
                "A did not: no heartbeat_unconfirmed within {NOTICE_WITHIN:?} of the freeze (its renewal timeout is \
                 {A_RENEW_TIMEOUT_MS} ms), so it went on as if it still held the lease ({e})"
            ),
        },
    ));
}

/// How A's task ended: its run-state commits after the thaw, its checkpoints in all, its exit.
struct Stopped {
    after_thaw: usize,
    total: usize,
    code: Result<Option<i32>, HarnessError>,
}

/// After the thaw A commits at most the checkpoint in flight, and stops its task unfinished.
async fn judge_a_stops(
    ctx: &mut Ctx,
    a: &mut WorkerProc,
    thawed_at: chrono::DateTime<chrono::Utc>,
) -> Result<Stopped, HarnessError> {
    let code = a.wait_exit(STEP).await;
    let rows = ctx.commits().await?;
    let after_thaw = run_commits(&rows, &a.owner, Some(thawed_at));
    let total = checkpoints(&rows, &a.owner);
    ctx.check(Check::expect(
        AT_MOST_IN_FLIGHT_AFTER_THAW,
        after_thaw <= 1,
        format!("{after_thaw} run-state commit(s) of A after the thaw; {total} of its {STEPS} checkpoints in all"),
    ));
    ctx.check(Check::expect(
        A_STOPPED_UNFINISHED,
        matches!(code, Ok(Some(c)) if c != 0) && total < STEPS as usize,
        format!("A ended ({}) after {total} of {STEPS} checkpoints", exited(&code)),
    ));
    Ok(Stopped { after_thaw, total, code })
}

/// B asks for the lease until A's has expired by itself: B, its epoch, and how often it was refused.
async fn take_over_once_expired(ctx: &Ctx, run_id: uuid::Uuid) -> Result<(WorkerProc, i64, u32), HarnessError> {
    let mut b = ctx.spawn_worker("b", vec![]).await?;
    let acquire =
        json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 60_000, "heartbeat_ms": 30_000, "renew_timeout_ms": 2000});
    let mut refused = 0u32;
    let bound = Duration::from_millis(A_TTL_MS as u64) + STEP;
    let deadline = std::time::Instant::now() + bound;
    let b_lease = loop {
        let answer = b.request(acquire.clone(), STEP).await?;
        match outcome(&answer) {
            "ok" => break answer,
            "busy" => refused += 1,
            other => return Err(HarnessError::Other(format!("B's acquire answered {other}"))),
        }
        if std::time::Instant::now() >= deadline {
            return Err(HarnessError::Timeout {
                what: "B to take over once A's lease expires".into(),
                after_ms: bound.as_millis(),
            });
        }
        tokio::time::sleep(wait::POLL_EVERY * 5).await;
    };
    let epoch_b = b_lease["epoch"].as_i64().unwrap_or(-1);
    require_ok(&b.request(json!({"cmd": "save", "checkpoint": {"by": "b"}}), STEP).await?, "B save")?;
    require_ok(&b.request(json!({"cmd": "succeed"}), STEP).await?, "B succeed")?;
    require_ok(&b.request(json!({"cmd": "release"}), STEP).await?, "B release")?;
    Ok((b, epoch_b, refused))
}

/// A left its lease to expire (no release after the unanswered renewal), and B finished the task.
async fn judge_b_finishes(
    ctx: &mut Ctx,
    run_id: uuid::Uuid,
    a_owner: &str,
    epoch_b: i64,
    refused: u32,
) -> Result<(), HarnessError> {
    let rows = ctx.commits().await?;
    let a_released =
        rows.iter().any(|r| r.is_leases() && r.writer == a_owner && r.new_field("owner") == Some(&json!(null)));
    ctx.check(Check::expect(
        A_LEFT_LEASE_TO_EXPIRE,
        !a_released,
        format!("B's takeover (epoch {epoch_b}) was refused {refused} time(s) while A's lease was live"),
    ));
    let state = oracle::run_state(&ctx.pool, run_id).await?;
    ctx.check(Check::equal(
        B_FINISHED,
        (state.run["status"].as_str(), state.lease["epoch"].as_i64()),
        (Some("succeeded"), Some(epoch_b)),
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fenceproof_harness::testkit::commit_rows::{commit_row, CommitRowBuilder};
    use serde_json::json;

    fn task(owner: &str, apart_ms: i64) -> Vec<oracle::CommitRow> {
        let t0 = chrono::Utc::now();
        (0..STEPS as i64)
            .map(|i| {
                commit_row(i + 1, "agent_runs", "UPDATE")
                    .by(owner)
                    .change(json!({"status": "running"}), json!({"status": "running"}))
                    .at(t0 + chrono::Duration::milliseconds(i * apart_ms))
            })
            .collect()
    }

    /// A task paced as asked and done before the freeze took hold is the machine's (STARVED); one
    /// done without its pacing is the worker's (an ERROR naming it); a task still running is neither.
    #[test]
    fn an_unmade_moment_is_told_apart_by_the_database_clock() {
        let paced = unmade_moment(&task("a", PACE_MS as i64), "a");
        assert!(matches!(paced, Err(HarnessError::Inconclusive(_))), "{paced:?}");
        let unpaced = unmade_moment(&task("a", 1), "a");
        assert!(matches!(unpaced, Err(HarnessError::Worker { .. })), "{unpaced:?}");
        assert!(unmade_moment(&task("a", 1)[..10], "a").is_ok(), "the task was not finished");
    }
}
