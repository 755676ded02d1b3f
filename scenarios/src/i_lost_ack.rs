//! Experiment I — a lost acknowledgement (spec 05, 06, 07). The worker reaches the server only
//! through its own wire-protocol proxy ([`fenceproof_harness::faults::proxy`]), which lets one
//! transaction commit on the server and drops its reply (a lost acknowledgement), or drops its
//! COMMIT before the server sees it (a lost request), and closes the connection either way. From
//! the worker's side the two are the same failure: the outcome is unknown. The worker must answer
//! `outcome_unknown` (never a failure, and `ok` only when it read back and the write had really
//! committed, once), and before its next step read owner, epoch and revision back from the primary
//! and continue from what really committed.
//!
//! - `I-save`: a save's acknowledgement is lost (it committed), then the next save; a save's
//!   request is lost (it did not commit), then the next save. The oracle must show each
//!   checkpoint committed at most once, at consecutive revisions, and the next saves continuing
//!   from what committed.
//! - `I-terminal`: `succeed` loses its request, then (asked again) its acknowledgement, then is
//!   asked a third time: exactly one terminal write, `succeeded`, never `failed`.
//! - `I-renew`: a heartbeat renewal commits but its reply is lost: it counts as unknown, the
//!   execution is cancelled, and the worker commits nothing after it (no renewal, no write)
//!   although the database would still accept its lease. The lease then expires and another
//!   worker takes over.

use fenceproof_harness::check::evidence::shown;
use fenceproof_harness::check::Check;
use fenceproof_harness::faults::proxy::{patterns, Armed, Fired};
use fenceproof_harness::faults::{self, Injected};
use fenceproof_harness::record::{metrics, oracle};
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::ctx::{outcome, require_ok, scrape, Ctx, STEP, TAKEOVER_IS_NEXT_EPOCH};
use crate::experiment::{Checks, Experiment, Judges};
use crate::measured::LeaseTimes;

pub const TITLE_SAVE: &str = "Lost acknowledgement of a save: committed or not, answered unknown, read back";
pub const TITLE_TERMINAL: &str = "Lost acknowledgement of a terminal write: one terminal write, never failed";
pub const TITLE_RENEW: &str = "Lost acknowledgement of a renewal: unconfirmed, cancelled, nothing commits after";

/// Its registration: what it needs and what it judges.
pub const SAVE: Experiment = Experiment {
    id: "I-save",
    title: TITLE_SAVE,
    section: "06, 07",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(save(c)),
};

/// Its registration: what it needs and what it judges.
pub const TERMINAL: Experiment = Experiment {
    id: "I-terminal",
    title: TITLE_TERMINAL,
    section: "06, 07",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(terminal(c)),
};

/// Its registration: what it needs and what it judges.
pub const RENEW: Experiment = Experiment {
    id: "I-renew",
    title: TITLE_RENEW,
    section: "06, 07",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(renew(c)),
};

/// The names of its checks (the rule catalogue links rules to them).
pub const SAVE_ANSWERED_UNKNOWN: &str = "[commit.unknown-answered-unknown] a save whose COMMIT got no answer is answered outcome_unknown (or ok, read back and true)";
pub const SAVE_CONTINUES_FROM_COMMITTED: &str =
    "[commit.unknown-read-back] after an unknown outcome the next save continues from what really committed (oracle)";
pub const NO_CHECKPOINT_TWICE: &str =
    "[commit.unknown-read-back] no checkpoint commits twice and no revision is skipped or reused (oracle)";
pub const SAVE_NOT_FAILURE: &str =
    "[commit.unknown-not-failure] an unknown outcome never turns into a failure: the run is still running";
pub const TERMINAL_ANSWERED_UNKNOWN: &str = "[commit.unknown-answered-unknown] a terminal write whose COMMIT got no answer is answered outcome_unknown (or ok, read back and true)";
pub const ONE_TERMINAL_NEVER_FAILED: &str = "[commit.unknown-not-failure] exactly one terminal write, succeeded, and never failed after an unknown outcome (oracle)";
pub const LOST_REPLY_CANCELS: &str =
    "[lease.renew-unknown-cancels] a renewal whose reply was lost cancels the execution";
