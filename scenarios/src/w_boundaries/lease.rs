//! W-lease: the worker under test, driven to the lease rules' boundaries (spec §05, §06). No
//! cooperation is asked of it beyond its ordinary commands:
//! - it acquires one run while other leases are free, and two processes of one host (one owner id)
//!   hold two runs at the same epoch: a renewal, a release or a takeover must change the named
//!   lease only;
//! - its lease expires with nobody taking over: a renewal and a save must then be refused;
//! - its renewal, and its save, start while the lease is live and wait on the lease row, which the
//!   harness holds ([`RowHold`]) until the lease has expired on the database clock: when they run
//!   their check the lease has expired, so they must be refused (judged at the check, not at the
//!   statement's or the transaction's start).
//!
//! Verdicts come from the rows and the oracle; the worker's answers are secondary.

use std::time::Duration;

use fenceproof_harness::check::evidence::{listed, shown};
use fenceproof_harness::check::{lease_terms, Check, Verdict};
use fenceproof_harness::faults::row_hold::RowHold;
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::ctx::{outcome, require_ok, Ctx, CONTROL, STEP};
use crate::experiment::{Checks, Experiment, Judges};
use crate::tags::{self, tagged};

pub const TITLE: &str = "The worker at the lease rules' boundaries: neighbouring leases, expiry without takeover, checks held across expiry";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "W-lease",
    title: TITLE,
    section: "05",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

fn acquire(run: Uuid, ttl_ms: i64) -> Value {
    json!({"cmd": "acquire", "run_id": run, "ttl_ms": ttl_ms, "heartbeat_ms": 600_000, "renew_timeout_ms": 5_000})
}

async fn lease(ctx: &Ctx, run: Uuid) -> Result<Value, HarnessError> {
    Ok(fenceproof_harness::record::oracle::run_state(&ctx.pool, run).await?.lease)
}

/// The rule id goes first, in brackets, so the catalogue maps the check.
fn check(ctx: &mut Ctx, rule: &str, what: &str, ok: bool, evidence: String) {
    ctx.check(Check::expect(tagged(rule, what), ok, evidence));
}

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let err = |e: fenceproof_protocol::ProtocolError| HarnessError::Other(e.to_string());
    let mut r = Vec::new();
    for i in 0..6 {
        r.push(runs::create_run(&ctx.pool, &format!("task-wl-{i}"), json!({})).await.map_err(err)?);
    }
    let host = format!("host-{}", &Uuid::new_v4().simple().to_string()[..8]);

    // Neighbouring leases: the named lease only.
    let mut a = ctx.spawn_worker_as("a", &host, vec![]).await?;
    let before = [lease(ctx, r[1]).await?, lease(ctx, r[2]).await?];
    require_ok(&a.request(acquire(r[0], 600_000), STEP).await?, "A acquires a free lease")?;
    let after = [lease(ctx, r[1]).await?, lease(ctx, r[2]).await?];
    check(
        ctx,
        tags::LEASE_ACQUIRE_FREE_OR_EXPIRED,
        "a takeover changes the named lease only (other leases are free)",
        before == after,
        format!("free leases before {}, after {}", shown(&before[..]), shown(&after[..])),
    );
    let mut a2 = ctx.spawn_worker_as("a2", &host, vec![]).await?;
    require_ok(&a2.request(acquire(r[1], 600_000), STEP).await?, "A2 (same host) acquires a second lease")?;
    let other = lease(ctx, r[1]).await?;
    require_ok(&a.request(json!({"cmd": "renew"}), STEP).await?, "A renews its live lease")?;
    let other_after = lease(ctx, r[1]).await?;
    check(
        ctx,
        tags::LEASE_RENEW_OWNER_EPOCH,
        "a renewal changes the named lease only (the same owner holds another at the same epoch)",
        other == other_after,
        format!("{} -> {}", shown(&other["expires_at"]), shown(&other_after["expires_at"])),
    );
    let mine = lease(ctx, r[0]).await?;
    require_ok(&a2.request(json!({"cmd": "release"}), STEP).await?, "A2 releases its lease")?;
    let mine_after = lease(ctx, r[0]).await?;
    check(
        ctx,
        tags::LEASE_RELEASE_OWNER_EPOCH,
        "a release frees the named lease only (the same owner holds another at the same epoch)",
        mine == mine_after,
        format!("{mine} -> {mine_after}"),
    );
    let released = lease(ctx, r[1]).await?;
    check(
        ctx,
        tags::LEASE_RELEASE_KEEPS_EPOCH,
        "the released lease is free and keeps its epoch",
        released["owner"].is_null() && released["epoch"] == 1,
        released.to_string(),
    );

    expiry_without_takeover(ctx, r[2]).await?;
    ttl_exact(ctx).await?;

    // A renewal and a save whose check waits, on the lease row, across the expiry.
    let renew_done = held_across_expiry(ctx, r[3], "renew", |_| json!({"cmd": "renew"})).await?;
    let save_done =
        held_across_expiry(ctx, r[4], "save", |_| json!({"cmd": "save", "checkpoint": {"held": true}})).await?;
    if !(renew_done && save_done) {
        return Err(HarnessError::Inconclusive(
            "the held-across-expiry probes stayed inconclusive up to a 5 s lease (each lease lapsed before the \
             harness's command reached the worker)"
                .into(),
        ));
    }

    a.shutdown(STEP).await?;
    a2.shutdown(STEP).await?;
    let _rows = ctx.commits().await?;
    ctx.note(format!("{} boundary checks on the worker's lease handling", ctx.checks.len()));
    Ok(())
}

