//! The Rust libraries' adapters are built when the audit runs one of them, never by the main
//! build: `cargo build` (debug profile: it compiles in about half the time of `--release` on the
//! shared machines, and the audit measures behaviour under faults, not speed) in the workspace of
//! their own, `audit/adapters/rust/`, with its own lockfile and target folder. The first build
//! compiles the libraries' dependency trees (minutes); later ones find them built. A build that
//! fails or outlasts its bound makes every cell of those libraries an ERROR naming its last lines.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fenceproof_harness::procs::spawn::{prepare, run_bounded};
use nix::sys::signal::Signal;

use super::libraries::{Library, Runtime};

/// How long the build may take (a cold build of all four trees on two loaded cores).
pub const BUILD_BOUND: Duration = Duration::from_secs(1500);

/// The workspace's folder inside the adapters folder.
pub const WORKSPACE: &str = "rust";

/// Build the binaries of the Rust libraries among `libs`; the folder holding them, or why not.
pub async fn build(adapters: &Path, libs: &[Library], bound: Duration) -> Result<PathBuf, String> {
    let ws = adapters.join(WORKSPACE);
    let bins: Vec<&str> = libs.iter().filter(|l| l.runtime == Runtime::Rust).map(|l| l.adapter).collect();
    let out_dir = ws.join("target").join("debug");
    if bins.is_empty() {
        return Ok(out_dir);
    }
    // One cargo invocation per package: building several together would unify their dependencies'
    // features into a third build of the shared trees (minutes); one by one, each package reuses the
    // artifacts its own build (or a `--library` run of it) left.
    for b in &bins {
        let mut c = std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        c.arg("build").arg("--quiet").arg("--locked").arg("--manifest-path").arg(manifest(&ws, b));
        // Every package's binary goes to the one target folder, its own workspace's or not.
        c.arg("--target-dir").arg(ws.join("target")).arg("-p").arg(b);
        // CI compiles fenceproof's own crates through clippy (scripts/lint-in-build.sh); the
        // adapters are a workspace of their own, not linted by `just lint` either.
        c.env_remove("CARGO_TARGET_DIR").env_remove("RUSTC_WORKSPACE_WRAPPER").env_remove("CLIPPY_ARGS");
        c.stdin(Stdio::null());
        prepare(&mut c, Signal::SIGKILL, None);
        let out = run_bounded(c, "cargo build of a Rust audit adapter", bound).await.map_err(|e| e.to_string())?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
            let tail = tail[tail.len().saturating_sub(6)..].join(" | ");
            return Err(format!("cargo build -p {b} exited with {}: {tail}", out.status));
        }
    }
    Ok(out_dir)
}

/// The manifest that builds binary `bin`: its package's own when the package is a workspace of its
/// own (a library whose dependencies cannot share the common lockfile: backie's diesel 2.1 beside
/// background-jobs' 2.3), else the common workspace's.
fn manifest(ws: &Path, bin: &str) -> PathBuf {
    let own = ws.join(bin.trim_start_matches("audit-")).join("Cargo.toml");
    let standalone =
        std::fs::read_to_string(&own).map(|t| t.lines().any(|l| l.trim() == "[workspace]")).unwrap_or(false);
    if standalone {
        own
    } else {
        ws.join("Cargo.toml")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_package_that_is_its_own_workspace_builds_from_its_own_manifest() {
        let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("adapters").join(WORKSPACE);
        assert_eq!(manifest(&ws, "audit-backie"), ws.join("backie").join("Cargo.toml"));
        assert_eq!(manifest(&ws, "audit-fang"), ws.join("Cargo.toml"));
    }
}
