//! The server dying in the middle of a run keeps the matrix: the postmaster is SIGKILLed while B
//! runs; A keeps its PASS, the running row says ERROR "the server died (signal 9)", the rows after
//! it say "not run: the server died", the matrix is printed and matrix.json written, exit 3.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

/// The direct children of `pid` whose command is `postgres` (the postmaster the harness started).
fn postmasters(pid: u32) -> Vec<i32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { continue };
        // pid (comm) state ppid ...
        let Some((comm, rest)) = stat.split_once(") ").map(|(a, b)| (a.rsplit('(').next().unwrap_or(""), b)) else {
            continue;
        };
        let ppid: u32 = rest.split_whitespace().nth(1).and_then(|x| x.parse().ok()).unwrap_or(0);
        if ppid == pid && comm == "postgres" {
            found.push(p);
        }
    }
    found
}

fn find_dir(root: &Path, name: &str) -> Option<PathBuf> {
    for run in std::fs::read_dir(root).ok()?.flatten() {
        let p = run.path().join(name);
        if p.is_dir() {
            return Some(p);
        }
    }
    None
}

#[test]
fn a_killed_postmaster_keeps_the_matrix_and_names_the_death() {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("server_death");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let reports = tmp.join("reports");
    let out = tmp.join("stdout.txt");
    let mut child = Command::new(FENCEPROOF)
        .args(["verify", "--only", "A,B-sigstop,C,D", "--backend", "native", "--jobs", "1", "--reports-dir"])
        .arg(&reports)
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(tmp.join("stderr.txt")).unwrap())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    // One row at a time (--jobs 1): A has ended when B starts. Wait for B, then SIGKILL the postmaster.
    let killed = loop {
        assert!(child.try_wait().unwrap().is_none(), "verify ended before B started");
        assert!(t0.elapsed() < Duration::from_secs(120), "B never started");
        if find_dir(&reports, "B-sigstop").is_some() {
            let pms = postmasters(child.id());
            assert_eq!(pms.len(), 1, "one postmaster under the harness");
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pms[0]), nix::sys::signal::Signal::SIGKILL).unwrap();
            break pms[0];
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(180) {
            let _ = child.kill();
            panic!("verify did not end within 180 s after the postmaster {killed} was killed");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = std::fs::read_to_string(&out).unwrap();
    let stderr = std::fs::read_to_string(tmp.join("stderr.txt")).unwrap_or_default();
    let stdout = if stdout.is_empty() { format!("(nothing on stdout; stderr:)\n{stderr}") } else { stdout };
    assert_eq!(status.code(), Some(3), "exit 3 (no verdict for some rows)\n{stdout}");
    let row =
        |id: &str| stdout.lines().find(|l| l.split_whitespace().next() == Some(id)).unwrap_or_default().to_string();
    assert!(row("A").contains("PASS"), "A keeps its PASS:\n{stdout}");
    assert!(row("B-sigstop").contains("ERROR"), "B is an ERROR:\n{stdout}");
    assert!(stdout.contains("the server died (signal 9)"), "the death is named:\n{stdout}");
    for id in ["C", "D"] {
        assert!(row(id).contains("ERROR"), "{id} is an ERROR:\n{stdout}");
    }
    assert!(stdout.contains("not run: the server died"), "later rows say they did not run:\n{stdout}");
    let matrix = find_dir(&reports, "").map(|_| ()).and_then(|_| {
        std::fs::read_dir(&reports).ok()?.flatten().map(|e| e.path().join("matrix.json")).find(|p| p.is_file())
    });
    let matrix = matrix.expect("matrix.json was written");
    let m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(matrix).unwrap()).unwrap();
    assert_eq!(m["results"].as_array().map(Vec::len), Some(4), "all four rows are in matrix.json");
    // Nothing of the run is left: no postgres under a dead harness, no worker.
    assert!(postmasters(child.id()).is_empty());
}
