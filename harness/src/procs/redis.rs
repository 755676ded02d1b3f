//! A Redis server of the experiment's own (Debian's `redis-server`) on loopback, without
//! persistence, started, killed and restarted by the harness as it does PostgreSQL; and the spec's
//! §03 pre-filter lock spoken over RESP: `SET key token NX PX ttl` to take it, and the
//! compare-token renew and release as Lua scripts, so only the token's holder can extend or free it.
//! The pre-filter is contention control, never a safety boundary: experiment M shows PostgreSQL's
//! fencing holding where it fails.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::Child;

use crate::error::{HarnessError, Result};
use crate::procs::registry::{self, Kind};
use crate::procs::spawn::prepare;
use crate::record::timeline::Timeline;

/// How long one Redis call may take.
const CALL: Duration = Duration::from_secs(2);

/// Renew only when the key still holds the caller's token.
const RENEW: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
/// Release only when the key still holds the caller's token.
const RELEASE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/// B's `SET NX PX` only while A's token holds the key, in one step: A's token and the key's PTTL
/// are read and the SET tried atomically (a script runs alone on the server), so "while A holds
/// it" is observed at the very moment of the attempt, not assumed from a TTL.
const SET_WHILE_HELD: &str = "local h = redis.call('get', KEYS[1]) \
if h ~= ARGV[1] then return {0, redis.call('pttl', KEYS[1]), 0} end \
local t = redis.call('pttl', KEYS[1]) \
if redis.call('set', KEYS[1], ARGV[2], 'NX', 'PX', ARGV[3]) then return {1, t, 1} end \
return {1, t, 0}";

/// Where `redis-server` is: `$REDIS_SERVER`, else the first on PATH or in /usr/bin.
pub fn binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("REDIS_SERVER").map(PathBuf::from).filter(|p| p.is_file()) {
        return Some(p);
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/bin")])
        .map(|d| d.join("redis-server"))
        .find(|p| p.is_file())
}

/// A running redis-server; killed (group) on drop.
pub struct RedisServer {
    pub addr: SocketAddr,
    pub pid: Pid,
    child: Child,
    binary: PathBuf,
    dir: PathBuf,
    timeline: Timeline,
}

impl RedisServer {
    /// Start one on a free loopback port, its log in `dir`.
    pub async fn start(dir: &Path, timeline: &Timeline) -> Result<RedisServer> {
        let binary = binary().ok_or_else(|| {
            HarnessError::Other(
                "redis-server not found (apt-get install redis-server; scripts/setup.sh installs it)".into(),
            )
        })?;
        let port = crate::db::ports::free_port()?;
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("loopback address");
        let (child, pid) = Self::spawn(&binary, dir, addr).await?;
        timeline.record("harness", "spawn", "redis", json!({"pid": pid.as_raw(), "addr": addr.to_string()}));
        Ok(RedisServer { addr, pid, child, binary, dir: dir.to_path_buf(), timeline: timeline.clone() })
    }

    async fn spawn(binary: &Path, dir: &Path, addr: SocketAddr) -> Result<(Child, Pid)> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("redis.log"))?;
        let mut cmd = std::process::Command::new(binary);
        cmd.args(["--bind", "127.0.0.1", "--port", &addr.port().to_string(), "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--protected-mode", "yes", "--dir"])
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        prepare(&mut cmd, Signal::SIGKILL, None);
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.kill_on_drop(true);
        let child = cmd.spawn().map_err(|e| HarnessError::Other(format!("spawning redis-server: {e}")))?;
        let pid = Pid::from_raw(
            child.id().ok_or_else(|| HarnessError::Process("redis-server exited at once".into()))? as i32
        );
        registry::register(pid, Kind::Other);
        let lock = PrefilterLock { addr };
        crate::wait::until("redis-server to answer PING", Duration::from_secs(10), || async {
            Ok(matches!(lock.call(&["PING"]).await, Ok(Reply::Simple(s)) if s == "PONG").then_some(()))
        })
        .await?;
        Ok((child, pid))
    }

    /// A client of this server's pre-filter lock.
    pub fn lock(&self) -> PrefilterLock {
        PrefilterLock { addr: self.addr }
    }

    /// Kill the server (SIGKILL) and start it again on the same port: without persistence it comes
    /// back empty, every lock forgotten.
    pub async fn restart(&mut self) -> Result<()> {
        let _ = killpg(self.pid, Signal::SIGKILL);
        let _ = self.child.wait().await;
        registry::unregister(self.pid);
        self.timeline.record("harness", "sigkill", "redis", json!({"pid": self.pid.as_raw()}));
        let (child, pid) = Self::spawn(&self.binary, &self.dir, self.addr).await?;
        self.timeline.record("harness", "restart", "redis", json!({"pid": pid.as_raw(), "persistence": false}));
        self.child = child;
        self.pid = pid;
        Ok(())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = killpg(self.pid, Signal::SIGKILL);
        }
        registry::unregister(self.pid);
    }
}

