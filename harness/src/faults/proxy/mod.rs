//! A fault proxy for the PostgreSQL wire protocol, one per worker: the worker is handed the
//! proxy's address instead of the server's (it needs no change), and the harness injects network
//! faults between them that a process pause cannot show:
//!
//! - a **lost acknowledgement** ([`Proxy::lose_ack`]): the next transaction that runs a statement
//!   matching a pattern commits on the server, and its reply is dropped and the connection closed;
//! - a **lost request** ([`Proxy::lose_request`]): that transaction's COMMIT (or the autocommit
//!   statement itself) never reaches the server, and the connection is closed;
//! - a **cut inside a transaction** ([`Proxy::cut_in_transaction`]);
//! - **latency** on every reply ([`Proxy::latency`]), with jitter;
//! - a **partition** ([`Proxy::partition`]): every connection of the worker stalls in both
//!   directions and new ones are not answered, while the process keeps running;
//! - a **crash after a commit** ([`Proxy::crash_after_commit`]): the worker is SIGKILLed the
//!   moment the acknowledgement of its Nth durable commit has passed to it;
//! - a **statement barrier** ([`Proxy::hold`], [`Proxy::hold_n`]): statements matching a pattern
//!   are held before they reach the server until the harness releases them, so a barrier needs no
//!   cooperation from the worker.
//!
//! Each method answers a fault of the common shape ([`crate::faults::Fault`]), injected with
//! [`crate::faults::inject`], which records its injection and heal. Every fault is bounded (an
//! armed fault has a deadline, a partition and a hold a maximum length); the proxy itself records
//! what happens on the wire (a statement held, an armed fault firing); each fault is healed when
//! its guard or the proxy is dropped. The proxy lives inside the harness process: when the harness
//! dies its connections die with it and nothing is left behind.
//!
//! Patterns are regular expressions matched against the statement's SQL reduced by
//! [`frame::normalize`] (lower case, no quotes, single spaces); [`patterns`] holds the ones the
//! experiments use.

mod conn;
mod crash;
mod faults;
pub mod frame;
pub mod patterns;

pub use crash::{CommitCrash, CrashFired};
pub use faults::{Armed, Hold, Latency, Partition};

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use regex::Regex;
use serde::Serialize;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::error::{HarnessError, Result};
use crate::record::timeline::Timeline;

/// What an armed fault does to the transaction it picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArmKind {
    LoseAck,
    LoseRequest,
    CutInTransaction,
}

impl ArmKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ArmKind::LoseAck => "lost acknowledgement",
            ArmKind::LoseRequest => "lost request",
            ArmKind::CutInTransaction => "cut inside a transaction",
        }
    }
}

struct Arm {
    id: u64,
    kind: ArmKind,
    pattern: Regex,
    until: Instant,
}

/// An armed fault that fired.
#[derive(Debug, Clone, Serialize)]
pub struct Fired {
    pub kind: ArmKind,
    /// The connection (numbered by the proxy) it fired on.
    pub connection: u64,
    /// The statement that matched the pattern.
    pub sql: String,
    pub what: String,
    /// Milliseconds since the experiment's timeline started.
    pub at_ms: f64,
}

struct HoldArm {
    id: u64,
    pattern: Regex,
    until: Instant,
    /// How many statements it holds at most.
    limit: usize,
    held: Vec<HeldStatement>,
    released: bool,
}

/// A statement a barrier holds.
#[derive(Debug, Clone, Serialize)]
pub struct HeldStatement {
    pub connection: u64,
    pub sql: String,
    /// It came inside an open transaction (the connection's last ReadyForQuery said so); false
    /// for an autocommit statement, whose whole transaction is the statement.
    pub in_transaction: bool,
}

/// A statement the proxy passed to the server, in the order it passed them (on any connection).
#[derive(Debug, Clone, Serialize)]
pub struct WireStatement {
    /// Its place in the proxy's order (from 1).
    pub n: usize,
    pub connection: u64,
    pub sql: String,
    /// It came inside an open transaction.
    pub in_transaction: bool,
    /// How many statements the proxy had passed when the server's answer to this one (the
    /// ReadyForQuery that ended its round) was written to the client: statements numbered above
    /// it were sent when the worker could know the answer. `None` while (or if ever) unanswered.
    pub answered_at: Option<usize>,
}

