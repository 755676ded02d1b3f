//! Experiment M — the Redis pre-filter fails; PostgreSQL's fencing holds (spec §03: a Redis lock
//! taken with `SET key token NX PX`, renewed and released by compare-token, is a contention
//! pre-filter, never a safety boundary; the protected-write rules must hold regardless).
//!
//! A real redis-server of the experiment's own (loopback, no persistence). The harness is the
//! scheduler that uses the pre-filter: a worker is sent to a run only while the scheduler holds the
//! run's Redis key under that worker's token. A holds the key and the run's PostgreSQL lease and
//! saves; B is kept out by the key. Then the key is lost while A is SIGSTOPped:
//! - `M-redis-expiry`: the key's own TTL runs out during the pause;
//! - `M-redis-restart`: Redis restarts without persistence and forgets it.
//!
//! Once A's lease has expired on the database clock, B takes the key and the lease (epoch + 1) and
//! saves. A is SIGCONTed still believing it holds the key: two workers now believe it. A's
//! compare-token renew and release are refused by Redis (the key is B's), and everything A then
//! does — renew, save at its stale and at the current revision, succeed, fail, release — is refused
//! by PostgreSQL: nothing of A commits after B's takeover. The mutant `trust-prefilter-lock` (the
//! pre-filter as the boundary: writes without the lease check, takeovers without expiry) is killed.
//!
//! On a loaded machine A's key or lease can lapse before B's attempt is made while A holds it; that
//! is observed (Redis's PTTL in the script of B's attempt, A's term on the database clock) and the
//! setup is made again on a fresh run with longer timings, up to four times its own.

use fenceproof_harness::check::Check;
use fenceproof_harness::procs::redis::{PrefilterLock, RedisServer};
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::record::oracle;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::json;

use crate::ctx::{require_ok, Ctx, StaleChecks, STEP, TAKEOVER_IS_NEXT_EPOCH};
use crate::experiment::{Checks, Experiment, Judges, Need};
use crate::measured::{self, LeaseTimes};

pub const TITLE_EXPIRY: &str = "Redis pre-filter: the lock expires while its holder is paused; PostgreSQL fences";
pub const TITLE_RESTART: &str =
    "Redis pre-filter: Redis restarts without persistence and forgets the lock; PostgreSQL fences";

/// Its registration: what it needs and what it judges.
pub const REDIS_EXPIRY: Experiment = Experiment {
    id: "M-redis-expiry",
    title: TITLE_EXPIRY,
    section: "03",
    needs: &[Need::Redis],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c, Loss::Expiry)),
};

/// Its registration: what it needs and what it judges.
pub const REDIS_RESTART: Experiment = Experiment {
    id: "M-redis-restart",
    title: TITLE_RESTART,
    section: "03",
    needs: &[Need::Redis],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c, Loss::Restart)),
};

/// How the pre-filter loses A's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    Expiry,
    Restart,
}

/// The names of its checks, in the order it makes them (the rule catalogue links rules to them).
pub const A_TAKES_KEY: &str = "A takes the pre-filter key (SET NX PX)";
pub const KEY_KEEPS_B_OUT: &str = "while A holds the key the pre-filter keeps B out";
pub const LOST_KEY_ADMITS_B: &str =
    "once the key is lost the pre-filter admits B although A never released it (two believe they hold it)";
// B's takeover: `ctx::TAKEOVER_IS_NEXT_EPOCH`.
pub const COMPARE_TOKEN_REFUSES_A: &str =
    "A's compare-token renew and release are refused: A does not get the key back";
pub const NOTHING_OF_A_COMMITS: &str =
    "[prefilter.not-a-boundary] nothing A writes after B's takeover commits: PostgreSQL fences what the pre-filter could not (oracle)";
pub const ROWS_UNCHANGED_BY_RESUMED: &str =
    "[prefilter.not-a-boundary] B's lease and the run are unchanged by the resumed A (database rows)";

