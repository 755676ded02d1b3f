//! Real signals to real processes: pause (SIGSTOP), resume (SIGCONT), kill (SIGKILL), and a check
//! of the kernel's own view of a process state in /proc, so a pause is confirmed, not assumed.

use std::time::Duration;

pub use nix::sys::signal::Signal;
pub use nix::unistd::Pid;

use nix::sys::signal::kill;

use crate::error::{HarnessError, Result};
use crate::wait;

/// The state letter of `pid` in /proc/<pid>/stat (R, S, D, T, t, Z, ...), or None if it is gone.
pub fn proc_state(pid: Pid) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: the state follows the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.trim_start().chars().next()
}

pub fn send(pid: Pid, sig: Signal) -> Result<()> {
    kill(pid, sig).map_err(|e| HarnessError::Process(format!("{sig} to pid {pid}: {e}")))
}

/// `sig` to the process group `pgid` leads (a worker that forks its own processes).
pub fn send_group(pgid: Pid, sig: Signal) -> Result<()> {
    nix::sys::signal::killpg(pgid, sig).map_err(|e| HarnessError::Process(format!("{sig} to group {pgid}: {e}")))
}

/// SIGSTOP and wait until the kernel reports the process stopped.
pub async fn pause(pid: Pid) -> Result<()> {
    send(pid, Signal::SIGSTOP)?;
    wait::until(&format!("pid {pid} to stop"), Duration::from_secs(5), || async move {
        Ok(match proc_state(pid) {
            Some('T') => Some(()),
            None => return Err(HarnessError::Process(format!("pid {pid} vanished while pausing"))),
            _ => None,
        })
    })
    .await
}

/// SIGCONT and wait until the kernel no longer reports the process stopped.
pub async fn resume(pid: Pid) -> Result<()> {
    send(pid, Signal::SIGCONT)?;
    wait::until(&format!("pid {pid} to resume"), Duration::from_secs(5), || async move {
        Ok(match proc_state(pid) {
            Some('T') => None,
            _ => Some(()),
        })
    })
    .await
}

/// Whether any process of process group `pgid` still exists.
pub fn group_alive(pgid: Pid) -> bool {
    !matches!(nix::sys::signal::killpg(pgid, None), Err(nix::errno::Errno::ESRCH))
}

/// The direct children of `pid`, from /proc (PostgreSQL backends leave the postmaster's process
/// group with setsid(), so a group signal does not reach them).
pub fn children(pid: Pid) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).ok().and_then(|s| {
                s.rfind(')').and_then(|i| s[i + 1..].split_whitespace().nth(1).and_then(|pp| pp.parse::<i32>().ok()))
            }) == Some(pid.as_raw())
        })
        .map(Pid::from_raw)
        .collect()
}

/// SIGKILL `pid` and every direct child it has now (stopped ones included).
pub fn kill_tree(pid: Pid) {
    let kids = children(pid);
    let _ = nix::sys::signal::killpg(pid, Signal::SIGKILL);
    let _ = kill(pid, Signal::SIGKILL);
    for k in kids {
        let _ = kill(k, Signal::SIGKILL);
    }
}

/// The live processes whose working directory is `dir` or inside it, from /proc.
pub fn working_in(dir: &std::path::Path) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(dir)))
        .map(Pid::from_raw)
        .filter(|pid| proc_state(*pid).is_some_and(|s| s != 'Z'))
        .collect()
}
