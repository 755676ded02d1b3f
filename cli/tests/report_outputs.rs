//! What a run leaves for people and for CI: index.html rendered by a real headless browser (the
//! matrix and the timelines are in the DOM it builds, and it produces a screenshot), the metrics
//! and structured logs of the processes, and the `--quiet` / `--json` outputs.

use std::path::{Path, PathBuf};
use std::process::Command;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

fn reports(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn browser() -> PathBuf {
    ["chromium-headless-shell", "chromium"]
        .iter()
        .find_map(|b| {
            std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(b)).find(|f| f.is_file()))
        })
        .expect("a headless chromium (bash scripts/setup.sh installs chromium-headless-shell)")
}

#[test]
fn the_html_report_renders_the_matrix_and_timelines_in_a_real_browser() {
    let dir = reports("report_html");
    let out = Command::new(FENCEPROOF)
        .args(["verify", "--only", "B-sigstop,E-idem", "--quiet", "--reports-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let run = std::fs::read_link(dir.join("latest")).map(|l| dir.join(l)).unwrap();
    let page = format!("file://{}", run.join("index.html").display());
    let dom = Command::new(browser())
        .args(["--no-sandbox", "--headless", "--disable-gpu", "--dump-dom", &page])
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(dom.contains("<table class=\"matrix\">"), "no matrix in the rendered DOM");
    for id in ["exp-B-sigstop", "exp-E-idem"] {
        assert!(
            dom.contains(&format!("href=\"#{id}\"")) && dom.contains(&format!("id=\"{id}\"")),
            "{id} missing from the DOM"
        );
    }
    assert!(dom.matches("<svg").count() >= 2, "a timeline per experiment");
    assert!(dom.contains("class=\"pause\""), "B's SIGSTOP band");
    assert!(dom.contains("class=\"rejected\""), "B's rejected stale attempts");
    assert!(dom.contains("class=\"effect\""), "E's real side effect");
    let shot = run.join("screenshot.png");
    let status = Command::new(browser())
        .args(["--no-sandbox", "--headless", "--disable-gpu", "--hide-scrollbars", "--window-size=1200,1600"])
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&page)
        .output()
        .unwrap();
    assert!(status.status.success());
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 20_000, "a real screenshot ({} bytes)", png.len());

    // The processes' own outputs were collected: metrics and structured logs.
    let metrics = std::fs::read_to_string(run.join("B-sigstop/metrics-a.prom")).unwrap();
    assert!(metrics.contains("protected_write_rejected_total{reason=\"lease\"} 4"), "{metrics}");
    let log = std::fs::read_to_string(run.join("B-sigstop/worker-a.stderr.log")).unwrap();
    let line: serde_json::Value = log
        .lines()
        .find(|l| l.contains("\"event\":\"save\""))
        .map(|l| serde_json::from_str(l).unwrap())
        .expect("a save logged");
    for f in ["trace_id", "owner", "run_id", "epoch", "revision", "operation_id"] {
        assert!(!line["fields"][f].is_null(), "log line lacks {f}: {line}");
    }
    assert!(line["fields"]["trace_id"].as_str().unwrap().ends_with("/B-sigstop"));
}

#[test]
fn quiet_and_json_outputs_for_ci() {
    let dir = reports("report_modes");
    let out =
        Command::new(FENCEPROOF).args(["verify", "--only", "A", "--json", "--reports-dir"]).arg(&dir).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let m: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is the matrix as JSON");
    assert_eq!(m["results"][0]["id"], "A");
    assert_eq!(m["results"][0]["verdict"], "PASS");
    let out = Command::new(FENCEPROOF)
        .args(["verify", "--only", "A", "--quiet", "--reports-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 2, "summary and report lines only: {text}");
    assert!(text.starts_with("1/1 experiments passed"), "{text}");
}
