//! The load driver: closed loops (C clients, each issuing its next operation as soon as the last
//! one answered) and an open loop (workers renewing on a fixed heartbeat), with latencies in HDR
//! histograms. Latencies of the open loop are measured from the scheduled start, so a slow
//! server is not hidden by the driver waiting for it (no coordinated omission).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use sqlx::{Connection, PgConnection, PgPool};

/// Bound on opening one held connection of [`held_threads`] (and, twice over, on a thread's report).
const HELD_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Microsecond histogram from 1 µs to 60 s, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds")
}

/// What one operation did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Done {
    /// Units of work (leases renewed, operations claimed, commits): the throughput counts these.
    pub units: u64,
    /// How long the operation waited for a pooled connection: zero where the call takes its own
    /// connection from the pool (the protocol crate's calls), whose latency includes the wait.
    pub pool_wait: Duration,
    /// The COMMIT round trip, where the operation issues one itself.
    pub commit: Option<Duration>,
}

/// The outcome of one measured phase.
#[derive(Debug, Clone)]
pub struct Sample {
    pub statements: u64,
    pub units: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub elapsed: Duration,
    pub latency_us: Histogram<u64>,
    pub pool_wait_us: Histogram<u64>,
    pub commit_us: Histogram<u64>,
}

impl Sample {
    pub fn empty() -> Sample {
        Sample {
            statements: 0,
            units: 0,
            errors: 0,
            first_error: None,
            elapsed: Duration::ZERO,
            latency_us: histogram(),
            pool_wait_us: histogram(),
            commit_us: histogram(),
        }
    }

    /// Record one answered operation and how long it took.
    fn answered(&mut self, d: &Done, latency: Duration) {
        let _ = self.latency_us.record(latency.as_micros().max(1) as u64);
        let _ = self.pool_wait_us.record(d.pool_wait.as_micros().max(1) as u64);
        if let Some(c) = d.commit {
            let _ = self.commit_us.record(c.as_micros().max(1) as u64);
        }
        self.statements += 1;
        self.units += d.units;
    }

    fn failed(&mut self, e: String) {
        self.errors += 1;
        self.first_error.get_or_insert(e);
    }

    /// Add another client's (or worker's) part of the same phase.
    fn absorb(&mut self, o: Sample) {
        self.statements += o.statements;
        self.units += o.units;
        self.errors += o.errors;
        if self.first_error.is_none() {
            self.first_error = o.first_error;
        }
        let _ = self.latency_us.add(&o.latency_us);
        let _ = self.pool_wait_us.add(&o.pool_wait_us);
        let _ = self.commit_us.add(&o.commit_us);
    }