/// A's lease on an unloaded machine, stretched by the measured round trip ([`LeaseTimes::sized`]).
const A_LEASE: LeaseTimes = LeaseTimes { ttl_ms: 600, heartbeat_ms: 100, renew_timeout_ms: 300 };
/// The Redis key's TTL on an unloaded machine: longer than the lease's, as a pre-filter's usually
/// is. It must outlast A's acquire, start and save, so it is at least K round trips for each.
const KEY_TTL_MS: u64 = 1500;

/// Each try's factor on the key's TTL and A's lease. On a loaded machine A's key (or A's lease) can
/// lapse before B's attempt is made while A holds it: the moment was not made, which is observed
/// (Redis's PTTL in the same script as B's attempt; A's term on the database clock), and the setup
/// is made again on a fresh run with longer timings. B admitted while A's key holds stays a FAIL.
const TRIES: [u64; 3] = [1, 2, 4];

/// What a try made: A holding key and lease, the run, the key, A's timings.
struct Setup {
    a: WorkerProc,
    run_id: uuid::Uuid,
    key: String,
    epoch_a: i64,
    lease: LeaseTimes,
    key_ttl_ms: u64,
    rt: measured::RoundTrip,
}

async fn setup(ctx: &mut Ctx, lock: &PrefilterLock, tokens: &(String, String)) -> Result<Setup, HarnessError> {
    for (i, factor) in TRIES.iter().enumerate() {
        // A task and a worker of its own per try: the lapsed try's run stays live.
        let (task, name) = if i == 0 {
            ("task-m".into(), "a".into())
        } else {
            (format!("task-m-try{}", i + 1), format!("a-try{}", i + 1))
        };
        let run_id =
            runs::create_run(&ctx.pool, &task, json!({})).await.map_err(|e| HarnessError::Other(e.to_string()))?;
        let key = format!("fenceproof:run:{run_id}");
        let mut a = ctx.spawn_worker(&name, vec![]).await?;
        let rt = measured::round_trip(ctx, &mut a).await?;
        let base = LeaseTimes {
            ttl_ms: A_LEASE.ttl_ms * *factor as i64,
            heartbeat_ms: A_LEASE.heartbeat_ms * factor,
            renew_timeout_ms: A_LEASE.renew_timeout_ms * factor,
        };
        let lease = LeaseTimes::sized(base, &rt);
        let key_ttl_ms = measured::covering(KEY_TTL_MS * factor, 3, &rt);
        let keyed = Keyed { lock, key: &key, token_a: &tokens.0, token_b: &tokens.1, ttl_ms: key_ttl_ms };
        match a_holds_key_and_lease(ctx, &keyed, &mut a, (run_id, &lease)).await? {
            Held::Yes(epoch_a) => return Ok(Setup { a, run_id, key, epoch_a, lease, key_ttl_ms, rt }),
            Held::Lapsed(what) => {
                ctx.note(format!(
                    "try {}: {what} before B's attempt (key TTL {key_ttl_ms} ms, A's {}; a loaded machine); the setup was made again with longer timings",
                    i + 1,
                    lease.describe()
                ));
                a.shutdown(STEP).await?;
            }
        }
    }
    Err(HarnessError::Inconclusive(format!(
        "A's key or lease lapsed before B's attempt at every timing tried ({TRIES:?} × key TTL {KEY_TTL_MS} ms, A's {}): the machine is too loaded to make the moment",
        A_LEASE.describe()
    )))
}