pub const NOTHING_AFTER_LOST_REPLY: &str = "[lease.renew-unknown-cancels] after the lost renewal reply the worker commits nothing: no renewal, no write (oracle)";
pub const METRICS_COUNT_UNKNOWN: &str = "A's metrics count the renewal with a lost reply as unknown";

/// The acquire of a worker whose heartbeat must stay out of the way (I-save, I-terminal).
fn quiet_acquire(run_id: Uuid) -> Value {
    json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 60_000, "heartbeat_ms": 20_000, "renew_timeout_ms": 5_000})
}

async fn new_run(ctx: &Ctx, task: &str) -> Result<Uuid, HarnessError> {
    runs::create_run(&ctx.pool, task, json!({})).await.map_err(|e| HarnessError::Other(e.to_string()))
}

/// The run's committed writes (agent_runs) by `owner`, in commit order: (revision, status, checkpoint).
async fn run_writes(ctx: &Ctx, run_id: Uuid, owner: &str) -> Result<Vec<(i64, String, Value)>, HarnessError> {
    Ok(ctx
        .commits()
        .await?
        .into_iter()
        .filter(|c| c.is_runs() && c.run_id == Some(run_id) && c.writer == owner && c.op == "UPDATE")
        .map(|c| {
            (
                c.new_i64("revision").unwrap_or(-1),
                c.new_str("status").unwrap_or("").to_string(),
                c.new_field("checkpoint").cloned().unwrap_or(Value::Null),
            )
        })
        .collect())
}

/// One line for the matrix: what the proxy did, and to which statement (its first words); a
/// fault that never fired is an observation (the worker sent no matching write), not an error:
/// the checks judge what committed either way.
fn fired_note(f: &Option<Fired>) -> String {
    let Some(f) = f else { return "the fault never fired: the worker sent no run write".into() };
    let short: String = f.sql.chars().take(40).collect();
    let what = match f.kind {
        fenceproof_harness::faults::proxy::ArmKind::LoseAck => "committed, acknowledgement lost",
        fenceproof_harness::faults::proxy::ArmKind::LoseRequest => "request lost, not committed",
        fenceproof_harness::faults::proxy::ArmKind::CutInTransaction => "cut inside its transaction",
    };
    format!("{what} ({short}…)")
}

/// Send `cmd` with `armed` set, and return the answer and what the proxy did. The proxy fires
/// before the worker can see the closed connection, so once the answer is in, a short wait
/// suffices; the fault is disarmed afterwards either way.
async fn through_fault(
    a: &mut fenceproof_harness::procs::worker::WorkerProc,
    armed: Injected<Armed>,
    cmd: Value,
) -> Result<(Value, Option<Fired>), HarnessError> {
    let ev = a.request(cmd, STEP).await?;
    let fired = armed.fired(std::time::Duration::from_secs(2)).await.ok();
    armed.heal().await?;
    Ok((ev, fired))
}

