//! Spawning children: own process group, parent-death signal, optional switch to an unprivileged
//! user (PostgreSQL refuses to run as root).

use std::os::unix::process::CommandExt;

use nix::sys::signal::Signal;
use nix::unistd::{Gid, Uid};

/// The user a child runs as, when the harness is root.
#[derive(Debug, Clone, Copy)]
pub struct RunAs {
    pub uid: Uid,
    pub gid: Gid,
}

/// Put the child in its own process group, optionally drop to `run_as` (supplementary groups,
/// gid, then uid), and make it receive `death_signal` when the harness thread that spawned it dies.
/// The death signal is set after the uid switch, because changing credentials clears it.
pub fn prepare(cmd: &mut std::process::Command, death_signal: Signal, run_as: Option<RunAs>) {
    cmd.process_group(0);
    let parent = std::process::id() as i32;
    // SAFETY: runs in the child between fork and exec; setgroups/setgid/setuid/prctl/getppid are
    // plain system calls that allocate nothing.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(u) = run_as {
                nix::unistd::setgroups(&[u.gid]).map_err(std::io::Error::from)?;
                nix::unistd::setgid(u.gid).map_err(std::io::Error::from)?;
                nix::unistd::setuid(u.uid).map_err(std::io::Error::from)?;
            }
            nix::sys::prctl::set_pdeathsig(death_signal).map_err(std::io::Error::from)?;
            if nix::unistd::getppid().as_raw() != parent {
                // The harness died between fork and prctl.
                return Err(std::io::Error::other("parent already gone"));
            }
            Ok(())
        });
    }
}

/// How long a one-shot tool of the server (initdb, pg_basebackup) may run: `FENCEPROOF_TOOL_TIMEOUT_S`
/// seconds, default 120. A stalled disk or a broken binary then ends in an error, not a hang.
pub fn tool_timeout() -> std::time::Duration {
    let s = std::env::var("FENCEPROOF_TOOL_TIMEOUT_S").ok().and_then(|v| v.parse().ok()).unwrap_or(120u64);
    std::time::Duration::from_secs(s.max(1))
}

/// Run a one-shot child to its end, bounded by `bound` and interruptible: it is registered for
/// cleanup (Ctrl-C, panic), killed with its process group when the bound passes or when the
/// awaiting future is dropped, and its output is collected without blocking the runtime.
pub async fn run_bounded(
    cmd: std::process::Command,
    what: &str,
    bound: std::time::Duration,
) -> Result<std::process::Output, crate::HarnessError> {
    use crate::procs::registry::{self, Kind};
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let child = cmd.spawn().map_err(|e| crate::HarnessError::Process(format!("cannot run {what}: {e}")))?;
    let pid = child.id().map(|p| nix::unistd::Pid::from_raw(p as i32));
    if let Some(p) = pid {
        registry::register(p, Kind::Other);
    }
    let out = tokio::time::timeout(bound, child.wait_with_output()).await;
    if let Some(p) = pid {
        if out.is_err() {
            // The whole group: initdb's own children (postgres --boot) too.
            let _ = nix::sys::signal::killpg(p, nix::sys::signal::Signal::SIGKILL);
        }
        registry::unregister(p);
    }
    match out {
        Ok(r) => r.map_err(|e| crate::HarnessError::Process(format!("{what}: {e}"))),
        Err(_) => Err(crate::HarnessError::Timeout { what: format!("{what} (killed)"), after_ms: bound.as_millis() }),
    }
}