pub async fn run(ctx: &mut Ctx, loss: Loss) -> Result<(), HarnessError> {
    let mut redis = RedisServer::start(&ctx.dir, &ctx.timeline).await?;
    let lock = redis.lock();
    let tokens = (uuid::Uuid::new_v4().to_string(), uuid::Uuid::new_v4().to_string());
    let Setup { mut a, run_id, key, epoch_a, lease, key_ttl_ms, rt } = setup(ctx, &lock, &tokens).await?;
    let sizes = (lease, key_ttl_ms);
    let keyed = Keyed { lock: &lock, key: &key, token_a: &tokens.0, token_b: &tokens.1, ttl_ms: key_ttl_ms };

    // Fault: A is paused and the key is lost.
    let pause = a.pause().await?;
    match loss {
        Loss::Expiry => {
            let lock2 = lock.clone();
            let key2 = key.clone();
            let bound = STEP + std::time::Duration::from_millis(keyed.ttl_ms);
            fenceproof_harness::wait::until("the pre-filter key to expire", bound, || {
                let (lock, key) = (lock2.clone(), key2.clone());
                async move { Ok(lock.holder(&key).await?.is_none().then_some(())) }
            })
            .await?;
        }
        Loss::Restart => redis.restart().await?,
    }
    ctx.timeline.record("harness", "prefilter_lost", "redis", json!({ "how": format!("{loss:?}"), "key": key }));
    ctx.wait_lease_expired(run_id).await?;

    // B passes the pre-filter and takes over.
    let (mut b, takeover, before) = b_takes_key_and_lease(ctx, &keyed, run_id, (epoch_a, loss)).await?;

    // Heal: A resumes, believing it holds the key; Redis's compare-token refuses its renew and
    // release, and PostgreSQL refuses everything it writes.
    pause.heal().await?;
    judge_compare_token(ctx, &keyed).await?;
    let (attempts, stale) = ctx
        .judge_stale_after_takeover(
            &mut a,
            run_id,
            takeover,
            &before,
            StaleChecks { nothing_commits: NOTHING_OF_A_COMMITS, rows_unchanged: ROWS_UNCHANGED_BY_RESUMED },
        )
        .await?;
    require_ok(&b.request(json!({"cmd": "succeed"}), STEP).await?, "B succeed")?;
    let freed = lock.release(&key, keyed.token_b).await?;
    ctx.note(format!(
        "round trip {} → A's {}, key TTL {} ms; key lost by {}; B took key and lease (epoch {}); A resumed: redis renew/release refused, {}; {} stale commits; B released its key: {freed}",
        rt.describe(),
        sizes.0.describe(),
        keyed.ttl_ms,
        match loss {
            Loss::Expiry => "expiry during A's pause",
            Loss::Restart => "a Redis restart without persistence",
        },
        epoch_a + 1,
        attempts.join(" "),
        stale
    ));
    a.shutdown(STEP).await?;
    b.shutdown(STEP).await?;
    drop(redis);
    Ok(())
}

/// The run's pre-filter key and the tokens A and B take it with.
struct Keyed<'a> {
    lock: &'a PrefilterLock,
    key: &'a str,
    token_a: &'a str,
    token_b: &'a str,
    /// The key's TTL when A takes it.
    ttl_ms: u64,
}

/// Whether A held key and lease when B tried: A's epoch, or what lapsed first.
enum Held {
    Yes(i64),
    Lapsed(String),
}

/// A takes the key, then the lease, starts and saves; while A holds the key, B is kept out.
async fn a_holds_key_and_lease(
    ctx: &mut Ctx,
    k: &Keyed<'_>,
    a: &mut WorkerProc,
    (run_id, lease): (uuid::Uuid, &LeaseTimes),
) -> Result<Held, HarnessError> {
    let key = k.key;
    let taken = std::time::Instant::now();
    let got = k.lock.acquire(key, k.token_a, k.ttl_ms).await?;
    ctx.check(Check::expect(A_TAKES_KEY, got, format!("SET {key} NX PX {}: {got}", k.ttl_ms)));
    let acq = a.request(lease.acquire(run_id), STEP).await?;
    require_ok(&acq, "A acquire")?;
    let epoch_a = acq["epoch"].as_i64().unwrap_or(-1);
    let start = a.request(json!({"cmd": "start"}), STEP).await?;
    let save = if start["outcome"] == "ok" {
        a.request(json!({"cmd": "save", "checkpoint": {"step": 1, "by": "a"}}), STEP).await?
    } else {
        start.clone()
    };
    if save["outcome"] != "ok" && measured::lapsed_untaken(ctx, run_id, &a.owner, epoch_a).await? {
        return Ok(Held::Lapsed(format!(
            "A's lease lapsed (a renewal later than its timeout) {} ms after A took the key",
            taken.elapsed().as_millis()
        )));
    }
    require_ok(&start, "A start")?;
    require_ok(&save, "A save")?;
    // B tries only while A's token holds the key, observed in the same step as the attempt.
    let probe = k.lock.acquire_while_held(key, k.token_a, k.token_b, 30_000).await?;
    if !probe.held {
        return Ok(Held::Lapsed(format!(
            "A's pre-filter key lapsed {} ms after A took it (PTTL {})",
            taken.elapsed().as_millis(),
            probe.pttl_ms
        )));
    }
    ctx.check(Check::expect(
        KEY_KEEPS_B_OUT,
        !probe.granted,
        format!(
            "B's SET NX while A holds the key (PTTL {} ms): {}",
            probe.pttl_ms,
            if probe.granted { "granted" } else { "refused" }
        ),
    ));
    Ok(Held::Yes(epoch_a))
}