pub async fn save(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let run_id = new_run(ctx, "task-i-save").await?;
    let (mut a, proxy) = ctx.spawn_worker_proxied("a", vec![]).await?;
    require_ok(&a.request(quiet_acquire(run_id), STEP).await?, "A acquire")?;
    require_ok(&a.request(json!({"cmd": "start"}), STEP).await?, "A start")?;
    require_ok(&a.request(json!({"cmd": "save", "checkpoint": {"step": 1}}), STEP).await?, "A save 1")?;

    // The acknowledgement of save 2 is lost: it committed.
    let armed = faults::inject(proxy.lose_ack(patterns::RUN_WRITE, STEP)?, &ctx.timeline).await?;
    let (ev2, f2) = through_fault(&mut a, armed, json!({"cmd": "save", "checkpoint": {"step": 2}})).await?;
    ctx.note(format!("save 2: {}", fired_note(&f2)));
    let ev3 = a.request(json!({"cmd": "save", "checkpoint": {"step": 3}}), STEP).await?;
    // The request of save 4 is lost: it did not commit.
    let armed = faults::inject(proxy.lose_request(patterns::RUN_WRITE, STEP)?, &ctx.timeline).await?;
    let (ev4, f4) = through_fault(&mut a, armed, json!({"cmd": "save", "checkpoint": {"step": 4}})).await?;
    ctx.note(format!("save 4: {}", fired_note(&f4)));
    let ev5 = a.request(json!({"cmd": "save", "checkpoint": {"step": 5}}), STEP).await?;

    let answers = [("save 2 (ack lost)", &ev2), ("save 3", &ev3), ("save 4 (request lost)", &ev4), ("save 5", &ev5)];
    let said = answers.iter().map(|(l, e)| format!("{l}={}", outcome(e))).collect::<Vec<_>>().join(" ");
    let writes = run_writes(ctx, run_id, &a.owner).await?;
    let steps: Vec<(i64, Option<i64>)> = writes.iter().map(|(r, _, c)| (*r, c["step"].as_i64())).collect();
    let saved: Vec<i64> = steps.iter().filter_map(|(_, s)| *s).collect();
    let once = |step: i64| saved.iter().filter(|s| **s == step).count() == 1;
    // outcome_unknown is the answer; ok only from a worker that read back and found its write
    // committed exactly once (then it is true).
    let answered = |ev: &Value, step: i64| outcome(ev) == "outcome_unknown" || (outcome(ev) == "ok" && once(step));
    ctx.check(Check::expect(
        SAVE_ANSWERED_UNKNOWN,
        answered(&ev2, 2) && answered(&ev4, 4),
        format!("{said}; committed checkpoints {}", shown(&saved)),
    ));
    let mut expected = vec![1, 2, 3];
    if outcome(&ev4) == "ok" {
        expected.push(4);
    }
    expected.push(5);
    ctx.check(Check::expect(
        SAVE_CONTINUES_FROM_COMMITTED,
        saved == expected && outcome(&ev3) == "ok" && outcome(&ev5) == "ok",
        format!(
            "checkpoints committed by A, in order: {} (expected {}: 2 committed, 4 did not); {said}",
            shown(&saved),
            shown(&expected)
        ),
    ));
    let consecutive = steps.windows(2).all(|w| w[1].0 == w[0].0 + 1);
    ctx.check(Check::expect(
        NO_CHECKPOINT_TWICE,
        consecutive && saved.iter().collect::<std::collections::BTreeSet<_>>().len() == saved.len(),
        format!("A's writes (revision, step): {}", shown(&steps)),
    ));
    let end = oracle::run_state(&ctx.pool, run_id).await?;
    ctx.check(Check::expect(
        SAVE_NOT_FAILURE,
        end.run["status"] == "running",
        format!("run status {}", end.run["status"]),
    ));
    drop(proxy);
    a.shutdown(STEP).await?;
    Ok(())
}

