//! The process-wide list of live children and temp folders, for last-resort cleanup.
//!
//! Normal teardown happens in `Drop` of the owning handles. This registry is what a panic hook or a
//! signal handler calls when unwinding may not reach those handles.

use std::path::PathBuf;
use std::sync::Mutex;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A PostgreSQL postmaster: asked to shut down immediately (SIGQUIT) before the group is killed.
    Postgres,
    /// Anything else (workers, tools): SIGKILL to the group.
    Other,
}

static LIVE: Mutex<Vec<(Pid, Kind)>> = Mutex::new(Vec::new());
static DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static FROZEN: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static CONTAINERS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Set once this process has asked Docker for a container (then [`kill_all`] also sweeps by label).
pub static STARTED_CONTAINERS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A container the harness started: removed with `docker rm -f` by [`kill_all`].
pub fn register_container(id: String) {
    CONTAINERS.lock().unwrap_or_else(|p| p.into_inner()).push(id);
}

pub fn unregister_container(id: &str) {
    CONTAINERS.lock().unwrap_or_else(|p| p.into_inner()).retain(|c| c != id);
}

/// A freezer cgroup holding a frozen child: thawed before anything is killed (a frozen process
/// cannot die until it is thawed).
pub fn register_frozen(dir: PathBuf) {
    FROZEN.lock().unwrap_or_else(|p| p.into_inner()).push(dir);
}

pub fn unregister_frozen(dir: &std::path::Path) {
    FROZEN.lock().unwrap_or_else(|p| p.into_inner()).retain(|d| d != dir);
}

pub fn register(pgid: Pid, kind: Kind) {
    LIVE.lock().unwrap_or_else(|p| p.into_inner()).push((pgid, kind));
}

pub fn unregister(pgid: Pid) {
    LIVE.lock().unwrap_or_else(|p| p.into_inner()).retain(|(p, _)| *p != pgid);
}

pub fn register_dir(dir: PathBuf) {
    DIRS.lock().unwrap_or_else(|p| p.into_inner()).push(dir);
}

pub fn unregister_dir(dir: &std::path::Path) {
    DIRS.lock().unwrap_or_else(|p| p.into_inner()).retain(|d| d != dir);
}

/// SIGKILL the group of a registered child (not a postgres), answering whether it was registered:
/// a fault that kills a worker at a moment it sees (the proxy's crash after a commit) goes through
/// here, so it can only hit a process the harness started and still tracks. The owning handle
/// reaps it and unregisters it.
pub fn kill_group(pgid: Pid) -> bool {
    let known = LIVE.lock().unwrap_or_else(|p| p.into_inner()).iter().any(|(p, k)| *p == pgid && *k == Kind::Other);
    if known {
        let _ = killpg(pgid, Signal::SIGKILL);
    }
    known
}

/// How many children are registered right now.
pub fn live_count() -> usize {
    LIVE.lock().unwrap_or_else(|p| p.into_inner()).len()
}

/// Kill every registered child group and remove every registered folder. Safe to call twice.
pub fn kill_all() {
    let frozen: Vec<PathBuf> = std::mem::take(&mut *FROZEN.lock().unwrap_or_else(|p| p.into_inner()));
    for d in frozen {
        crate::procs::cgroup::release_dir(&d);
    }
    let live: Vec<(Pid, Kind)> = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|p| p.into_inner()));
    for (pgid, kind) in &live {
        if *kind == Kind::Postgres {
            // Backends run in sessions of their own; a stopped one would never notice the
            // postmaster's death, so they are killed directly.
            for b in crate::procs::signals::children(*pgid) {
                let _ = nix::sys::signal::kill(b, Signal::SIGKILL);
            }
            let _ = nix::sys::signal::kill(*pgid, Signal::SIGQUIT);
        }
    }
    for (pgid, _) in &live {
        let _ = killpg(*pgid, Signal::SIGCONT);
        let _ = killpg(*pgid, Signal::SIGKILL);
    }
    let containers: Vec<String> = std::mem::take(&mut *CONTAINERS.lock().unwrap_or_else(|p| p.into_inner()));
    for id in &containers {
        crate::db::docker_sweep::remove_now(id);
    }
    if STARTED_CONTAINERS.load(std::sync::atomic::Ordering::SeqCst) {
        crate::db::docker_sweep::remove_all_of_this_process();
    }
    let dirs: Vec<PathBuf> = std::mem::take(&mut *DIRS.lock().unwrap_or_else(|p| p.into_inner()));
    for d in dirs {
        // What still works in a folder was started by a child and detached itself (Patroni's
        // postmasters leave its session, and may not be registered yet).
        for p in crate::procs::signals::working_in(&d) {
            let _ = nix::sys::signal::kill(p, Signal::SIGKILL);
        }
        let _ = std::fs::remove_dir_all(d);
    }
}

/// Install a panic hook that cleans up before the default hook prints. For binaries only: in a
/// test process it would kill the children of tests running in parallel.
pub fn install_panic_cleanup() {
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        kill_all();
        prev(info);
    }));
}
