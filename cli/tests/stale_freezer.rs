//! A harness killed with SIGKILL cannot thaw what it froze. The next run thaws and removes every
//! freezer cgroup whose harness no longer exists, and says what it swept.

use std::process::Command;
use std::time::{Duration, Instant};

use fenceproof_harness::procs::freezer;

#[test]
fn the_next_run_thaws_and_removes_cgroups_of_dead_harnesses_and_says_so() {
    let Ok(f) = freezer::flavor() else { return };
    // A dead harness's cgroup: an owner pid that no longer exists, with a process frozen in it.
    let mut dead = Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    let dir = freezer::root(f).join(format!("fenceproof-{dead_pid}-1"));
    std::fs::create_dir_all(&dir).expect("root may create freezer cgroups");
    let mut sleeper = Command::new("sleep").arg("1004.5").spawn().unwrap();
    std::fs::write(dir.join("cgroup.procs"), sleeper.id().to_string()).unwrap();
    freezer::set_frozen(f, &dir, true).unwrap();
    let t0 = Instant::now();
    while !freezer::is_frozen(f, &dir) {
        assert!(t0.elapsed() < Duration::from_secs(10), "the kernel never reported the cgroup frozen");
        std::thread::sleep(Duration::from_millis(10));
    }

    let reports = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("stale_freezer");
    let (out, _) = fenceproof_harness::testkit::run_bounded(
        Command::new(env!("CARGO_BIN_EXE_fenceproof")).args(["verify", "--only", "A", "--reports-dir"]).arg(&reports),
        &reports.join("run"),
        Duration::from_secs(120),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(out.status.success(), "{err}");
    assert!(err.contains("thawed and removed") && err.contains(&dir.display().to_string()), "{err}");
    assert!(!dir.exists(), "the stale cgroup is gone");
}
