//! The container backend end to end: experiments pass on PostgreSQL in a Docker container (the
//! image built offline by scripts/pg-image.sh), no container survives a run or a Ctrl-C, and a
//! missing daemon gives a one-line error, never a hang.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");
const IMAGE: &str = "fenceproof/postgres:15";

fn ours() -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--filter", "label=fenceproof.harness-pid"])
        .output()
        .expect("docker CLI (the container backend's tests need Docker)");
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

fn ensure_image() {
    let present =
        Command::new("docker").args(["image", "inspect", IMAGE]).stdout(Stdio::null()).stderr(Stdio::null()).status();
    if !present.is_ok_and(|s| s.success()) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/pg-image.sh");
        let st = Command::new("bash").arg(script).status().unwrap();
        assert!(st.success(), "building {IMAGE} with {script}");
    }
}

#[test]
fn experiments_pass_in_a_container_and_nothing_is_left_behind() {
    ensure_image();
    let reports = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("container_backend");
    let out = Command::new(FENCEPROOF)
        .args([
            "verify",
            "--backend",
            "container",
            "--pg-image",
            IMAGE,
            "--only",
            "A,B-freeze,E-idem,P-role",
            "--reports-dir",
        ])
        .arg(&reports)
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("container backend") && stdout.contains("4/4 experiments passed"), "{stdout}");
    let run = std::fs::read_link(reports.join("latest")).map(|l| reports.join(l)).unwrap();
    let log = std::fs::read_to_string(run.join("postgres.log")).unwrap();
    assert!(log.contains("database system is ready to accept connections"), "the container's log is kept");
    assert!(ours().is_empty(), "containers left behind: {:?}", ours());

    // Ctrl-C in the middle of a run: the container goes too.
    let mut child = Command::new(FENCEPROOF)
        .args(["verify", "--backend", "container", "--pg-image", IMAGE, "--only", "B", "--reports-dir"])
        .arg(&reports)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while ours().is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(60), "no container appeared");
        std::thread::sleep(Duration::from_millis(100));
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(ours().is_empty(), "containers left after SIGINT: {:?}", ours());
}

#[test]
fn a_missing_daemon_is_one_line_and_no_hang() {
    let t0 = Instant::now();
    let out = Command::new(FENCEPROOF)
        .args(["verify", "--backend", "container", "--only", "A"])
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("no Docker daemon at /nonexistent/docker.sock"), "{err}");

    assert!(t0.elapsed() < Duration::from_secs(20), "the error came at once");
}
