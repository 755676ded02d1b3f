//! The Patroni rows leave nothing behind: after Ctrl-C in the middle of one, and after the harness
//! is killed with SIGKILL (its etcd and Patroni nodes die with it through the parent-death signal;
//! the postmasters Patroni detached are killed by the next run's sweep of the dead harness's
//! folder). Every process of such a run works inside `/tmp/fenceproof-<harness pid>-…`.

use fenceproof_harness::testkit::poll;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

/// The processes working inside a folder of the harness `pid`, as (pid, command line).
fn working_in_run_of(pid: u32) -> Vec<(i32, String)> {
    let prefix = std::env::temp_dir().join(format!("fenceproof-{pid}-"));
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(cwd) = std::fs::read_link(e.path().join("cwd")) else { continue };
        if cwd.display().to_string().starts_with(&prefix.display().to_string()) {
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let state = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            if !state.contains(") Z ") {
                found.push((p, String::from_utf8_lossy(&cmd).replace('\0', " ")));
            }
        }
    }
    found
}

fn reports_dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Start H-patroni-async and wait until both postmasters, Patroni and etcd run.
fn start_until_the_cluster_runs(reports: &Path) -> Child {
    let child = Command::new(FENCEPROOF)
        .args(["verify", "--only", "H-patroni-async", "--reports-dir"])
        .arg(reports)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let id = child.id();
    poll("the Patroni cluster to run (etcd, two Patroni, two postmasters)", Duration::from_secs(90), || {
        let procs = working_in_run_of(id);
        let count = |needle: &str| procs.iter().filter(|(_, c)| c.contains(needle)).count();
        (count("etcd") >= 1 && count("patroni.yml") == 2 && count("bin/postgres") == 2).then_some(())
    });
    child
}

#[test]
fn ctrl_c_during_a_patroni_row_stops_etcd_patroni_and_postgres() {
    let reports = reports_dir("patroni_cleanup_sigint");
    let mut child = start_until_the_cluster_runs(&reports);
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let status = poll("fenceproof to exit", Duration::from_secs(30), || child.try_wait().unwrap());
    assert_eq!(status.code(), Some(130));
    let left = working_in_run_of(child.id());
    assert!(left.is_empty(), "left running after Ctrl-C: {left:?}");
}

#[test]
fn a_patroni_row_killed_with_sigkill_is_swept_by_the_next_run() {
    let reports = reports_dir("patroni_cleanup_sigkill");
    let mut child = start_until_the_cluster_runs(&reports);
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    let _ = child.wait();
    // etcd and the Patroni nodes die with the harness (parent-death signal).
    poll("etcd and Patroni to die with the harness", Duration::from_secs(20), || {
        let left = working_in_run_of(child.id());
        (!left.iter().any(|(_, c)| c.contains("etcd") || c.contains("patroni.yml"))).then_some(())
    });
    // The next run that starts a server sweeps the dead harness's folder and what works in it.
    let out = Command::new(FENCEPROOF).args(["verify", "--only", "A", "--reports-dir"]).arg(&reports).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    poll("nothing of the killed run to be left", Duration::from_secs(20), || {
        working_in_run_of(child.id()).is_empty().then_some(())
    });
}