pub async fn terminal(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let run_id = new_run(ctx, "task-i-terminal").await?;
    let (mut a, proxy) = ctx.spawn_worker_proxied("a", vec![]).await?;
    require_ok(&a.request(quiet_acquire(run_id), STEP).await?, "A acquire")?;
    require_ok(&a.request(json!({"cmd": "start"}), STEP).await?, "A start")?;
    require_ok(&a.request(json!({"cmd": "save", "checkpoint": {"step": 1}}), STEP).await?, "A save")?;

    let armed = faults::inject(proxy.lose_request(patterns::RUN_WRITE, STEP)?, &ctx.timeline).await?;
    let (ev1, f1) = through_fault(&mut a, armed, json!({"cmd": "succeed"})).await?;
    ctx.note(format!("succeed 1: {}", fired_note(&f1)));
    let after_first = oracle::run_state(&ctx.pool, run_id).await?.run["status"].clone();
    let armed = faults::inject(proxy.lose_ack(patterns::RUN_WRITE, STEP)?, &ctx.timeline).await?;
    let (ev2, f2) = through_fault(&mut a, armed, json!({"cmd": "succeed"})).await?;
    ctx.note(format!("succeed 2: {}", fired_note(&f2)));
    let ev3 = a.request(json!({"cmd": "succeed"}), STEP).await?;

    let said = format!(
        "succeed (request lost)={}, succeed again (ack lost)={}, succeed a third time={}; status after the first: {after_first}",
        outcome(&ev1),
        outcome(&ev2),
        outcome(&ev3)
    );
    let writes = run_writes(ctx, run_id, &a.owner).await?;
    let terminal: Vec<&(i64, String, Value)> = writes.iter().filter(|(_, s, _)| s != "running").collect();
    // The first succeed lost its request: outcome_unknown, or ok from a worker that read back,
    // found it not committed and completed (then its second succeed finds the run ended and no
    // write goes out). The second lost its acknowledgement: outcome_unknown, or ok read back.
    let ok_is_true = terminal.len() == 1 && terminal[0].1 == "succeeded";
    let answered = |ev: &Value| outcome(ev) == "outcome_unknown" || (outcome(ev) == "ok" && ok_is_true);
    ctx.check(Check::expect(
        TERMINAL_ANSWERED_UNKNOWN,
        answered(&ev1) && (f2.is_none() || answered(&ev2)),
        said.clone(),
    ));
    ctx.check(Check::expect(
        ONE_TERMINAL_NEVER_FAILED,
        terminal.len() == 1 && terminal[0].1 == "succeeded" && (after_first == "running" || outcome(&ev1) == "ok"),
        format!(
            "A's terminal commits (revision, status): {}; {said}",
            shown(terminal.iter().map(|(r, s, _)| (r, s)).collect::<Vec<_>>())
        ),
    ));
    drop(proxy);
    a.shutdown(STEP).await?;
    Ok(())
}

/// A's lease in I-renew: long enough that a loaded machine renews in time, short enough to expire
/// quickly once the worker has stopped renewing; stretched by A's measured round trip
/// ([`LeaseTimes::sized`]: a 600 ms renewal timeout was too short for the Go example at load 20).
const RENEW_LEASE: LeaseTimes = LeaseTimes { ttl_ms: 1500, heartbeat_ms: 150, renew_timeout_ms: 600 };

/// A's lease factor for each try. On a starved machine A's own renewal can come back later than its
/// timeout before the reply the harness loses: A then rightly stops (it says so, and never renews
/// again), and the row has no moment to judge. The setup is made again on a fresh run with a longer
/// lease; a worker that never renews at all stays a FAIL of the legal-step rule.
const RENEW_TRIES: [u64; 3] = [1, 2, 4];

/// A, holding its lease on `run_id` as `epoch_a`, whose heartbeat renewal just lost its reply.
struct Renewed {
    run_id: Uuid,
    a: fenceproof_harness::procs::worker::WorkerProc,
    proxy: fenceproof_harness::faults::proxy::Proxy,
    epoch_a: i64,
    fired: Fired,
}