/// An odd TTL, not a whole number of seconds: at the acquire and at a renewal the worker's lease
/// commit must set expiry = update time + exactly that many milliseconds (§05.1: integer
/// milliseconds, not a rounded duration). Judged from the oracle's rows of the worker's commits,
/// each within its own transaction's span (`check::lease_terms`).
async fn ttl_exact(ctx: &mut Ctx) -> Result<(), HarnessError> {
    const TTL_MS: i64 = 1_234;
    let run =
        runs::create_run(&ctx.pool, "task-wl-ttl", json!({})).await.map_err(|e| HarnessError::Other(e.to_string()))?;
    let mut t = ctx.spawn_worker("ttl", vec![]).await?;
    // The renewal must reach the worker within the 1,234 ms: when it came after the lease lapsed
    // (a busy machine), the worker takes the expired lease again and renews again.
    let mut renewed = false;
    for _ in 0..3 {
        require_ok(&t.request(acquire(run, TTL_MS), STEP).await?, "the worker acquires with a 1,234 ms TTL")?;
        let r = t.request(json!({"cmd": "renew"}), STEP).await?;
        if ctx.ok_while_live(&r, "the worker renews its live lease", run).await? {
            renewed = true;
            break;
        }
    }
    t.shutdown(STEP).await?;
    if !renewed {
        return Err(HarnessError::Inconclusive(format!(
            "three renewals of a {TTL_MS} ms lease each came after it lapsed on the database clock"
        )));
    }
    let rows = ctx.commits().await?;
    let mine = rows.iter().filter(|r| r.writer == t.owner && r.run_id == Some(run));
    let (n, off) = lease_terms::off_terms(mine, &[TTL_MS]);
    let what = "a 1,234 ms TTL is a term of exactly 1,234 ms at the acquire and at a renewal (expiry - update time)";
    let judged = Check::from_found(
        tagged(tags::LEASE_TTL_MILLISECONDS, what),
        off,
        format!("{n} lease commits, each {TTL_MS} ms"),
    );
    ctx.check(if n >= 2 { judged } else { Check { verdict: Verdict::Fail, ..judged } });
    Ok(())
}

/// Expiry with nobody taking over: the worker's renewal and save after it commit nothing.
async fn expiry_without_takeover(ctx: &mut Ctx, run: Uuid) -> Result<(), HarnessError> {
    let mut c = ctx.spawn_worker("c", vec![]).await?;
    require_ok(&c.request(acquire(run, 700), STEP).await?, "C acquires a short lease")?;
    // Started or not (a start that came after the 700 ms lapsed), nothing may commit after expiry.
    let started = c.request(json!({"cmd": "start"}), STEP).await?;
    ctx.ok_while_live(&started, "C starts its run", run).await?;
    ctx.wait_lease_expired(run).await?;
    let mark = ctx.oracle_mark().await?;
    let renewed = c.request(json!({"cmd": "renew"}), STEP).await?;
    let saved = c.request(json!({"cmd": "save", "checkpoint": {"late": true}}), STEP).await?;
    let rows = ctx.commits().await?;
    let late: Vec<i64> = rows.iter().filter(|x| x.seq > mark && x.writer == c.owner).map(|x| x.seq).collect();
    let name = tagged(
        tags::LEASE_RENEW_UNEXPIRED,
        "after its lease expired (no takeover), the worker's renewal and save commit nothing",
    );
    let evidence = format!(
        "renew answered {}, save answered {}; commits by C after expiry: {}",
        outcome(&renewed),
        outcome(&saved),
        listed(late.iter().map(|s| format!("#{s}")))
    );
    ctx.check(Check::expect(name, late.is_empty(), evidence).citing(late.iter().copied()));
    c.shutdown(STEP).await?;

    Ok(())
}