    pub fn units_per_s(&self) -> f64 {
        self.units as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
    pub fn statements_per_s(&self) -> f64 {
        self.statements as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
    pub fn quantile_ms(h: &Histogram<u64>, q: f64) -> f64 {
        if h.is_empty() {
            0.0
        } else {
            h.value_at_quantile(q) as f64 / 1000.0
        }
    }
}

/// Per-client state of the stop condition.
struct Stop {
    deadline: Instant,
    max_units: Option<u64>,
    units: AtomicU64,
    halted: AtomicBool,
}

impl Stop {
    fn done(&self) -> bool {
        self.halted.load(Ordering::Relaxed)
            || Instant::now() >= self.deadline
            || self.max_units.is_some_and(|m| self.units.load(Ordering::Relaxed) >= m)
    }
}

/// The ceiling on the statements per second a phase offers, over all its clients (0: none): a
/// `bench --database-url` run writes to a shared server and never offers more than this.
static RATE_CEILING: AtomicU64 = AtomicU64::new(0);

/// Set the ceiling on the offered rate of every later phase of this process (`None`: none).
pub fn set_rate_ceiling(statements_per_s: Option<f64>) {
    let r = statements_per_s.map(|r| r.max(1.0).round() as u64).unwrap_or(0);
    RATE_CEILING.store(r, Ordering::Relaxed);
}

/// The ceiling, if any.
pub fn rate_ceiling() -> Option<f64> {
    Some(RATE_CEILING.load(Ordering::Relaxed)).filter(|&r| r > 0).map(|r| r as f64)
}

/// The gap between one client's statements that keeps `clients` clients under the ceiling.
pub fn pace(clients: usize) -> Option<Duration> {
    rate_ceiling().map(|r| Duration::from_secs_f64(clients.max(1) as f64 / r))
}

/// Wait for the `seq`-th slot (from 1) of a client that started at `start` with `gap` between
/// slots; no wait without a ceiling.
async fn wait_slot(start: Instant, seq: u64, gap: Option<Duration>) {
    if let Some(g) = gap {
        tokio::time::sleep_until((start + g.mul_f64(seq.saturating_sub(1) as f64)).into()).await;
    }
}

/// Run `clients` closed loops on `pool` for `duration` (or until `max_units` units are done, or an
/// operation reports zero units when `stop_on_empty`). `op(client, seq, pool)` does one operation.
pub async fn closed_loop<F, Fut>(
    pool: &PgPool,
    clients: usize,
    duration: Duration,
    max_units: Option<u64>,
    stop_on_empty: bool,
    op: F,
) -> Sample
where
    F: Fn(usize, u64, PgPool) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Done, String>> + Send + 'static,
{
    let op = Arc::new(op);
    let t0 = Instant::now();
    let stop =
        Arc::new(Stop { deadline: t0 + duration, max_units, units: AtomicU64::new(0), halted: AtomicBool::new(false) });
    let mut tasks = tokio::task::JoinSet::new();
    let gap = pace(clients);
    for client in 0..clients {
        let (op, stop, pool) = (op.clone(), stop.clone(), pool.clone());
        tasks.spawn(async move {
            let mut part = Sample::empty();
            let mut seq = 0u64;
            while !stop.done() {
                seq += 1;
                wait_slot(t0, seq, gap).await;
                if stop.done() {
                    break;
                }
                let started = Instant::now();
                match op(client, seq, pool.clone()).await {
                    Ok(d) => {
                        part.answered(&d, started.elapsed());
                        stop.units.fetch_add(d.units, Ordering::Relaxed);
                        if d.units == 0 && stop_on_empty {
                            stop.halted.store(true, Ordering::Relaxed);
                        }
                    }
                    Err(e) => {
                        part.failed(e);
                        if part.errors > 1000 {
                            stop.halted.store(true, Ordering::Relaxed);
                        }
                    }
                }
            }
            part
        });
    }
    let mut s = Sample::empty();
    while let Some(r) = tasks.join_next().await {
        if let Ok(part) = r {
            s.absorb(part);
        }
    }
    s.elapsed = t0.elapsed();
    s
}

/// Open loop: `workers` tasks, each running `op(worker, pool)` every `every`, for `duration`.
/// Latency counts from the scheduled start of each beat, so a beat that starts late because the
/// previous one overran is charged for the delay.
pub async fn open_loop<F, Fut>(pool: &PgPool, workers: usize, every: Duration, duration: Duration, op: F) -> Sample
where
    F: Fn(usize, PgPool) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Done, String>> + Send + 'static,
{
    let op = Arc::new(op);
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..workers {
        let (op, pool) = (op.clone(), pool.clone());
        // Spread the workers' beats over one interval, as independent processes would be.
        let offset = every.mul_f64(w as f64 / workers.max(1) as f64);
        tasks.spawn(async move {
            let mut part = Sample::empty();
            let mut scheduled = t0 + offset;
            while scheduled < t0 + duration {
                tokio::time::sleep_until(scheduled.into()).await;
                match op(w, pool.clone()).await {
                    Ok(d) => part.answered(&d, scheduled.elapsed()),
                    Err(e) => part.failed(e),
                }
                scheduled += every;
            }
            part
        });
    }
    let mut s = Sample::empty();
    while let Some(r) = tasks.join_next().await {
        if let Ok(part) = r {
            s.absorb(part);
        }
    }
    s.elapsed = t0.elapsed().max(duration);
    s
}

/// Take a connection from `pool`, timing the wait.
pub async fn acquire(pool: &PgPool) -> Result<(sqlx::pool::PoolConnection<sqlx::Postgres>, Duration), String> {
    let t = Instant::now();
    let c = pool.acquire().await.map_err(|e| e.to_string())?;
    Ok((c, t.elapsed()))
}

/// Closed loops shaped as pgbench runs them with `-j threads`: `threads` OS threads, each with its
/// own single-threaded runtime and the held connections of its share of the `clients` (client k on
/// thread k mod threads), each client issuing `sql` with `$1 = id(client, seq)` as soon as its
/// last statement answered. No task is spawned and no pool is
/// touched per statement, and no work moves between threads. Blocks the calling thread (call it
/// from `spawn_blocking`). Every connection is opened before any client starts (bounded by
/// `CONNECT_TIMEOUT`); a thread that cannot connect fails the phase with its error.
pub fn held_threads(
    connect: &sqlx::postgres::PgConnectOptions,
    clients: usize,
    threads: usize,
    duration: Duration,
    sql: &'static str,
    id: fn(usize, u64) -> i32,
) -> Result<Sample, String> {
    let threads = threads.clamp(1, clients.max(1));
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let mut gos = Vec::new();
    let mut handles = Vec::new();
    for t in 0..threads {
        let (go_tx, go_rx) = mpsc::channel::<Option<Instant>>();
        gos.push(go_tx);
        let (connect, ready) = (connect.clone(), ready_tx.clone());
        let mine: Vec<usize> = (t..clients).step_by(threads).collect();
        let gap = pace(clients);
        handles.push(std::thread::spawn(move || load_thread(&connect, mine, &ready, &go_rx, sql, (id, gap))));
    }
    drop(ready_tx);
    let mut failure = None;
    for _ in 0..threads {
        match ready_rx.recv_timeout(HELD_CONNECT_TIMEOUT * 2) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Err(_) => failure = failure.or(Some("a load thread never reported its connections".to_string())),
        }
    }
    let t0 = Instant::now();
    let start = failure.is_none().then_some(t0 + duration);
    for g in &gos {
        let _ = g.send(start);
    }
    let (mut s, mut end) = (Sample::empty(), t0 + duration);
    for h in handles {
        match h.join() {
            Ok((part, last)) => {
                s.absorb(part);
                end = end.max(last.unwrap_or(end));
            }
            Err(_) => failure = failure.or(Some("a load thread panicked".to_string())),
        }
    }
    s.elapsed = end - t0;
    match failure {
        Some(e) => Err(e),
        None => Ok(s),
    }
}

/// One thread of [`held_threads`]: its own single-threaded runtime, a connection per client in
/// `mine`; it reports on `ready` once connected, waits for the deadline on `go` (`None`: the phase
/// is called off), runs its clients until then, and returns their sample and when its last
/// statement answered.
fn load_thread(
    connect: &sqlx::postgres::PgConnectOptions,
    mine: Vec<usize>,
    ready: &mpsc::Sender<Result<(), String>>,
    go: &mpsc::Receiver<Option<Instant>>,
    sql: &'static str,
    (id, gap): (fn(usize, u64) -> i32, Option<Duration>),
) -> (Sample, Option<Instant>) {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(format!("runtime: {e}")));
            return (Sample::empty(), None);
        }
    };
    rt.block_on(async move {
        let conns = match connect_all(connect, mine.len()).await {
            Ok(conns) => conns,
            Err(e) => {
                let _ = ready.send(Err(e));
                return (Sample::empty(), None);
            }
        };
        let _ = ready.send(Ok(()));
        let Ok(Some(deadline)) = go.recv_timeout(HELD_CONNECT_TIMEOUT * 2) else {
            return (Sample::empty(), None);
        };
        run_held_clients(mine, conns, deadline, sql, (id, gap)).await
    })
}