/// Make the moment: A acquires and starts, and its next heartbeat renewal commits with its reply
/// lost; made again with a longer lease (a task of its own per try) when A's own renewal timed out
/// first.
async fn renew_setup(ctx: &mut Ctx) -> Result<Renewed, HarnessError> {
    for (i, factor) in RENEW_TRIES.iter().enumerate() {
        let (task, name) = if i == 0 {
            ("task-i-renew".into(), "a".into())
        } else {
            (format!("task-i-renew-try{}", i + 1), format!("a-try{}", i + 1))
        };
        let run_id = new_run(ctx, &task).await?;
        let (mut a, proxy) = ctx.spawn_worker_proxied(&name, vec![]).await?;
        let rt = crate::measured::round_trip(ctx, &mut a).await?;
        let base = LeaseTimes {
            ttl_ms: RENEW_LEASE.ttl_ms * *factor as i64,
            heartbeat_ms: RENEW_LEASE.heartbeat_ms * factor,
            renew_timeout_ms: RENEW_LEASE.renew_timeout_ms * factor,
        };
        let lease = LeaseTimes::sized(base, &rt);
        ctx.note(format!("round trip {} → A's {}", rt.describe(), lease.describe()));
        require_ok(&a.request(lease.acquire(run_id), STEP).await?, "A acquire")?;
        let start = a.request(json!({"cmd": "start"}), STEP).await?;
        // A start refused because A's own renewal had already gone unconfirmed (it said so first).
        let early = if outcome(&start) == "ok" { None } else { unconfirmed_said(&mut a).await };
        if early.is_none() {
            ctx.require_ok_while_live(&start, "A start", run_id).await?;
        }
        let epoch_a = oracle::run_state(&ctx.pool, run_id).await?.lease["epoch"].as_i64().unwrap_or(-1);
        // The heartbeat's next renewal commits; its reply is lost.
        let armed = faults::inject(proxy.lose_ack(patterns::LEASE_RENEW, STEP)?, &ctx.timeline).await?;
        let first = match early {
            Some(said) => Err(Some(said)),
            None => first_of(&armed, &mut a).await,
        };
        match first {
            Ok(fired) => return Ok(Renewed { run_id, a, proxy, epoch_a, fired }),
            Err(Some(said)) => {
                ctx.note(format!(
                    "try {}: A's own renewal timed out before the harness lost one ({said}: a starved machine, with A's {}); the setup was made again with a longer lease",
                    i + 1,
                    lease.describe()
                ));
                drop(armed);
                drop(proxy);
                a.shutdown(STEP).await?;
            }
            // A worker that never renews the lease it holds is broken, not the harness: a FAIL of
            // the legal-step rule rather than an ERROR.
            Err(None) => {
                return Err(HarnessError::StepRefused {
                    step: format!(
                        "A's heartbeat renewal (every {} ms of a {} ms lease)",
                        lease.heartbeat_ms, lease.ttl_ms
                    ),
                    answer: format!("no renewal reached the database within {} s", STEP.as_secs()),
                })
            }
        }
    }
    Err(HarnessError::Inconclusive(format!(
        "A's own renewal timed out before the lost reply at every lease tried ({RENEW_TRIES:?} × {}): the machine is too starved to make the moment",
        RENEW_LEASE.describe()
    )))
}

/// What A already said of its own renewal going unconfirmed, if it said so (no waiting).
async fn unconfirmed_said(a: &mut fenceproof_harness::procs::worker::WorkerProc) -> Option<String> {
    let ev = a.wait_event("A's own renewal unconfirmed", std::time::Duration::ZERO, |e| {
        e["event"] == "heartbeat_unconfirmed"
    });
    ev.await.ok().map(|ev| format!("A said heartbeat_unconfirmed: {}", ev["detail"].as_str().unwrap_or("")))
}

/// The armed fault's firing, or `Err(Some)` when A said its own renewal went unconfirmed
/// (`heartbeat_unconfirmed`, the contract's event) before the fault fired, or neither within
/// [`STEP`] (`Err(None)`). A's word only decides whether the setup is made again, never a verdict.
async fn first_of(
    armed: &Armed,
    a: &mut fenceproof_harness::procs::worker::WorkerProc,
) -> Result<Fired, Option<String>> {
    let said = tokio::select! {
        biased;
        fired = armed.fired(STEP) => return fired.map_err(|_| None),
        said = a.wait_event("A's own renewal unconfirmed", STEP, |e| e["event"] == "heartbeat_unconfirmed") => said,
    };
    // The fault may have fired while A's word was on its way: then the moment was made.
    match (armed.fired(std::time::Duration::ZERO).await, said) {
        (Ok(fired), _) => Ok(fired),
        (Err(_), Ok(ev)) => Err(Some(format!("A said heartbeat_unconfirmed: {}", ev["detail"].as_str().unwrap_or("")))),
        (Err(_), Err(_)) => armed.fired(STEP).await.map_err(|_| None),
    }
}

