//! Listening ports for the servers the harness starts (PostgreSQL, Patroni's REST API, etcd,
//! Redis), reserved across every fenceproof process of the user on the machine.
//!
//! The kernel names a free port (bind to port 0), but the server that will listen on it binds it
//! later: a Patroni node's PostgreSQL only after its bootstrap, seconds on a loaded machine. In
//! that window another process's server could be given the same port; seen in CI's pool, where a
//! Patroni node's PostgreSQL found its port taken by another test's cluster and Patroni, asking
//! `pg_isready` on that port, took the stranger for its own server. So each port handed out is
//! written down in `<tmp>/fenceproof-ports-<uid>/<port>` (pid and time, under an exclusive lock
//! of that file), and a port reserved there within [`HOLD`] is never handed out again meanwhile,
//! in this process or another. After `HOLD` the server listens, and the kernel no longer names the port.
//!
//! The reservation binds only fenceproof. The kernel hands out ports by itself from its ephemeral
//! range (`ip_local_port_range`): to every bind to port 0 (a fake tool's API, a proxy, a test's own
//! listener) and as the source port of every outgoing connection. Seen in the pool: a Patroni
//! node's REST port, reserved and not yet bound, was taken in that window ("Address already in
//! use") and the node died. So the ports are taken below that range ([`RANGE_FLOOR`] up to it),
//! where nothing is given a port it did not ask for by number; each is handed out only if binding
//! it on 127.0.0.1 succeeds now. A machine whose ephemeral range leaves no room below it gets the
//! kernel's ports, as before.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{HarnessError, Result};

/// How long a handed-out port stays reserved: longer than any server takes to bind its port.
pub const HOLD: Duration = Duration::from_secs(600);

/// How many ports the kernel is asked for before giving up.
const ATTEMPTS: usize = 256;

/// The folder of reservations: one per user, so that a folder another user made never refuses
/// this one (runs of two users do not coordinate; the kernel still names only unbound ports).
pub fn folder() -> PathBuf {
    std::env::temp_dir().join(format!("fenceproof-ports-{}", nix::unistd::geteuid()))
}

/// The lowest port handed out from below the kernel's ephemeral range.
pub const RANGE_FLOOR: u16 = 20_000;

/// A free port on 127.0.0.1 that no fenceproof process has been given within [`HOLD`], from
/// below the kernel's ephemeral range where it has room ([`quiet_range`]). Where the reservations
/// cannot be written (a read-only temporary folder), the kernel's word alone.
pub fn free_port() -> Result<u16> {
    let dir = folder();
    let writable = std::fs::create_dir_all(&dir).is_ok();
    let range = quiet_range(&std::fs::read_to_string(EPHEMERAL).unwrap_or_default());
    let attempts = range.as_ref().map_or(ATTEMPTS, |r| r.len());
    let start = std::process::id() as usize ^ now_secs() as usize;
    for i in 0..attempts {
        let port = match &range {
            Some(r) => r.start + ((start + i) % r.len()) as u16,
            None => std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port(),
        };
        if range.is_some() && std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        match writable.then(|| reserve(&dir, port, now_secs())) {
            Some(Ok(false)) => continue,
            Some(Ok(true)) | Some(Err(_)) | None => return Ok(port),
        }
    }
    Err(HarnessError::Other(format!("no free port: {attempts} ports were bound or reserved in {}", dir.display())))
}

/// Where the kernel's ephemeral range is read.
const EPHEMERAL: &str = "/proc/sys/net/ipv4/ip_local_port_range";

/// The ports from [`RANGE_FLOOR`] up to the kernel's ephemeral range (`text`: that file's
/// "low high"), if at least a thousand; `None` otherwise.
fn quiet_range(text: &str) -> Option<std::ops::Range<u16>> {
    let low: u16 = text.split_whitespace().next()?.parse().ok()?;
    (low >= RANGE_FLOOR.saturating_add(1000)).then_some(RANGE_FLOOR..low)
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Reserve `port` at `now` (seconds since the epoch), unless it is reserved already (or another
/// process is reserving it this instant).
fn reserve(dir: &Path, port: u16, now: u64) -> Result<bool> {
    let mut f: File =
        OpenOptions::new().read(true).write(true).create(true).truncate(false).open(dir.join(port.to_string()))?;
    match f.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return Ok(false),
        Err(TryLockError::Error(e)) => return Err(e.into()),
    }
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    if reserved_at(&text).is_some_and(|at| now < at.saturating_add(HOLD.as_secs())) {
        return Ok(false);
    }
    f.set_len(0)?;
    f.rewind()?;
    write!(f, "{} {now}", std::process::id())?;
    Ok(true)
}

/// When a reservation's text (`pid seconds`) was written.
fn reserved_at(text: &str) -> Option<u64> {
    text.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserved_port_is_not_handed_out_again_until_its_hold_ends() {
        let dir = std::env::temp_dir().join(format!("fenceproof-ports-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let t = 1_000_000;
        assert!(reserve(&dir, 40001, t).unwrap(), "a port nobody reserved");
        assert!(!reserve(&dir, 40001, t + 1).unwrap(), "reserved a second ago");
        assert!(!reserve(&dir, 40001, t + HOLD.as_secs() - 1).unwrap(), "still within its hold");
        assert!(reserve(&dir, 40001, t + HOLD.as_secs()).unwrap(), "its hold is over");
        // A file another process holds locked is someone reserving it now.
        let held = File::open(dir.join("40001")).unwrap();
        held.lock().unwrap();
        assert!(!reserve(&dir, 40001, t + 10 * HOLD.as_secs()).unwrap());
        drop(held);
        assert!(reserve(&dir, 40002, t).unwrap());
        assert_eq!(reserved_at("123 456"), Some(456));
        assert_eq!(reserved_at("garbage"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn ports_come_from_below_the_kernels_ephemeral_range_when_it_leaves_room() {
        assert_eq!(quiet_range("32768\t60999\n"), Some(RANGE_FLOOR..32768));
        assert_eq!(quiet_range("20500 60999"), None, "less than a thousand ports below it");
        assert_eq!(quiet_range("1024 65535"), None);
        assert_eq!(quiet_range(""), None);
        let Some(range) = quiet_range(&std::fs::read_to_string(EPHEMERAL).unwrap_or_default()) else { return };
        for _ in 0..5 {
            let port = free_port().unwrap();
            assert!(range.contains(&port), "{port} outside {range:?}");
            // Handed out only while nothing listens on it.
            std::net::TcpListener::bind(("127.0.0.1", port)).expect("a handed-out port binds");
        }
    }

    #[test]
    fn ports_handed_out_one_after_another_differ() {
        let ports: Vec<u16> = (0..20).map(|_| free_port().unwrap()).collect();
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
    }
}