/// `n` connections, each bounded by [`HELD_CONNECT_TIMEOUT`]; the first failure's error.
async fn connect_all(connect: &sqlx::postgres::PgConnectOptions, n: usize) -> Result<Vec<PgConnection>, String> {
    let mut conns = Vec::new();
    for _ in 0..n {
        match tokio::time::timeout(HELD_CONNECT_TIMEOUT, PgConnection::connect_with(connect)).await {
            Ok(Ok(c)) => conns.push(c),
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err(format!("no connection within {HELD_CONNECT_TIMEOUT:?}")),
        }
    }
    Ok(conns)
}

/// Each client on its held connection until `deadline`; the phase ends when the last client's
/// last statement answered, before the connections are closed.
async fn run_held_clients(
    mine: Vec<usize>,
    conns: Vec<PgConnection>,
    deadline: Instant,
    sql: &'static str,
    (id, gap): (fn(usize, u64) -> i32, Option<Duration>),
) -> (Sample, Option<Instant>) {
    let mut set = tokio::task::JoinSet::new();
    let t0 = Instant::now();
    for (client, mut conn) in mine.into_iter().zip(conns) {
        set.spawn(async move {
            let mut part = Sample::empty();
            let mut seq = 0u64;
            while Instant::now() < deadline {
                seq += 1;
                wait_slot(t0, seq, gap).await;
                if Instant::now() >= deadline {
                    break;
                }
                let started = Instant::now();
                match sqlx::query(sql).bind(id(client, seq)).execute(&mut conn).await {
                    Ok(_) => part.answered(&Done { units: 1, ..Done::default() }, started.elapsed()),
                    Err(e) => {
                        part.failed(e.to_string());
                        if part.errors > 1000 {
                            break;
                        }
                    }
                }
            }
            (part, conn)
        });
    }
    let (mut s, mut done) = (Sample::empty(), Vec::new());
    while let Some(r) = set.join_next().await {
        if let Ok((part, conn)) = r {
            s.absorb(part);
            done.push(conn);
        }
    }
    let end = Instant::now();
    for conn in done {
        let _ = conn.close().await;
    }
    (s, Some(end))
}