pub async fn renew(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let Renewed { run_id, mut a, proxy, epoch_a, fired } = renew_setup(ctx).await?;
    ctx.note(format!("renewal: {}", fired_note(&Some(fired))));
    let mark = ctx.oracle_mark().await?;
    let cancelled = a
        .wait_event("execution cancelled after the lost renewal reply", STEP, |e| e["event"] == "execution_cancelled")
        .await;
    ctx.check(Check::expect(
        LOST_REPLY_CANCELS,
        cancelled.is_ok(),
        match &cancelled {
            Ok(_) => "execution_cancelled after the lost renewal reply".to_string(),
            Err(e) => e.to_string(),
        },
    ));
    // The lease must now run out: a worker that took the lost reply for a renewal keeps renewing.
    let expired = ctx.wait_lease_expired(run_id).await;
    let after: Vec<_> = ctx.commits().await?.into_iter().filter(|c| c.seq > mark && c.writer == a.owner).collect();
    ctx.check(
        Check::expect(
            NOTHING_AFTER_LOST_REPLY,
            after.is_empty() && expired.is_ok(),
            format!(
                "{} commits by A after #{mark}{}; lease expiry: {}",
                after.len(),
                after.first().map(|c| format!(" (first: {} #{})", c.table_name, c.seq)).unwrap_or_default(),
                match &expired {
                    Ok(()) => "expired".to_string(),
                    Err(e) => e.to_string(),
                }
            ),
        )
        .citing(after.iter().map(|c| c.seq)),
    );
    let text = scrape(&mut a, &ctx.dir).await?;
    let unknown = metrics::value(&text, "lease_renew_total{outcome=\"unknown\"}").unwrap_or(0.0);
    ctx.check(Check::expect(
        METRICS_COUNT_UNKNOWN,
        unknown >= 1.0,
        format!("lease_renew_total{{outcome=\"unknown\"}} {unknown}"),
    ));

    // Recovery: another worker takes over the expired lease and completes.
    let mut b = ctx.spawn_worker("b", vec![]).await?;
    let acq = b.request(quiet_acquire(run_id), STEP).await?;
    require_ok(&acq, "B takeover")?;
    ctx.check(Check::equal(TAKEOVER_IS_NEXT_EPOCH, acq["epoch"].as_i64(), Some(epoch_a + 1)));
    require_ok(&b.request(json!({"cmd": "succeed"}), STEP).await?, "B succeed")?;
    drop(proxy);
    a.shutdown(STEP).await?;
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
        for (name, any) in [
            (SAVE_ANSWERED_UNKNOWN, tags::ANY_COMMIT_UNKNOWN_ANSWERED_UNKNOWN),
            (TERMINAL_ANSWERED_UNKNOWN, tags::ANY_COMMIT_UNKNOWN_ANSWERED_UNKNOWN),
            (SAVE_CONTINUES_FROM_COMMITTED, tags::ANY_COMMIT_UNKNOWN_READ_BACK),
            (NO_CHECKPOINT_TWICE, tags::ANY_COMMIT_UNKNOWN_READ_BACK),
            (SAVE_NOT_FAILURE, tags::ANY_COMMIT_UNKNOWN_NOT_FAILURE),
            (ONE_TERMINAL_NEVER_FAILED, tags::ANY_COMMIT_UNKNOWN_NOT_FAILURE),
            (LOST_REPLY_CANCELS, tags::ANY_LEASE_RENEW_UNKNOWN_CANCELS),
            (NOTHING_AFTER_LOST_REPLY, tags::ANY_LEASE_RENEW_UNKNOWN_CANCELS),
        ] {
            assert!(matches(any, name), "{name} does not match {any}");
        }
    }
}