/// How many milliseconds the lease of `run` has left on the database clock now (zero or less:
/// expired).
async fn lease_left_ms(ctx: &Ctx, run: Uuid) -> Result<i64, HarnessError> {
    Ok(sqlx::query_scalar(
        "SELECT (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint FROM worker_leases \
         WHERE run_id = $1",
    )
    .bind(run)
    .fetch_one(&ctx.pool)
    .await?)
}

/// Whether a command answered without waiting on the held lease row met a live lease: the lease
/// (which the hold keeps unchanged) still had time left on the database clock when the answer
/// was seen, so it was live at whatever moment between the command and its answer the worker
/// judged it. A lease that had expired by the answer leaves the attempt inconclusive: the worker
/// may have judged it after expiry, and a refusal then is right.
fn live_throughout(left_ms_at_send: i64, left_ms_at_answer: i64) -> bool {
    left_ms_at_send > 0 && left_ms_at_answer > 0
}

/// A command answered (`a`) without waiting on the held lease row: a FAIL when the lease was
/// live on the database clock from the command to its answer (true: judged), else nothing proven
/// (false). The moment goes into the timeline either way.
fn judge_early(ctx: &mut Ctx, what: &str, a: &Value, left_at_send: i64, left_at_answer: i64) -> bool {
    let moment = json!({"answer": a, "left_ms_at_send": left_at_send, "left_ms_at_answer": left_at_answer});
    ctx.timeline.record("harness", "answered_without_waiting", what, moment);
    if !live_throughout(left_at_send, left_at_answer) {
        return false;
    }
    let rule = if what == "renew" { tags::LEASE_RENEW_UNEXPIRED } else { tags::COMMIT_LEASE_OWNER_EPOCH_LIVE };
    check(
        ctx,
        rule,
        &format!("a {what} of a live lease takes the lease row (its check is made under the row's lock)"),
        false,
        format!(
            "answered {} without ever waiting on the lease row, which the harness held, while the lease was live \
             on the database clock from the command ({left_at_send} ms left) to its answer ({left_at_answer} ms left)",
            outcome(a)
        ),
    );
    true
}

/// Wait until the worker's command `id` is seen waiting on the harness's hold of the lease row
/// (true) or answered without waiting (its answer), bounded by [`STEP`].
async fn seen_at_hold(
    ctx: &Ctx,
    x: &mut WorkerProc,
    hold: &fenceproof_harness::faults::Injected<RowHold>,
    id: u64,
) -> Result<(bool, Option<Value>), HarnessError> {
    let started = std::time::Instant::now();
    while started.elapsed() < STEP {
        if let Some(a) = x.poll_event(|ev| ev["id"] == json!(id)) {
            return Ok((false, Some(a)));
        }
        if hold.blocks(&ctx.pool, &x.owner).await? {
            return Ok((true, None));
        }
        tokio::time::sleep(fenceproof_harness::wait::POLL_EVERY).await;
    }
    Ok((false, None))
}

/// A command that began while the lease was live but reached its check after expiry commits
/// nothing (the worker's commits after `mark`).
async fn judge_held(ctx: &mut Ctx, x: &WorkerProc, what: &str, mark: i64, answer: &Value) -> Result<(), HarnessError> {
    let rows = ctx.commits().await?;
    let late: Vec<_> = rows.iter().filter(|r| r.seq > mark && r.writer == x.owner).collect();
    let said = listed(late.iter().map(|r| format!("#{} {} {}", r.seq, r.op, r.table_name)));
    let rule = if what == "renew" { tags::LEASE_RENEW_UNEXPIRED } else { tags::COMMIT_LEASE_OWNER_EPOCH_LIVE };
    let name = tagged(
        rule,
        &format!("a {what} that began while the lease was live but reached its check after expiry commits nothing"),
    );
    let evidence = format!("answered {}; commits by the worker after the hold: {said}", outcome(answer));
    ctx.check(Check::expect(name, late.is_empty(), evidence).citing(late.iter().map(|r| r.seq)));
    Ok(())
}

