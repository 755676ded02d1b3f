//! `--backend auto` on machines without PostgreSQL binaries: with Docker it picks the container
//! backend by itself (and the locally built image when the official one is absent); with neither
//! it exits with one line saying how to get either.
//!
//! The binaries are really hidden, not configured away: fenceproof runs in a private mount
//! namespace (`unshare --mount`, root only) where a tmpfs covers /usr/lib/postgresql, from a
//! folder without `.pg/`, with no PG_BIN.

use std::path::Path;
use std::process::{Command, Output, Stdio};

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");
const IMAGE: &str = "fenceproof/postgres:15";

/// Run fenceproof with the machine's PostgreSQL binaries hidden, in the folder `cwd` (made fresh).
fn without_binaries(cwd: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    assert!(nix::unistd::geteuid().is_root(), "hiding /usr/lib/postgresql needs a mount namespace: run as root");
    let dir = folder(cwd);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "sh", "-c", "mount -t tmpfs none /usr/lib/postgresql && exec \"$@\"", "sh", FENCEPROOF])
        .args(args)
        .current_dir(&dir)
        .env_remove("PG_BIN")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    fenceproof_harness::testkit::run_bounded(&mut cmd, &dir.join("out"), std::time::Duration::from_secs(180)).0
}

fn folder(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("backend_choice").join(name)
}

#[test]
fn the_binaries_are_really_hidden() {
    // The premise of the other tests: inside the namespace, native is impossible.
    let out = without_binaries("hidden", &["verify", "--backend", "native", "--only", "A"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("binaries"), "{err}");
}

#[test]
fn with_neither_binaries_nor_docker_auto_is_one_line() {
    let out =
        without_binaries("neither", &["verify", "--only", "A"], &[("DOCKER_HOST", "unix:///nonexistent/docker.sock")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert_eq!(fenceproof_harness::testkit::own_lines(&err).trim().lines().count(), 1, "{err}");
    assert!(err.contains("nothing to run PostgreSQL with"), "{err}");
    assert!(err.contains("--pg-bin") && err.contains("Docker"), "it says how to get either: {err}");
    assert!(!folder("neither").join("reports").exists(), "no run folder for a run that could not start");
}

#[test]
fn with_docker_only_auto_picks_the_container_backend() {
    let present =
        Command::new("docker").args(["image", "inspect", IMAGE]).stdout(Stdio::null()).stderr(Stdio::null()).status();
    if !present.is_ok_and(|s| s.success()) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/pg-image.sh");
        assert!(Command::new("bash").arg(script).status().unwrap().success(), "building {IMAGE}");
    }
    // No --pg-image: the official default is not in this daemon (no registry), the local one is.
    let out = without_binaries("docker-only", &["verify", "--only", "A,C"], &[]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stderr.contains(&format!("using {IMAGE}")), "{stderr}");
    assert!(stdout.contains("(container backend"), "{stdout}");
    assert!(stdout.contains("2/2 experiments passed"), "{stdout}");
}
