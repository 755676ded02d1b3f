//! A failure a person reads once (issue 45, item 4): one worker bug gives one root line per broken
//! rule, what follows from it indented under it, every line short and free of raw JSON; the
//! whole evidence is in the report, and the HTML timeline marks the failing commit in red.
//!
//! The bug: a variant of the Python example on the direct path whose protected write validates
//! nothing of the lease (only that the row exists), through B-sigstop. Before this, the same run
//! printed nine FAILED lines per row, up to 600 characters, with Rust debug values and JSON.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

fn tmp(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("failure_lines").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The longest line the terminal may print for a broken rule (220 characters, the indent and a
/// first check name longer than its share aside).
const LONGEST: usize = 240;

#[test]
fn one_unfenced_save_prints_one_root_with_its_consequences_under_it() {
    let dir = tmp("unfenced-save");
    // The stale save goes through: the fence checks only that the lease row exists (the variant
    // `unfenced-save` of tests/variants/direct_bug_classes.py, whose folder holds its code).
    let worker =
        fenceproof_harness::testkit::variant_worker("direct_bug_classes", "unfenced-save", &dir.join("worker"));
    let code = fenceproof_harness::testkit::variants_dir();
    let reports = dir.join("reports");
    let mut cmd = Command::new(FENCEPROOF);
    cmd.args(["verify", "--quiet", "--skip-conformance", "--write-path", "direct", "--only", "B-sigstop"])
        .arg("--worker-bin")
        .arg(&worker)
        .arg("--worker-dir")
        .arg(&code)
        .arg("--reports-dir")
        .arg(&reports);
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, &dir, Duration::from_secs(240));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(1), "the unfenced save must FAIL B-sigstop:\n{text}");
    let failed: Vec<&str> = text.lines().filter(|l| l.contains("FAILED")).collect();
    let roots: Vec<&str> = failed.iter().copied().filter(|l| l.starts_with("  FAILED B-sigstop §")).collect();
    assert_eq!(roots.len(), 1, "one bug, one root line:\n{text}");
    assert!(roots[0].contains("holder.only-current-epoch-writes"), "the root names the fencing rule:\n{text}");
    let follows = failed.iter().filter(|l| l.starts_with("    ↳ ")).count();
    assert_eq!(follows + 1, failed.len(), "every other FAILED line is indented under the root:\n{text}");
    assert!(failed.len() <= 8, "{} FAILED lines:\n{text}", failed.len());
    for l in &failed {
        assert!(l.chars().count() <= LONGEST, "a line of {} characters:\n{l}", l.chars().count());
        assert!(!l.contains("{\"") && !l.contains("Some(") && !l.contains("String("), "raw values:\n{l}");
    }
    let run = std::fs::read_dir(&reports)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("index.html").exists())
        .expect("a run folder");
    let matrix: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("matrix.json")).unwrap()).unwrap();
    // The commit the root cites (its checks carry it as data, the earliest of the row's one root)
    // is in its line and red on the row's timeline.
    let commit = matrix["results"][0]["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["verdict"] == "FAIL")
        .flat_map(|c| c["commits"].as_array().cloned().unwrap_or_default())
        .filter_map(|n| n.as_i64())
        .min()
        .unwrap_or_else(|| panic!("the failed checks cite a commit:\n{text}"));
    assert!(roots[0].contains(&format!("#{commit}")), "the root names #{commit}:\n{text}");
    let html = std::fs::read_to_string(run.join("index.html")).unwrap();
    assert!(html.contains(&format!("class=\"epoch failing\">FAIL #{commit}</text>")), "no red mark at #{commit}");
    assert!(html.contains("class=\"commit failing\""), "no red commit");
    assert!(html.contains("<pre class=\"evidence\">"), "the whole evidence, folded");
    // The fingerprint covers the folder named by --worker-dir.
    assert_eq!(matrix["worker"]["folder"], code.display().to_string());
    assert!(matrix["worker"]["files"].as_u64().unwrap_or(0) >= 2, "{}", matrix["worker"]);
}

#[test]
fn a_worker_dir_that_is_no_folder_is_one_line_and_exit_2() {
    let dir = tmp("bad-worker-dir");
    let mut cmd = Command::new(FENCEPROOF);
    cmd.args(["verify", "--worker-dir"]).arg(dir.join("missing")).arg("--reports-dir").arg(dir.join("reports"));
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, &dir, Duration::from_secs(30));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--worker-dir") && err.contains("not a folder"), "{err}");
}
