//! Verdicts that hold on a busy machine (issue 45, item 3): the whole matrix with the Python
//! example, once on the machine as it is and then 3 times while CPU hogs load it to four times its
//! cores. Every loaded run must give each row the verdict of the unloaded run, and no row may end
//! in ERROR (a STARVED row is a changed verdict too).
//!
//! The load is `stress-ng --cpu 4×cores` when Debian's stress-ng is installed, else as many busy
//! `sh` loops. Either way the test starts each hog in a process group of its own and kills that
//! group when the load ends and when the test panics (the guard's `Drop`); should the test itself
//! be killed, each hog has a parent-death SIGKILL (and stress-ng its own `--timeout`). Long (four
//! whole matrices): `just loaded`, never in the pool.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

/// How many loaded runs must agree with the unloaded one.
const LOADED_RUNS: usize = 3;

/// Load per core.
const PER_CORE: usize = 4;

fn tmp(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("loaded_machine").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The CPU hogs, killed (each one's whole process group) when dropped.
struct Load {
    children: Vec<Child>,
    what: String,
}

/// `cmd` in a process group of its own, killed by the kernel should this test process die.
fn hog(mut cmd: Command) -> Child {
    // SAFETY: only an async-signal-safe prctl between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
    cmd.process_group(0).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start the load")
}

impl Load {
    /// Start `hogs` CPU hogs: one stress-ng, else `hogs` busy shells.
    fn start(hogs: usize) -> Load {
        let stress_ng =
            Command::new("sh").args(["-c", "command -v stress-ng"]).output().is_ok_and(|o| o.status.success());
        if stress_ng {
            let mut c = Command::new("stress-ng");
            c.args(["--cpu", &hogs.to_string(), "--timeout", "3600s", "--quiet"]);
            return Load { children: vec![hog(c)], what: format!("stress-ng --cpu {hogs}") };
        }
        let children = (0..hogs)
            .map(|_| {
                let mut c = Command::new("sh");
                c.args(["-c", "while :; do :; done"]);
                hog(c)
            })
            .collect();
        Load { children, what: format!("{hogs} busy sh loops (no stress-ng installed)") }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for child in &mut self.children {
            let group = nix::unistd::Pid::from_raw(-(child.id() as i32));
            let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
            let _ = child.wait();
        }
    }
}

/// The whole matrix with the Python example: each row's verdict, and the run's exit code.
fn matrix(dir: &Path, worker: &Path) -> (BTreeMap<String, String>, Option<i32>, String) {
    let mut cmd = Command::new(FENCEPROOF);
    cmd.args(["verify", "--json", "--worker-bin"]).arg(worker).arg("--reports-dir").arg(dir.join("reports"));
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, dir, Duration::from_secs(1800));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let verdicts = doc["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results: {text}"))
        .iter()
        .map(|r| (r["id"].as_str().unwrap_or("?").to_string(), r["verdict"].as_str().unwrap_or("?").to_string()))
        .collect();
    (verdicts, out.status.code(), doc["report"].as_str().unwrap_or("").to_string())
}

#[test]
#[ignore = "four whole matrices under load: just loaded"]
fn a_loaded_machine_changes_no_verdict() {
    let dir = tmp("runs");
    let worker = dir.join("worker").join("worker.py");
    std::fs::create_dir_all(worker.parent().unwrap()).unwrap();
    fenceproof_harness::testkit::example_copy(&worker);
    let (quiet, code, report) = matrix(&dir.join("unloaded"), &worker);
    assert!(!quiet.is_empty(), "the unloaded run has rows");
    assert!(quiet.values().all(|v| v != "ERROR"), "the unloaded run has no ERROR ({report}): {quiet:?}");
    eprintln!("unloaded: exit {code:?}, {} rows ({report})", quiet.len());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let load = Load::start(PER_CORE * cores);
    eprintln!("load: {}", load.what);
    for run in 1..=LOADED_RUNS {
        let (loaded, code, report) = matrix(&dir.join(format!("loaded-{run}")), &worker);
        let changed: Vec<String> = quiet
            .iter()
            .filter(|(id, v)| loaded.get(*id) != Some(*v))
            .map(|(id, v)| format!("{id}: {v} -> {}", loaded.get(id).map(String::as_str).unwrap_or("missing")))
            .collect();
        assert!(changed.is_empty(), "loaded run {run} ({report}, exit {code:?}) changed: {}", changed.join("; "));
        assert!(loaded.values().all(|v| v != "ERROR"), "loaded run {run} has an ERROR ({report})");
        eprintln!("loaded run {run}: exit {code:?}, every verdict as unloaded ({report})");
    }
    drop(load);
}
