//! The container backend end to end: experiments pass on PostgreSQL in a Docker container (the
//! image built offline by scripts/pg-image.sh), no container survives a run or a Ctrl-C, and a
//! missing daemon gives a one-line error, never a hang.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");
const IMAGE: &str = "fenceproof/postgres:15";

/// Containers and networks a harness process (`pid`) created that still exist, as "kind id".
fn left_by(pid: u32) -> Vec<String> {
    let filter = format!("label=fenceproof.harness-pid={pid}");
    let mut left = Vec::new();
    for (kind, args) in [("container", ["ps", "-aq"]), ("network", ["network", "ls"])] {
        let out = Command::new("docker")
            .args(args)
            .args(if kind == "network" { vec!["-q"] } else { vec![] })
            .args(["--filter", &filter])
            .output()
            .expect("docker CLI (the container backend's tests need Docker)");
        left.extend(String::from_utf8_lossy(&out.stdout).lines().map(|id| format!("{kind} {id}")));
    }
    left
}

/// Bound on one whole fenceproof run in these tests.
const RUN_BOUND: Duration = Duration::from_secs(300);

/// Run fenceproof to the end, bounded; its pid too (what it created carries it as a label).
fn run(args: &[&str], reports: &std::path::Path) -> (std::process::Output, u32) {
    let mut cmd = Command::new(FENCEPROOF);
    cmd.args(args).arg("--reports-dir").arg(reports);
    fenceproof_harness::testkit::run_bounded(&mut cmd, reports, RUN_BOUND)
}

/// SIGINT a run once it has created a container or network; it must exit 130 and leave none.
fn interrupt_once_started(args: &[&str], reports: &std::path::Path, what: &str) {
    let mut child = Command::new(FENCEPROOF)
        .args(args)
        .arg("--reports-dir")
        .arg(reports)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let t0 = Instant::now();
    while !left_by(pid).iter().any(|l| l.starts_with(what)) {
        assert!(t0.elapsed() < Duration::from_secs(90), "no {what} appeared");
        assert!(child.try_wait().unwrap().is_none(), "the run ended before a {what} appeared");
        std::thread::sleep(Duration::from_millis(100));
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(left_by(pid).is_empty(), "left after SIGINT: {:?}", left_by(pid));
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
    let (out, pid) = run(
        &[
            "verify",
            "--backend",
            "container",
            "--pg-image",
            IMAGE,
            "--only",
            "A,B-freeze,E-idem,P-role,I-save,J-partition,K-forward,L-rollout,M-redis-restart,N-restore",
        ],
        &reports,
    );
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("container backend") && stdout.contains("10/10 experiments passed"), "{stdout}");
    let run = std::fs::read_link(reports.join("latest")).map(|l| reports.join(l)).unwrap();
    let log = std::fs::read_to_string(run.join("postgres.log")).unwrap();
    assert!(log.contains("database system is ready to accept connections"), "the container's log is kept");
    assert!(left_by(pid).is_empty(), "left behind: {:?}", left_by(pid));

    // Ctrl-C in the middle of a run: the container goes too.
    interrupt_once_started(
        &["verify", "--backend", "container", "--pg-image", IMAGE, "--only", "B"],
        &reports,
        "container",
    );
}

/// Experiment H with the primary and the standby as two containers on a private network: the
/// standby loses acknowledged commits to a real network cut (async), a cancelled synchronous wait
/// is not success (sync), and containers and network are gone afterwards, even after a Ctrl-C.
#[test]
fn failover_runs_on_a_container_pair() {
    ensure_image();
    let reports = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("container_failover");
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples");

    // The contract chooses the container backend and the image.
    let sync = format!("{examples}/container-sync-no-loss.toml");
    let (out, pid) = run(&["verify", "--contract", &sync, "--only", "H-sync"], &reports);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("container backend") && stdout.contains("1/1 experiments passed"), "{stdout}");
    let run_dir = std::fs::read_link(reports.join("latest")).map(|l| reports.join(l)).unwrap();
    let h = run_dir.join("H-sync");
    let failover: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(h.join("failover.json")).unwrap()).unwrap();
    assert!(failover["fault"].as_str().unwrap().contains("docker network disconnect"), "{failover}");
    let timeline = std::fs::read_to_string(h.join("timeline.jsonl")).unwrap();
    assert!(timeline.contains("\"network_cut\"") && timeline.contains("\"docker_kill\""), "{timeline}");
    for log in ["primary.log", "standby.log"] {
        let text = std::fs::read_to_string(h.join(log)).unwrap();
        assert!(text.contains("ready to accept"), "{log} is kept: {text}");
    }
    assert!(left_by(pid).is_empty(), "left behind: {:?}", left_by(pid));

    // A contract that claims no loss on async replication fails, and the reproduce line brings
    // the same backend, image and contract back.
    let claims = format!("{examples}/async-claims-no-loss.toml");
    let (out, pid) = run(
        &["verify", "--backend", "container", "--pg-image", IMAGE, "--contract", &claims, "--only", "H-async"],
        &reports,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("H-async        FAIL"), "{stdout}");
    assert!(stdout.contains("lost epoch 2 -> 1"), "the network cut really lost acknowledged commits: {stdout}");
    assert!(
        stdout.contains(&format!(
            "reproduce: {FENCEPROOF} verify --only H-async --backend container --pg-image {IMAGE} --contract {claims}"
        )),
        "{stdout}"
    );
    assert!(left_by(pid).is_empty(), "left behind: {:?}", left_by(pid));

    // Ctrl-C while the pair's network exists.
    interrupt_once_started(
        &["verify", "--backend", "container", "--pg-image", IMAGE, "--only", "H-sync"],
        &reports,
        "network",
    );
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
    assert_eq!(fenceproof_harness::testkit::own_lines(&err).trim().lines().count(), 1, "{err}");
    assert!(err.contains("no Docker daemon at /nonexistent/docker.sock"), "{err}");

    assert!(t0.elapsed() < Duration::from_secs(20), "the error came at once");
}
