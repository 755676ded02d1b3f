//! Which process made a call: the kernel's answer, not the caller's word. The tools run on the
//! caller's machine; the caller's end of the TCP connection is a socket in `/proc/net/tcp{,6}`
//! (its local address is the tools' peer address), owned by the process whose `/proc/<pid>/fd`
//! links to that socket's inode. Its process group (`pgrp` in `/proc/<pid>/stat`) names the
//! worker: the harness starts every worker as the leader of a group of its own. Read while the
//! call's connection is open; a caller that cannot be found is recorded with the reason.

use std::net::SocketAddr;

use serde_json::{json, Value};

/// The caller of a connection whose peer is `peer` and whose local end is `local`:
/// `{"pid", "pgid"}`, or `{"error"}` when the kernel does not say.
pub fn caller(peer: SocketAddr, local: SocketAddr) -> Value {
    match find(peer, local) {
        Ok((pid, pgid)) => json!({"pid": pid, "pgid": pgid}),
        Err(e) => json!({"error": e}),
    }
}

fn find(peer: SocketAddr, local: SocketAddr) -> Result<(i32, i32), String> {
    let inode = socket_inode(peer, local)?;
    let pid = owner_of(inode)?;
    Ok((pid, pgid_of(pid)?))
}

/// The address as `/proc/net/tcp{,6}` prints it (IPv4: one little-endian word; IPv6: four).
fn proc_addr(a: SocketAddr) -> String {
    let ip = match a {
        SocketAddr::V4(v) => format!("{:08X}", u32::from_le_bytes(v.ip().octets())),
        SocketAddr::V6(v) => {
            let o = v.ip().octets();
            o.chunks(4).map(|c| format!("{:08X}", u32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect()
        }
    };
    format!("{ip}:{:04X}", a.port())
}

/// The inode of the caller's socket: local address `peer`, remote address `local`.
fn socket_inode(peer: SocketAddr, local: SocketAddr) -> Result<u64, String> {
    let table = if peer.is_ipv4() { "/proc/net/tcp" } else { "/proc/net/tcp6" };
    let text = std::fs::read_to_string(table).map_err(|e| format!("{table}: {e}"))?;
    inode_in(&text, &proc_addr(peer), &proc_addr(local))
        .ok_or_else(|| format!("no socket {peer} -> {local} in {table}"))
}

/// The inode of the line of a `/proc/net/tcp` table with these local and remote addresses.
fn inode_in(table: &str, local: &str, remote: &str) -> Option<u64> {
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 9 && f[1] == local && f[2] == remote).then(|| f[9].parse().ok()).flatten()
    })
}

/// The processes that made the latest calls, most recent first: the callers are a few worker
/// processes, so their descriptors are read before the walk of every process.
static RECENT: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

/// How many recent callers are tried first.
const RECENT_KEPT: usize = 16;

/// The process with a descriptor on socket `inode`: a recent caller's, else any process's.
fn owner_of(inode: u64) -> Result<i32, String> {
    let target = format!("socket:[{inode}]");
    let recent: Vec<i32> = RECENT.lock().map(|r| r.clone()).unwrap_or_default();
    let found = recent.into_iter().find(|pid| holds(&format!("/proc/{pid}"), &target));
    let found = match found {
        Some(pid) => Some(pid),
        None => {
            let procs = std::fs::read_dir("/proc").map_err(|e| format!("/proc: {e}"))?;
            procs.flatten().find_map(|p| {
                let pid = p.file_name().to_str().and_then(|n| n.parse::<i32>().ok())?;
                holds(&p.path().to_string_lossy(), &target).then_some(pid)
            })
        }
    };
    let pid = found.ok_or_else(|| format!("no process holds {target}"))?;
    if let Ok(mut r) = RECENT.lock() {
        r.retain(|p| *p != pid);
        r.insert(0, pid);
        r.truncate(RECENT_KEPT);
    }
    Ok(pid)
}

/// Whether the process at `proc_dir` has a descriptor linked to `target`.
fn holds(proc_dir: &str, target: &str) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("{proc_dir}/fd")) else { return false };
    fds.flatten().any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == target))
}

/// The process group of `pid` (the field after the state and the parent in `/proc/<pid>/stat`;
/// the command name before them, in parentheses, may hold spaces).
fn pgid_of(pid: i32) -> Result<i32, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| format!("/proc/{pid}/stat: {e}"))?;
    pgid_in(&stat).ok_or_else(|| format!("/proc/{pid}/stat: no process group"))
}

fn pgid_in(stat: &str) -> Option<i32> {
    stat.rsplit_once(')')?.1.split_whitespace().nth(2)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_print_as_the_kernel_does() {
        assert_eq!(proc_addr("127.0.0.1:8080".parse().unwrap()), "0100007F:1F90");
        assert_eq!(proc_addr("[::1]:80".parse().unwrap()), "00000000000000000000000001000000:0050");
    }

    #[test]
    fn the_stat_line_gives_the_group_even_with_spaces_in_the_name() {
        assert_eq!(pgid_in("4711 (python3 worker) S 4700 4705 4700 0 -1"), Some(4705));
    }

    #[test]
    fn a_table_line_gives_its_inode() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
                 0: 0100007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 123456 1";
        assert_eq!(inode_in(t, "0100007F:9C40", "0100007F:1F90"), Some(123456));
        assert_eq!(inode_in(t, "0100007F:1F90", "0100007F:9C40"), None);
    }

    #[tokio::test]
    async fn a_connection_of_this_process_is_this_process() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = tokio::net::TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, peer) = l.accept().await.unwrap();
        let who = caller(peer, s.local_addr().unwrap());
        let me = std::process::id() as i32;
        assert_eq!(who["pid"], me, "{who}");
        assert!(who["pgid"].as_i64().is_some_and(|g| g > 0), "{who}");
        drop(c);
    }
}
