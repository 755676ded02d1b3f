//! The kernel's cgroup freezer, as files: which flavor this machine has (v1 `freezer` hierarchy or
//! v2 `cgroup.freeze`), freezing and thawing one cgroup, and releasing it (thaw, move its processes
//! back to the root, remove it). [`crate::procs::freezer`] builds the freeze fault on these; the
//! [`crate::procs::registry`] releases what is left with them in its last-resort cleanup.

use std::path::Path;
use std::time::Duration;

use crate::error::{HarnessError, Result};

const V1_ROOT: &str = "/sys/fs/cgroup/freezer";
const V2_ROOT: &str = "/sys/fs/cgroup";

/// Which freezer this machine has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    V1,
    V2,
}

/// The freezer this machine offers, or why there is none.
pub fn flavor() -> Result<Flavor> {
    if Path::new(V1_ROOT).join("freezer.state").exists() || Path::new(V1_ROOT).join("cgroup.procs").exists() {
        Ok(Flavor::V1)
    } else if Path::new(V2_ROOT).join("cgroup.controllers").exists() {
        Ok(Flavor::V2)
    } else {
        Err(HarnessError::Process("no cgroup freezer here (neither /sys/fs/cgroup/freezer nor cgroup v2)".into()))
    }
}

/// The folder this flavor's cgroups live in.
pub fn root(f: Flavor) -> &'static Path {
    Path::new(match f {
        Flavor::V1 => V1_ROOT,
        Flavor::V2 => V2_ROOT,
    })
}

pub(crate) fn write(path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value)
        .map_err(|e| HarnessError::Process(format!("write {value:?} to {}: {e}", path.display())))
}

/// Whether the cgroup at `dir` is frozen right now, as the kernel reports it.
pub fn is_frozen(f: Flavor, dir: &Path) -> bool {
    match f {
        Flavor::V1 => std::fs::read_to_string(dir.join("freezer.state")).is_ok_and(|s| s.trim() == "FROZEN"),
        Flavor::V2 => {
            std::fs::read_to_string(dir.join("cgroup.events")).is_ok_and(|s| s.lines().any(|l| l == "frozen 1"))
        }
    }
}

/// Freeze or thaw the cgroup at `dir`.
pub fn set_frozen(f: Flavor, dir: &Path, frozen: bool) -> Result<()> {
    match f {
        Flavor::V1 => write(&dir.join("freezer.state"), if frozen { "FROZEN" } else { "THAWED" }),
        Flavor::V2 => write(&dir.join("cgroup.freeze"), if frozen { "1" } else { "0" }),
    }
}

/// Thaw a cgroup, move whatever it holds back to the root, and remove it (best effort).
pub(crate) fn release(f: Flavor, dir: &Path) {
    let _ = set_frozen(f, dir, false);
    if let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        for p in procs.split_whitespace() {
            let _ = std::fs::write(root(f).join("cgroup.procs"), p);
        }
    }
    // A process killed while frozen leaves the cgroup only once it has really exited, just after
    // the thaw: the removal fails with EBUSY until then. Retry briefly (bounded), observing the
    // cgroup, rather than leave an empty cgroup behind.
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while std::fs::remove_dir(dir).is_err() && dir.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Thaw and remove one cgroup (the registry's last-resort cleanup).
pub fn release_dir(dir: &Path) {
    if let Ok(f) = flavor() {
        release(f, dir);
    }
}
