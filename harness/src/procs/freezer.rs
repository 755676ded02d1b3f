//! The freeze fault: a process frozen by the kernel's cgroup freezer, as a container runtime
//! freezes a container (`docker pause` uses the same freezer). Unlike SIGSTOP the process gets no
//! signal and cannot observe or handle anything: its threads simply stop being scheduled.
//!
//! cgroup v1 (a `freezer` hierarchy) and v2 (`cgroup.freeze`) are both supported. Each frozen
//! process gets its own cgroup `fenceproof-<harness pid>-<pid>`; thawing moves it back to the root
//! and removes the cgroup. Cgroups left by a harness that died are thawed and removed by the next
//! freeze (a frozen process cannot even die from SIGKILL until it is thawed).

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::unistd::Pid;

use crate::error::{HarnessError, Result};
pub use crate::procs::cgroup::{flavor, is_frozen, root, set_frozen, Flavor};
use crate::procs::cgroup::{release, write};
use crate::procs::{registry, signals};
use crate::wait;

/// Thaw and remove cgroups of harnesses that are no longer alive; the folders it removed.
fn sweep_stale(f: Flavor) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root(f)) else { return Vec::new() };
    let mut swept = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(owner) = name.strip_prefix("fenceproof-").and_then(|r| r.split('-').next()) else { continue };
        let alive = owner.parse::<i32>().is_ok_and(|p| Path::new(&format!("/proc/{p}")).exists());
        if !alive {
            release(f, &e.path());
            swept.push(e.path());
        }
    }
    swept
}

/// At the start of every run: thaw and remove the freezer cgroups of harnesses that no longer
/// exist (one killed with SIGKILL cannot clean up), so a process frozen by it does not stay frozen
/// with its port bound. Returns what was swept, for the run to say so.
pub fn sweep_leftovers() -> Vec<PathBuf> {
    match flavor() {
        Ok(f) => sweep_stale(f),
        Err(_) => Vec::new(),
    }
}

/// A process frozen in its own cgroup; thawed by [`Frozen::thaw`] or on drop.
pub struct Frozen {
    pub pid: Pid,
    flavor: Flavor,
    dir: PathBuf,
    thawed: bool,
}

/// What a failed cgroup creation says: without the right to make one, what the rows need.
fn mkdir_error(dir: &std::path::Path, e: std::io::Error) -> HarnessError {
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        HarnessError::Process(format!(
            "the freeze rows (B-freeze, B-dbfreeze) need root or a freezer cgroup this user may write: cannot create {} ({e}); run as root, delegate a cgroup to this user, or skip them with --only",
            dir.display()
        ))
    } else {
        HarnessError::Process(format!("mkdir {}: {e}", dir.display()))
    }
}

/// How long the kernel may take to report a cgroup frozen or thawed. A task freezes only once it
/// leaves uninterruptible sleep: a server's backend inside an fsync on a machine whose disk the
/// other lanes keep busy was seen to need more than 10 s, and a bound that short made a loaded
/// machine turn a schedule into an ERROR.
pub const SETTLE_WITHIN: Duration = Duration::from_secs(60);

impl Frozen {
    /// Freeze `pid` and wait (bounded) until the kernel reports the cgroup frozen.
    pub async fn freeze(pid: Pid) -> Result<Frozen> {
        Frozen::freeze_with_children(pid, false).await
    }

    /// Freeze `pid` and its descendants (a PostgreSQL postmaster and its backends: the whole
    /// server; a django-q2 qcluster and the pusher, workers and monitor its Sentinel forked). The
    /// parent moves first, so whatever it forks from then on is born in the frozen cgroup.
    pub async fn freeze_tree(pid: Pid) -> Result<Frozen> {
        Frozen::freeze_with_children(pid, true).await
    }

    async fn freeze_with_children(pid: Pid, children: bool) -> Result<Frozen> {
        let f = flavor()?;
        let _ = sweep_stale(f);
        let dir = root(f).join(format!("fenceproof-{}-{}", std::process::id(), pid.as_raw()));
        std::fs::create_dir_all(&dir).map_err(|e| mkdir_error(&dir, e))?;
        registry::register_frozen(dir.clone());
        let frozen = Frozen { pid, flavor: f, dir: dir.clone(), thawed: false };
        write(&dir.join("cgroup.procs"), &pid.as_raw().to_string())?;
        if children {
            for c in descendants(pid) {
                // A child may exit between the listing and the move; that is not an error.
                let _ = write(&dir.join("cgroup.procs"), &c.as_raw().to_string());
            }
        }
        set_frozen(f, &dir, true)?;
        wait::until(&format!("pid {pid} frozen in {}", dir.display()), SETTLE_WITHIN, || {
            let dir = dir.clone();
            async move { Ok(is_frozen(f, &dir).then_some(())) }
        })
        .await?;
        Ok(frozen)
    }

    /// How many processes the frozen cgroup holds.
    pub fn members(&self) -> usize {
        std::fs::read_to_string(self.dir.join("cgroup.procs")).map(|s| s.split_whitespace().count()).unwrap_or(0)
    }

    /// Thaw the process (it resumes where it was) and remove its cgroup.
    pub async fn thaw(mut self) -> Result<()> {
        self.thawed = true;
        set_frozen(self.flavor, &self.dir, false)?;
        let (f, dir) = (self.flavor, self.dir.clone());
        wait::until(&format!("pid {} thawed", self.pid), SETTLE_WITHIN, || {
            let dir = dir.clone();
            async move { Ok((!is_frozen(f, &dir)).then_some(())) }
        })
        .await?;
        release(self.flavor, &self.dir);
        registry::unregister_frozen(&self.dir);
        Ok(())
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if !self.thawed {
            release(self.flavor, &self.dir);
            registry::unregister_frozen(&self.dir);
        }
    }
}

/// Every descendant of `pid` (children, their children, ...), from /proc.
fn descendants(pid: Pid) -> Vec<Pid> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        for c in signals::children(p) {
            if !out.contains(&c) {
                out.push(c);
                todo.push(c);
            }
        }
    }
    out
}

#[cfg(test)]
mod mkdir_tests {
    #[test]
    fn a_refused_cgroup_says_what_the_freeze_rows_need() {
        let dir = std::path::Path::new("/sys/fs/cgroup/fenceproof-1-2");
        let e = super::mkdir_error(dir, std::io::Error::from(std::io::ErrorKind::PermissionDenied)).to_string();
        assert!(
            e.contains("need root or a freezer cgroup") && e.contains("--only") && e.contains("fenceproof-1-2"),
            "{e}"
        );
        let e = super::mkdir_error(dir, std::io::Error::from(std::io::ErrorKind::NotFound)).to_string();
        assert!(!e.contains("need root"), "{e}");
    }
}