/// A worker takes `run`'s lease (and starts the run), the harness holds the lease row, the worker
/// is told to `what` while the lease is live and must be seen waiting; once the lease has expired
/// on the database clock the hold is released. Whatever the worker answers, nothing of it may
/// commit. False when inconclusive after three lease lengths (the command began after expiry).
async fn held_across_expiry(
    ctx: &mut Ctx,
    run: Uuid,
    what: &str,
    cmd: impl Fn(u32) -> Value,
) -> Result<bool, HarnessError> {
    let mut w: Option<WorkerProc> = None;
    for (i, ttl) in [1_200i64, 2_500, 5_000].into_iter().enumerate() {
        if let Some(mut old) = w.take() {
            old.shutdown(STEP).await?;
            ctx.wait_lease_expired(run).await?;
        }
        let mut x = ctx.spawn_worker(&format!("h{what}{i}"), vec![]).await?;
        require_ok(&x.request(acquire(run, ttl), STEP).await?, &format!("{what} worker acquires"))?;
        let run_now = fenceproof_harness::record::oracle::run_state(&ctx.pool, run).await?.run;
        if run_now["status"] == "pending" {
            let started = x.request(json!({"cmd": "start"}), STEP).await?;
            if !ctx.ok_while_live(&started, &format!("{what} worker starts"), run).await? {
                w = Some(x);
                continue;
            }
        }
        let hold = fenceproof_harness::faults::inject(
            RowHold::update(&ctx.db_url, CONTROL, "worker_leases", "run_id", &run.to_string()),
            &ctx.timeline,
        )
        .await?;
        let mark = ctx.oracle_mark().await?;
        let left_at_send = lease_left_ms(ctx, run).await?;
        let id = x.send(cmd(i as u32)).await?;
        // The worker's statement must come to the lease row (its check is made under the row's
        // lock): either it is seen waiting on the hold, or it answered without ever touching it.
        let (blocked, early) = seen_at_hold(ctx, &mut x, &hold, id).await?;
        if let Some(a) = early {
            let left_at_answer = lease_left_ms(ctx, run).await?;
            hold.heal().await?;
            if !judge_early(ctx, what, &a, left_at_send, left_at_answer) {
                // The lease expired (on the database clock) before or while the command ran: a
                // refusal is right, and this attempt proves nothing either way. A longer lease.
                w = Some(x);
                continue;
            }
            x.shutdown(STEP).await?;
            return Ok(true);
        }
        let live: bool =
            sqlx::query_scalar("SELECT expires_at > clock_timestamp() FROM worker_leases WHERE run_id = $1")
                .bind(run)
                .fetch_one(&ctx.pool)
                .await?;
        let waited = if blocked && live { ctx.wait_lease_expired(run).await } else { Ok(()) };
        hold.heal().await?;
        if !blocked {
            return Err(HarnessError::Timeout {
                what: format!("the {what}, which neither answered nor waited on the lease row,"),
                after_ms: STEP.as_millis(),
            });
        }
        waited?;
        let answer = x.reply(id, STEP).await?;
        ctx.timeline.record(
            "harness",
            "held_across_expiry",
            what,
            json!({"live_when_seen_waiting": live, "answer": answer}),
        );
        if !live {
            w = Some(x);
            continue;
        }
        judge_held(ctx, &x, what, mark, &answer).await?;
        x.shutdown(STEP).await?;
        return Ok(true);
    }
    if let Some(mut old) = w.take() {
        old.shutdown(Duration::from_secs(5)).await?;
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::live_throughout;

    /// The moment of the false FAIL on a loaded machine: a 1,200 ms lease, the renewal sent 1.2 s
    /// after the acquire (the lease already expired on the database clock), answered `lease_lost`
    /// at once. Right, and no verdict either way.
    #[test]
    fn a_refusal_of_a_lease_expired_before_the_command_proves_nothing() {
        assert!(!live_throughout(-3, -5));
        assert!(!live_throughout(0, -1));
    }

    #[test]
    fn a_lease_expiring_between_command_and_answer_proves_nothing() {
        assert!(!live_throughout(40, -2));
        assert!(!live_throughout(1, 0));
    }

    #[test]
    fn an_answer_without_waiting_while_the_lease_lives_on_the_database_clock_fails() {
        assert!(live_throughout(1_150, 1_120));
    }
}
