//! Synchronous, best-effort removal of what this harness made in Docker: the paths where no async
//! runtime can be trusted (the panic hook, the signal handler, `Drop`) and the sweep of what a
//! harness killed with SIGKILL left behind. Everything is found by the label [`PID_LABEL`].
//! [`crate::db::docker`] runs the rest of the command line; the [`crate::procs::registry`] calls
//! these in its last-resort cleanup.

use std::path::Path;
use std::process::{Command, Stdio};

/// The label that ties a container or network to the harness process that created it.
pub const PID_LABEL: &str = "fenceproof.harness-pid";

/// Run `docker ARGS` synchronously, quietly, best effort (cleanup paths).
pub(crate) fn run_now(args: &[&str]) -> Option<String> {
    let out = Command::new("docker").args(args).stdin(Stdio::null()).stderr(Stdio::null()).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).to_string())
}

/// `docker rm -f -v` (best effort; used on the paths where no async runtime can be trusted).
pub fn remove_now(id: &str) {
    let _ = run_now(&["rm", "-f", "-v", id]);
}

/// Remove every container, then every network, this harness process created, registered or not
/// (one may still be starting when a Ctrl-C or a panic arrives).
pub fn remove_all_of_this_process() {
    let filter = format!("label={PID_LABEL}={}", std::process::id());
    if let Some(ids) = run_now(&["ps", "-aq", "--filter", &filter]) {
        for id in ids.lines() {
            remove_now(id.trim());
        }
    }
    if let Some(ids) = run_now(&["network", "ls", "-q", "--filter", &filter]) {
        for id in ids.lines() {
            let _ = run_now(&["network", "rm", id.trim()]);
        }
    }
}

/// Remove containers, then networks, left by harness processes that no longer exist.
pub fn sweep_stale() {
    let label = format!("label={PID_LABEL}");
    let format = format!("{{{{.ID}}}} {{{{.Label \"{PID_LABEL}\"}}}}");
    for kind in [&["ps", "-a"][..], &["network", "ls"][..]] {
        let mut args = kind.to_vec();
        args.extend(["--filter", &label, "--format", &format]);
        let Some(out) = run_now(&args) else { continue };
        for line in out.lines() {
            let mut parts = line.split_whitespace();
            let (Some(id), Some(pid)) = (parts.next(), parts.next()) else { continue };
            let alive = pid.parse::<i32>().is_ok_and(|p| Path::new(&format!("/proc/{p}")).exists());
            if !alive {
                if kind[0] == "ps" {
                    remove_now(id);
                } else {
                    let _ = run_now(&["network", "rm", id]);
                }
            }
        }
    }
}
