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