/// At most this many statements are kept (a row sends far fewer; a runaway worker is cut off).
const LOG_MAX: usize = 100_000;

#[derive(Default)]
struct State {
    /// Every statement passed to the server, in order.
    log: Vec<WireStatement>,
    /// Per connection, the indexes in `log` of its statements not answered yet.
    unanswered: std::collections::HashMap<u64, Vec<usize>>,
    arm: Option<Arm>,
    /// An arm taken by a connection that has not fired yet (it may come back: a rollback).
    pending: Option<Arm>,
    fired: Vec<(u64, Fired)>,
    partition_until: Option<Instant>,
    delay: Option<(Duration, Duration)>,
    hold: Option<HoldArm>,
    /// A crash after the Nth durable commit, armed.
    crash: Option<crash::CrashArm>,
    crashes: Vec<(u64, CrashFired)>,
    next_id: u64,
    jitter_seed: u64,
}

pub(crate) struct Shared {
    name: String,
    upstream: SocketAddr,
    timeline: Timeline,
    state: Mutex<State>,
    changed: watch::Sender<u64>,
}

impl Shared {
    fn st(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bump(&self) {
        self.changed.send_modify(|v| *v += 1);
    }

    fn record(&self, action: &str, detail: serde_json::Value) {
        self.timeline.record(&format!("proxy:{}", self.name), action, &self.name, detail);
    }

    /// Wait while a partition lasts (never past its end).
    async fn gate(&self) {
        loop {
            let mut rx = self.changed.subscribe();
            let until = match self.st().partition_until {
                Some(u) if Instant::now() < u => u,
                _ => return,
            };
            let _ = tokio::time::timeout_at(until.into(), rx.changed()).await;
        }
    }

    /// Take the armed fault when `sql` matches it (and it has not expired).
    fn take_arm(&self, sql: &str) -> Option<(u64, ArmKind)> {
        let n = frame::normalize(sql);
        let mut st = self.st();
        let a = st.arm.as_ref()?;
        if Instant::now() > a.until || !a.pattern.is_match(&n) {
            return None;
        }
        let a = st.arm.take()?;
        let r = (a.id, a.kind);
        st.pending = Some(a);
        Some(r)
    }

    /// A picked transaction ended without the fault firing (it failed or rolled back): arm again.
    fn rearm(&self, id: u64) {
        let mut st = self.st();
        if st.pending.as_ref().is_some_and(|a| a.id == id) && st.arm.is_none() {
            st.arm = st.pending.take();
        }
    }

    fn fire(&self, id: u64, kind: ArmKind, connection: u64, sql: &str, what: &str) {
        let f = Fired { kind, connection, sql: clip(sql), what: what.to_string(), at_ms: self.timeline_ms() };
        {
            let mut st = self.st();
            if st.pending.as_ref().is_some_and(|a| a.id == id) {
                st.pending = None;
            }
            st.fired.push((id, f.clone()));
        }
        self.record(kind.as_str(), json!({"connection": connection, "statement": f.sql, "what": what}));
        self.bump();
    }

    fn timeline_ms(&self) -> f64 {
        self.timeline.elapsed_ms()
    }

    fn reply_delay(&self) -> Option<Duration> {
        let mut st = self.st();
        let (base, jitter) = st.delay?;
        if jitter.is_zero() {
            return Some(base);
        }
        // splitmix64: no need for cryptographic randomness, only for spread.
        st.jitter_seed = st.jitter_seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = st.jitter_seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let extra = jitter.as_micros() as u64;
        Some(base + Duration::from_micros(if extra == 0 { 0 } else { z % extra }))
    }

    /// Note a statement on its way to the server.
    fn log_statement(&self, connection: u64, sql: &str, in_transaction: bool) {
        let mut st = self.st();
        if st.log.len() < LOG_MAX {
            let n = st.log.len() + 1;
            st.log.push(WireStatement { n, connection, sql: clip(sql), in_transaction, answered_at: None });
            st.unanswered.entry(connection).or_default().push(n - 1);
        }
    }

    /// Note that a ReadyForQuery reached the client on `connection`: every statement of it still
    /// unanswered has its answer now.
    pub(super) fn note_answer(&self, connection: u64) {
        let mut st = self.st();
        let seen = st.log.len();
        let pending = st.unanswered.remove(&connection).unwrap_or_default();
        for i in pending {
            st.log[i].answered_at = Some(seen);
        }
    }

    /// Hold the statement when the barrier's pattern matches, until released or its end.
    async fn hold_if_matched(&self, connection: u64, sql: &str, in_transaction: bool) {
        let n = frame::normalize(sql);
        let (id, until) = {
            let mut st = self.st();
            let Some(h) = st.hold.as_mut() else { return };
            if h.held.len() >= h.limit || h.released || Instant::now() > h.until || !h.pattern.is_match(&n) {
                return;
            }
            h.held.push(HeldStatement { connection, sql: clip(sql), in_transaction });
            (h.id, h.until)
        };
        self.record("statement held", json!({"connection": connection, "statement": clip(sql)}));
        self.bump();
        loop {
            let mut rx = self.changed.subscribe();
            let done = self.st().hold.as_ref().is_none_or(|h| h.id != id || h.released);
            if done || Instant::now() >= until {
                return;
            }
            let _ = tokio::time::timeout_at(until.into(), rx.changed()).await;
        }
    }
}

fn clip(sql: &str) -> String {
    let n = frame::normalize(sql);
    if n.len() > 300 {
        let mut end = 300;
        while !n.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &n[..end])
    } else {
        n
    }
}