/// Once the key is lost B passes the pre-filter, takes over the expired lease (A's epoch + 1) and
/// saves. Returns B, the oracle's mark after its save, and the run and lease then.
async fn b_takes_key_and_lease(
    ctx: &mut Ctx,
    k: &Keyed<'_>,
    run_id: uuid::Uuid,
    (epoch_a, loss): (i64, Loss),
) -> Result<(WorkerProc, i64, oracle::RunState), HarnessError> {
    let got_b = k.lock.acquire(k.key, k.token_b, 30_000).await?;
    ctx.check(Check::expect(LOST_KEY_ADMITS_B, got_b, format!("B's SET NX after the loss ({loss:?}): {got_b}")));
    let mut b = ctx.spawn_worker("b", vec![]).await?;
    let acq_b = b
        .request(json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 120_000, "heartbeat_ms": 60_000, "renew_timeout_ms": 2000}), STEP)
        .await?;
    require_ok(&acq_b, "B takeover")?;
    ctx.check(Check::equal(TAKEOVER_IS_NEXT_EPOCH, acq_b["epoch"].as_i64(), Some(epoch_a + 1)));
    require_ok(&b.request(json!({"cmd": "save", "checkpoint": {"step": 2, "by": "b"}}), STEP).await?, "B save")?;
    let takeover = ctx.oracle_mark().await?;
    let before = oracle::run_state(&ctx.pool, run_id).await?;
    Ok((b, takeover, before))
}

/// The resumed A's compare-token renew and release are refused by Redis: A does not get the key back.
async fn judge_compare_token(ctx: &mut Ctx, k: &Keyed<'_>) -> Result<(), HarnessError> {
    let renewed = k.lock.renew(k.key, k.token_a, k.ttl_ms).await?;
    let released = k.lock.release(k.key, k.token_a).await?;
    let holder = k.lock.holder(k.key).await?;
    // B's key may have lapsed by now on a slow machine (its TTL is short): nobody holding it is
    // no fault of A's; A holding it again, or a renew or release of A's that succeeded, is.
    let now = match holder.as_deref() {
        Some(t) if t == k.token_b => "B",
        Some(t) if t == k.token_a => "A",
        Some(_) => "someone else",
        None => "nobody (B's key lapsed)",
    };
    ctx.check(Check::expect(
        COMPARE_TOKEN_REFUSES_A,
        !renewed && !released && holder.as_deref() != Some(k.token_a),
        format!("renew {renewed}, release {released}, key now held by {now}"),
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use fenceproof_harness::check::rule::matches;

    use super::*;
    use crate::tags;

    #[test]
    fn the_fencing_checks_carry_the_prefilter_tag() {
        for name in [NOTHING_OF_A_COMMITS, ROWS_UNCHANGED_BY_RESUMED] {
            assert!(matches(tags::ANY_PREFILTER_NOT_A_BOUNDARY, name), "{name}");
        }
    }
}