/// One RESP reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<String>),
    /// An array of integers (what the harness's own scripts answer).
    Ints(Vec<i64>),
}

/// What [`PrefilterLock::acquire_while_held`] saw and did, at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldProbe {
    /// The key held the holder's token.
    pub held: bool,
    /// The key's PTTL then (-2: no key, -1: no expiry).
    pub pttl_ms: i64,
    /// The caller's SET NX was granted.
    pub granted: bool,
}

/// The §03 pre-filter lock on one Redis server.
#[derive(Debug, Clone)]
pub struct PrefilterLock {
    pub addr: SocketAddr,
}

impl PrefilterLock {
    /// `SET key token NX PX ttl_ms`: true when the caller now holds the key.
    pub async fn acquire(&self, key: &str, token: &str, ttl_ms: u64) -> Result<bool> {
        Ok(self.call(&["SET", key, token, "NX", "PX", &ttl_ms.to_string()]).await? == Reply::Simple("OK".into()))
    }

    /// Extend the key's expiry only while it holds `token`.
    pub async fn renew(&self, key: &str, token: &str, ttl_ms: u64) -> Result<bool> {
        Ok(self.call(&["EVAL", RENEW, "1", key, token, &ttl_ms.to_string()]).await? == Reply::Int(1))
    }

    /// Delete the key only while it holds `token`.
    pub async fn release(&self, key: &str, token: &str) -> Result<bool> {
        Ok(self.call(&["EVAL", RELEASE, "1", key, token]).await? == Reply::Int(1))
    }

    /// `SET key token NX PX ttl_ms`, tried only while the key holds `holder`'s token (see
    /// [`SET_WHILE_HELD`]); when it does not, nothing is tried.
    pub async fn acquire_while_held(&self, key: &str, holder: &str, token: &str, ttl_ms: u64) -> Result<HeldProbe> {
        match self.call(&["EVAL", SET_WHILE_HELD, "1", key, holder, token, &ttl_ms.to_string()]).await? {
            Reply::Ints(v) if v.len() == 3 => Ok(HeldProbe { held: v[0] == 1, pttl_ms: v[1], granted: v[2] == 1 }),
            other => Err(HarnessError::Other(format!("redis EVAL (set while held) answered {other:?}"))),
        }
    }

    /// The token the key holds now, if any.
    pub async fn holder(&self, key: &str) -> Result<Option<String>> {
        match self.call(&["GET", key]).await? {
            Reply::Bulk(v) => Ok(v),
            other => Err(HarnessError::Other(format!("redis GET answered {other:?}"))),
        }
    }

    /// One command on a fresh connection, bounded by [`CALL`].
    pub async fn call(&self, args: &[&str]) -> Result<Reply> {
        let what = format!("redis {}", args.first().copied().unwrap_or(""));
        let io = async {
            let mut s = TcpStream::connect(self.addr).await?;
            let mut req = format!("*{}\r\n", args.len());
            for a in args {
                req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
            }
            s.write_all(req.as_bytes()).await?;
            let mut r = BufReader::new(s);
            let mut line = String::new();
            r.read_line(&mut line).await?;
            let line = line.trim_end_matches("\r\n");
            let (kind, rest) = line.split_at(line.len().min(1));
            let bad = |l: &str| std::io::Error::other(format!("unexpected redis reply {l:?}"));
            Ok::<Reply, std::io::Error>(match kind {
                "+" => Reply::Simple(rest.to_string()),
                "-" => Reply::Error(rest.to_string()),
                ":" => Reply::Int(rest.parse().map_err(|_| bad(line))?),
                "$" => {
                    let n: i64 = rest.parse().map_err(|_| bad(line))?;
                    if n < 0 {
                        Reply::Bulk(None)
                    } else {
                        let mut buf = vec![0u8; n as usize + 2];
                        r.read_exact(&mut buf).await?;
                        buf.truncate(n as usize);
                        Reply::Bulk(Some(String::from_utf8_lossy(&buf).into_owned()))
                    }
                }
                "*" => {
                    let n: usize = rest.parse().map_err(|_| bad(line))?;
                    let mut v = Vec::with_capacity(n);
                    for _ in 0..n {
                        let mut item = String::new();
                        r.read_line(&mut item).await?;
                        let item = item.trim_end_matches("\r\n");
                        v.push(item.strip_prefix(':').and_then(|i| i.parse().ok()).ok_or_else(|| bad(item))?);
                    }
                    Reply::Ints(v)
                }
                _ => return Err(bad(line)),
            })
        };
        match tokio::time::timeout(CALL, io).await {
            Ok(Ok(Reply::Error(e))) => Err(HarnessError::Other(format!("{what}: {e}"))),
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(HarnessError::Other(format!("{what}: {e}"))),
            Err(_) => Err(HarnessError::Timeout { what, after_ms: CALL.as_millis() }),
        }
    }
}