fn pattern(p: &str) -> Result<Regex> {
    Regex::new(p).map_err(|e| HarnessError::Other(format!("bad proxy pattern {p:?}: {e}")))
}

/// A worker's own proxy in front of the server.
pub struct Proxy {
    shared: Arc<Shared>,
    url: String,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listen on a fresh loopback port in front of the server `server_url` names; the worker is
    /// handed [`Proxy::url`] (the same URL with the proxy's host and port).
    pub async fn start(name: &str, server_url: &str, timeline: Timeline) -> Result<Proxy> {
        let mut url = url::Url::parse(server_url)
            .map_err(|e| HarnessError::Other(format!("the proxy needs a postgres:// URL with a host: {e}")))?;
        let host = url.host_str().unwrap_or("localhost").to_string();
        let port = url.port().unwrap_or(5432);
        let upstream = tokio::net::lookup_host((host.as_str(), port))
            .await?
            .next()
            .ok_or_else(|| HarnessError::Other(format!("the proxy cannot resolve {host}:{port}")))?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        url.set_host(Some("127.0.0.1")).map_err(|e| HarnessError::Other(e.to_string()))?;
        url.set_port(Some(addr.port())).map_err(|_| HarnessError::Other("cannot set the proxy's port".into()))?;
        let (changed, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            name: name.to_string(),
            upstream,
            timeline,
            state: Mutex::new(State { jitter_seed: u64::from(addr.port()), ..State::default() }),
            changed,
        });
        let s = shared.clone();
        let accept = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            let mut next = 0u64;
            loop {
                tokio::select! {
                    a = listener.accept() => {
                        let Ok((sock, _)) = a else { continue };
                        let _ = sock.set_nodelay(true);
                        next += 1;
                        let (s, id) = (s.clone(), next);
                        conns.spawn(async move {
                            if let Err(e) = conn::serve(sock, s.clone(), id).await {
                                tracing::debug!(proxy = %s.name, connection = id, "proxied connection ended: {e}");
                            }
                        });
                    }
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
            // Dropping the JoinSet (when this task is aborted) aborts every connection.
        });
        shared.record("proxy started", json!({"listen": addr.to_string(), "server": upstream.to_string()}));
        Ok(Proxy { shared, url: url.to_string(), accept })
    }

    /// The URL the worker connects to.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn arm(&self, kind: ArmKind, p: &str, within: Duration) -> Result<Armed> {
        Ok(Armed {
            id: self.next_id(),
            kind,
            pattern: pattern(p)?,
            source: p.to_string(),
            within,
            shared: self.shared.clone(),
        })
    }

    fn next_id(&self) -> u64 {
        let mut st = self.shared.st();
        st.next_id += 1;
        st.next_id
    }

    /// The next transaction (within `within`) that runs a statement matching `p` commits on the
    /// server, and its acknowledgement is lost: the reply is dropped and the connection closed.
    pub fn lose_ack(&self, p: &str, within: Duration) -> Result<Armed> {
        self.arm(ArmKind::LoseAck, p, within)
    }

    /// The next transaction that runs a statement matching `p` never commits: its COMMIT (or the
    /// autocommit statement itself) is dropped before the server sees it and the connection closed.
    pub fn lose_request(&self, p: &str, within: Duration) -> Result<Armed> {
        self.arm(ArmKind::LoseRequest, p, within)
    }

    /// The connection running a statement matching `p` inside a transaction is cut right after the
    /// server answered it, with the transaction open (the server rolls it back).
    pub fn cut_in_transaction(&self, p: &str, within: Duration) -> Result<Armed> {
        self.arm(ArmKind::CutInTransaction, p, within)
    }

    /// `base` plus up to `jitter` added to every reply (at each ReadyForQuery).
    pub fn latency(&self, base: Duration, jitter: Duration) -> Latency {
        Latency { base, jitter, shared: self.shared.clone() }
    }

    /// The worker cut off from the server for at most `max`: every connection stalls in both
    /// directions and new connections are held, while the process runs on. Healed by its heal,
    /// on drop, or when `max` has passed.
    pub fn partition(&self, max: Duration) -> Partition {
        Partition { max, shared: self.shared.clone(), on: false }
    }

    /// Hold the first statement matching `p` before it reaches the server, for at most `max`.
    pub fn hold(&self, p: &str, max: Duration) -> Result<Hold> {
        self.hold_n(p, 1, max)
    }

    /// Hold the first `limit` statements matching `p` (on any of the worker's connections) before
    /// they reach the server, all until one release, for at most `max`.
    pub fn hold_n(&self, p: &str, limit: usize, max: Duration) -> Result<Hold> {
        Ok(Hold {
            id: self.next_id(),
            pattern: pattern(p)?,
            source: p.to_string(),
            limit,
            max,
            shared: self.shared.clone(),
        })
    }

    /// Kill the worker whose process group is `pgid` (a child the harness registered) the moment
    /// the acknowledgement of its `n`th durable commit from now (within `within`) has passed to
    /// it: the commit of a transaction that ran a statement matching `p`, or such a statement run
    /// on its own. The connection is closed with it.
    pub fn crash_after_commit(
        &self,
        p: &str,
        n: usize,
        pgid: nix::unistd::Pid,
        within: Duration,
    ) -> Result<CommitCrash> {
        if n == 0 {
            return Err(HarnessError::Other("a crash after commit counts commits from 1".into()));
        }
        Ok(CommitCrash {
            id: self.next_id(),
            pattern: pattern(p)?,
            source: p.to_string(),
            n,
            pgid,
            within,
            shared: self.shared.clone(),
        })
    }

    /// Every statement passed to the server so far, in order.
    pub fn statements(&self) -> Vec<WireStatement> {
        self.shared.st().log.clone()
    }

    /// Heal every fault: disarm, end the partition, release the barrier, remove the latency.
    pub fn heal_all(&self) {
        let mut st = self.shared.st();
        st.arm = None;
        st.pending = None;
        st.partition_until = None;
        st.delay = None;
        st.crash = None;
        if let Some(h) = st.hold.as_mut() {
            h.released = true;
        }
        drop(st);
        self.shared.bump();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.heal_all();
        self.accept.abort();
        self.shared.record("proxy stopped", json!({}));
    }
}
