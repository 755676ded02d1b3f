//! A failing row's `reproduce:` line, run as printed, reproduces the verdict: it names the worker
//! under test and every flag that shaped the run, so a team re-running it tests their worker, not
//! the reference. The worker is a copy of the Python example with one bug (an operation_id that
//! carries its owner id), run without the conformance gate.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

/// `fenceproof verify ...` (or a printed reproduce line run by a shell): exit code and output.
fn run(cmd: &mut Command, dir: &Path) -> (Option<i32>, String) {
    let (out, _) = fenceproof_harness::testkit::run_bounded(cmd, dir, Duration::from_secs(240));
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn a_printed_reproduce_line_gives_the_same_verdict_for_a_worker_that_is_not_ours() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reproduce_line");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let worker = dir.join("worker.py");
    fenceproof_harness::testkit::example_copy(
        "op-id-owner",
        &worker,
        &[(
            "operation_id = \"%s/%s/%s/v%d\" % (tenant, lease[0], step, version)",
            "operation_id = \"%s/%s/%s/v%d/%s\" % (tenant, lease[0], step, version, self.owner)",
        )],
    );
    let mut first = Command::new(FENCEPROOF);
    first
        .args(["verify", "--quiet", "--skip-conformance", "--barriers", "proxy", "--only", "A,E-idem", "--worker-bin"])
        .arg(&worker)
        .arg("--reports-dir")
        .arg(dir.join("reports-1"));
    let (code, text) = run(&mut first, &dir.join("first"));
    assert_eq!(code, Some(1), "the broken worker FAILs:\n{text}");
    let line = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("reproduce: "))
        .find(|l| l.contains("--only E-idem"))
        .unwrap_or_else(|| panic!("no reproduce line for E-idem:\n{text}"))
        .to_string();
    for flag in ["--worker-bin", "--skip-conformance", "--barriers proxy"] {
        assert!(line.contains(flag), "the reproduce line keeps {flag}: {line}");
    }
    assert!(line.starts_with("fenceproof verify "), "{line}");

    // Run it as printed, by a shell, with `fenceproof` being this build.
    let script = format!(
        "fenceproof() {{ '{FENCEPROOF}' \"$@\"; }}; {line} --quiet --reports-dir '{}'",
        dir.join("reports-2").display()
    );
    let (code2, text2) = run(Command::new("bash").args(["-c", &script]), &dir.join("second"));
    assert_eq!(code2, Some(1), "the reproduce line FAILs the row again:\n{text2}");
    let failed = |t: &str| -> Vec<String> {
        t.lines()
            .filter_map(|l| l.trim().strip_prefix("FAILED "))
            .map(|l| l.split(':').next().unwrap_or_default().to_string())
            .collect()
    };
    let (a, b) = (failed(&text), failed(&text2));
    assert!(!b.is_empty() && b.iter().all(|c| a.contains(c)), "the same checks fail: first {a:?}, again {b:?}");
    assert!(b.iter().any(|c| c.contains("no operation_id carries an owner id")), "{text2}");
}
