//! Before the matrix: the worker under test is started once and must answer its first command
//! (`metrics`) within a bound. A worker that exits at once, never answers or answers garbage stops
//! the run here with one line naming its exit status and the last lines it printed, instead of
//! turning every experiment into a confusing FAIL or a 15-second ERROR each. What the worker
//! printed that breaks the worker contract (a line that is not JSON or longer than 1 MiB, an
//! answer outside the schema, a flood) is a deviation ([`HarnessError::WorkerContract`], exit 4);
//! no answer at all (it exited, or it hangs) is a harness error: no verdict (exit 3).

use std::path::Path;
use std::time::Duration;

use fenceproof_harness::procs::worker::{WorkerProc, WorkerSpec};
use fenceproof_harness::record::timeline::Timeline;
use fenceproof_harness::HarnessError;
use serde_json::json;

/// How long the worker has to answer its first command.
pub const FIRST_ANSWER: Duration = Duration::from_secs(15);

/// The last non-empty lines of a file, joined with " | ".
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].iter().map(|l| l.chars().take(200).collect::<String>()).collect::<Vec<_>>().join(" | ")
}

/// Start `binary` against `database_url` in `dir` and require an answer to `metrics`.
pub async fn check_worker(binary: &Path, database_url: &str, dir: &Path) -> Result<(), HarnessError> {
    std::fs::create_dir_all(dir)?;
    let owner = format!("preflight-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let mut w = WorkerProc::spawn(
        WorkerSpec {
            name: "preflight".into(),
            owner,
            binary: binary.to_path_buf(),
            database_url: database_url.to_string(),
            dir: dir.to_path_buf(),
            // Every flag the contract marks "always passed" (docs/worker-protocol.md, Flags), so a
            // worker that insists on them answers here as it will in the rows.
            extra_args: vec![
                "--trace-id".into(),
                "preflight".into(),
                "--write-path".into(),
                "api".into(),
                "--secrets-dir".into(),
                dir.join("secrets").display().to_string(),
            ],
        },
        Timeline::new(),
    )
    .await?;
    let answer = w.request(json!({"cmd": "metrics"}), FIRST_ANSWER).await;
    let fail = |what: String| HarnessError::Other(format!("worker {}: {what}", binary.display()));
    match answer {
        Ok(ev) if ev["outcome"].is_string() => {
            let _ = w.shutdown(Duration::from_secs(5)).await;
            Ok(())
        }
        Ok(ev) => {
            let _ = w.kill().await;
            Err(deviates(binary, format!("answered its first command without an outcome: {ev}")))
        }
        Err(e) => {
            let seen = match &e {
                HarnessError::WorkerContract { detail, .. } => Some(detail.clone()),
                _ => None,
            };
            // Waits for the worker to exit (or kills it), so everything it printed has been read.
            let why = no_answer(&mut w, &e, dir).await;
            match seen.or_else(|| w.deviation()) {
                Some(d) => {
                    let _ = w.kill().await;
                    Err(deviates(binary, format!("{d} (before answering its first command)")))
                }
                None => Err(fail(why)),
            }
        }
    }
}

/// The worker at `binary` deviates from the worker contract: `detail` says how.
fn deviates(binary: &Path, detail: String) -> HarnessError {
    HarnessError::WorkerContract { name: binary.display().to_string(), detail }
}

/// What the worker last printed: its last events and the last lines of its stderr.
fn last_output(w: &WorkerProc, dir: &Path) -> String {
    let out: Vec<String> = w
        .history
        .iter()
        .rev()
        .take(3)
        .map(|e| e.get("line").and_then(|l| l.as_str()).map(String::from).unwrap_or_else(|| e.to_string()))
        .collect();
    let err = tail(&dir.join("worker-preflight.stderr.log"), 3);
    match (out.is_empty(), err.is_empty()) {
        (true, true) => "it printed nothing".to_string(),
        _ => format!(
            "its last output: {} {}",
            out.join(" | "),
            if err.is_empty() { String::new() } else { format!("stderr: {err}") }
        ),
    }
}

/// Why the worker gave no answer (`e`): it exited (with its status), or it hangs (then it is
/// killed); with what it last printed.
async fn no_answer(w: &mut WorkerProc, e: &HarnessError, dir: &Path) -> String {
    match w.wait_exit(Duration::from_millis(500)).await {
        Ok(code) => {
            let seen = e.to_string();
            let seen = seen.trim_start_matches("worker preflight: ");
            let broke =
                if ["exited before", "write command", "flush command", "stdin closed"].iter().any(|p| seen.contains(p))
                {
                    String::new()
                } else {
                    format!(" (the harness saw: {seen})")
                };
            format!(
                "exited ({}){broke} before answering its first command; {}",
                code.map(|c| format!("status {c}")).unwrap_or_else(|| "killed by a signal".into()),
                last_output(w, dir)
            )
        }
        Err(_) => {
            let _ = w.kill().await;
            format!("did not answer its first command (metrics) within {FIRST_ANSWER:?} ({e}); {}", last_output(w, dir))
        }
    }
}
