//! Short timings sized from the machine as it is at a row's start. A row whose story needs a lease
//! or a pre-filter key to lapse within the row (D, J-partition, M-redis, the B rows whose A is
//! paused, I-renew) measures its worker's
//! request round trip first and sizes those timings from it: never shorter than the row's own
//! values, and at least [`K`] round trips for each request they must cover. The round trip and
//! the timings go into the timeline and the row's note. A loaded machine (rows side by side, two
//! matrices at once) then stretches the row instead of turning it red, and the lapse itself stays
//! an observed fact (the database's clock, Redis's own expiry), never a sleep.

use std::time::{Duration, Instant};

use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::HarnessError;
use serde_json::json;

use crate::ctx::{Ctx, STEP};

/// How many measured round trips a request that must fit inside a timing is given.
pub const K: u32 = 10;

/// At most how many times its own values a row's timings stretch: beyond that a row would outgrow
/// its waits and its 90 s ceiling; a machine that slow is named by the note's round trip.
pub const MAX_STRETCH: u64 = 10;

/// How many `metrics` requests measure the worker (the slowest counts).
const SAMPLES: usize = 3;

/// A worker's request round trip as the harness saw it, and the database's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundTrip {
    /// The slowest of [`SAMPLES`] `metrics` requests (no database work: the two processes' turn-around).
    pub worker: Duration,
    /// One query of the control pool (the server's turn-around).
    pub database: Duration,
}

impl RoundTrip {
    /// What one request that does database work is expected to take.
    pub fn request(&self) -> Duration {
        self.worker + self.database
    }

    /// `worker 12 ms + database 3 ms`, for notes.
    pub fn describe(&self) -> String {
        format!("worker {} ms + database {} ms", self.worker.as_millis(), self.database.as_millis())
    }
}

/// Wait for `w` to say it is ready (a worker that starts slowly is not yet a slow worker), then
/// time [`SAMPLES`] `metrics` requests and one query of the control pool. Recorded in the timeline.
pub async fn round_trip(ctx: &Ctx, w: &mut WorkerProc) -> Result<RoundTrip, HarnessError> {
    w.wait_event("the worker's ready event", STEP, |e| e["event"] == "ready").await?;
    timed(ctx, w).await
}

/// [`round_trip`] of a worker already seen ready.
pub async fn timed(ctx: &Ctx, w: &mut WorkerProc) -> Result<RoundTrip, HarnessError> {
    let mut worker = Duration::ZERO;
    for _ in 0..SAMPLES {
        let t = Instant::now();
        w.request(json!({"cmd": "metrics"}), STEP).await?;
        worker = worker.max(t.elapsed());
    }
    let t = Instant::now();
    sqlx::query("SELECT 1").execute(&ctx.pool).await?;
    let rt = RoundTrip { worker, database: t.elapsed() };
    ctx.timeline.record(
        "harness",
        "measured",
        &w.name,
        json!({"worker_round_trip_ms": rt.worker.as_millis() as u64, "database_round_trip_ms": rt.database.as_millis() as u64}),
    );
    Ok(rt)
}

/// A lease's timings as an acquire asks for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimes {
    pub ttl_ms: i64,
    pub heartbeat_ms: u64,
    pub renew_timeout_ms: u64,
}

impl LeaseTimes {
    /// `base` stretched by the smallest whole factor that gives its renewal timeout at least [`K`]
    /// request round trips (at most [`MAX_STRETCH`]); heartbeat and TTL stretch alike, so their
    /// proportions (heartbeat + timeout well inside the TTL) stay the row's.
    pub fn sized(base: LeaseTimes, rt: &RoundTrip) -> LeaseTimes {
        let need = rt.request().as_millis() as u64 * u64::from(K);
        let factor = need.div_ceil(base.renew_timeout_ms.max(1)).clamp(1, MAX_STRETCH);
        LeaseTimes {
            ttl_ms: base.ttl_ms * factor as i64,
            heartbeat_ms: base.heartbeat_ms * factor,
            renew_timeout_ms: base.renew_timeout_ms * factor,
        }
    }

    /// The acquire command for `run_id` with these timings.
    pub fn acquire(&self, run_id: uuid::Uuid) -> serde_json::Value {
        json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": self.ttl_ms, "heartbeat_ms": self.heartbeat_ms, "renew_timeout_ms": self.renew_timeout_ms})
    }

    /// `TTL 800 ms, heartbeat 100 ms, renewal timeout 300 ms`, for notes.
    pub fn describe(&self) -> String {
        format!(
            "TTL {} ms, heartbeat {} ms, renewal timeout {} ms",
            self.ttl_ms, self.heartbeat_ms, self.renew_timeout_ms
        )
    }
}

/// A span that `requests` requests must fit in: at least `floor_ms`, at least [`K`] round trips
/// for each of them, at most [`MAX_STRETCH`] times `floor_ms`.
pub fn covering(floor_ms: u64, requests: u32, rt: &RoundTrip) -> u64 {
    let need = rt.request().as_millis() as u64 * u64::from(K) * u64::from(requests);
    need.clamp(floor_ms, floor_ms * MAX_STRETCH)
}

/// Whether the lease of `run_id` is still `owner`'s term `epoch`, expired on the database clock,
/// with nobody having taken it over.
pub async fn lapsed_untaken(ctx: &Ctx, run_id: uuid::Uuid, owner: &str, epoch: i64) -> Result<bool, HarnessError> {
    let lapsed: Option<bool> = sqlx::query_scalar(
        "SELECT expires_at <= clock_timestamp() FROM worker_leases WHERE run_id = $1::text::uuid AND owner = $2 AND epoch = $3",
    )
    .bind(run_id.to_string())
    .bind(owner)
    .bind(epoch)
    .fetch_optional(&ctx.pool)
    .await?;
    Ok(lapsed == Some(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt(worker_ms: u64, db_ms: u64) -> RoundTrip {
        RoundTrip { worker: Duration::from_millis(worker_ms), database: Duration::from_millis(db_ms) }
    }

    const J: LeaseTimes = LeaseTimes { ttl_ms: 800, heartbeat_ms: 100, renew_timeout_ms: 300 };

    #[test]
    fn a_fast_machine_keeps_the_rows_own_timings() {
        assert_eq!(LeaseTimes::sized(J, &rt(2, 1)), J);
        assert_eq!(covering(1500, 3, &rt(2, 1)), 1500);
    }

    #[test]
    fn a_slow_round_trip_stretches_every_timing_alike() {
        // 45 ms a request: the timeout must hold 450 ms, so everything doubles.
        let s = LeaseTimes::sized(J, &rt(40, 5));
        assert_eq!(s, LeaseTimes { ttl_ms: 1600, heartbeat_ms: 200, renew_timeout_ms: 600 });
        assert!(s.renew_timeout_ms >= 45 * u64::from(K));
        assert_eq!(covering(1500, 3, &rt(100, 20)), 3600);
    }

    #[test]
    fn a_crawling_machine_stretches_no_further_than_the_cap() {
        let s = LeaseTimes::sized(J, &rt(900, 700));
        assert_eq!(s.ttl_ms, 800 * MAX_STRETCH as i64);
        assert_eq!(covering(1500, 3, &rt(900, 700)), 1500 * MAX_STRETCH);
    }
}
