//! Model-paths-db end to end: the reference worker plays the model's paths on a fresh database and the
//! fenced functions pass; a function that lets a step the model refuses commit is caught by the
//! row's own check, trace validation switched off (`--judge rules`): a takeover without the expiry
//! condition by the probe after a grant, a renewal without it on a path.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn fenceproof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fenceproof"))
}

fn scratch(name: &str) -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&tmp);
    tmp
}

/// The two mutants: the takeover's and the renewal's expiry conditions dropped.
const MUTANTS: [&str; 2] = ["fp_lease_acquire/drop-conjunct/2", "fp_lease_renew/drop-conjunct/4"];

#[test]
fn the_reference_plays_every_path_and_a_dropped_expiry_condition_is_caught_by_the_model() {
    let tmp = scratch("model_paths");
    let (out, _) = fenceproof_harness::testkit::run_bounded(
        fenceproof()
            .args([
                "mutants",
                "sql",
                "--only",
                "Model-paths-db",
                "--judge",
                "rules",
                "--jobs",
                "3",
                "--json",
                "--mutants",
            ])
            .arg(MUTANTS.join(","))
            .arg("--reports-dir")
            .arg(tmp.join("reports")),
        &tmp.join("run"),
        Duration::from_secs(600),
    );
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let m: serde_json::Value = serde_json::from_str(&stdout).expect("the kill matrix as JSON");
    assert_eq!(m["reference_passed"], true, "the reference passes Model-paths-db: {m}");
    let rows = m["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{m}");
    for r in rows {
        assert_eq!(r["fate"], "killed", "{r}");
        assert_eq!(r["verdicts"][0][1], "FAIL", "killed by a FAIL, not an ERROR: {r}");
        let by = r["killed_by"][0].as_str().unwrap_or_default();
        assert!(by.contains("no step the model refuses committed"), "killed by the model's refusal: {r}");
    }
    // The reference's own run played every path to its end.
    let report = PathBuf::from(m["report"].as_str().expect("report"));
    let events = walk(&report.join("reference")).into_iter().find(|p| p.ends_with("worker-paths.events.jsonl"));
    let events = std::fs::read_to_string(events.expect("the driver's events")).unwrap();
    let answer: serde_json::Value = events
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e["event"] == "play_paths")
        .expect("the driver's answer");
    let paths: serde_json::Value = serde_json::from_str(fenceproof_model::coverage::PATHS).unwrap();
    let played = answer["data"]["paths"].as_array().map(Vec::len).unwrap_or(0);
    assert!(played >= paths.as_object().unwrap().len(), "{played} paths played");
    // The takeovers of a finished run's lease, which fp_lease_acquire refuses, were played with the
    // spec's own statements as the direct login, none skipped.
    let spec = answer["data"]["paths"].as_array().unwrap().iter().filter(|p| p["spec_statements"] == true).count();
    assert!(spec > 0, "no path played with the spec's own statements: {answer}");
    assert_eq!(answer["data"]["skipped_spec_statements"], serde_json::json!([]), "{answer}");
    // The paths through a restore played their run's rows restored on the second database, none
    // skipped, and that database's history was validated too.
    let restored = answer["data"]["paths"].as_array().unwrap().iter().filter(|p| p["restored"] == true).count();
    assert!(restored > 0, "no path played a restore: {answer}");
    assert_eq!(answer["data"]["skipped_restore"], serde_json::json!([]), "{answer}");
    let traced = walk(&report.join("reference")).into_iter().any(|p| p.ends_with("trace-restored.json"));
    assert!(traced, "the restored database's history was validated");
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
