//! The image for CI (scripts/image.sh, `just image`): built offline from this build's programs and
//! this machine's PostgreSQL 15, it runs conformance and the whole matrix against the Go example
//! worker with no toolchain inside, as a CI job runs it (`docker run … verify --worker-bin
//! /src/worker`). The freeze rows need root and the host's freezer cgroup, which the job mounts.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const TAG: &str = "fenceproof/fenceproof:test";

/// The Go example worker, built statically (the image has no Go).
fn go_worker(dir: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let copy = dir.join("go-worker");
    let st = Command::new("cp").arg("-r").arg(root.join("examples/go-worker")).arg(&copy).status().unwrap();
    assert!(st.success(), "copy the Go worker");
    let bin = dir.join("worker");
    let mut build = Command::new("go");
    build
        .args(["build", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir(copy.join("src/fenceproof-go-worker"))
        .env("GO111MODULE", "off")
        .env("CGO_ENABLED", "0")
        .env("GOPATH", format!("{}:/usr/share/gocode", copy.display()))
        .env("GOCACHE", root.join("target/go-worker/cache"))
        .env("GOFLAGS", "");
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut build, &dir.join("build"), Duration::from_secs(300));
    assert!(out.status.success(), "go build failed:\n{}", String::from_utf8_lossy(&out.stderr));
    bin
}

/// `docker run` of the image with `args`, the work folder mounted at /src: exit code and output.
fn in_image(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = Command::new("docker");
    cmd.args(["run", "--rm", "--user", "0", "-v", "/sys/fs/cgroup/freezer:/sys/fs/cgroup/freezer", "-v"])
        .arg(format!("{}:/src", dir.display()))
        .args(["-w", "/src", TAG])
        .args(args);
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, &dir.join(args[0]), Duration::from_secs(900));
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn the_ci_image_runs_conformance_and_the_matrix_against_the_go_example() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ci_image");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bins = Path::new(env!("CARGO_BIN_EXE_fenceproof")).parent().unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/image.sh");
    let st = Command::new("bash").arg(script).arg(bins).arg(TAG).status().unwrap();
    assert!(st.success(), "building {TAG} with {script}");
    go_worker(&dir);

    let (code, text) = in_image(&dir, &["conformance", "--worker-bin", "/src/worker"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("0 deviations"), "{text}");

    let (code, text) = in_image(&dir, &["verify", "--quiet", "--worker-bin", "/src/worker", "--skip-conformance"]);
    let n = fenceproof_scenarios::select(None).unwrap().len();
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains(&format!("{n}/{n} experiments passed")), "{text}");
    assert!(dir.join("reports/latest/index.html").exists(), "the run folder is the job's, in /src/reports");
}
