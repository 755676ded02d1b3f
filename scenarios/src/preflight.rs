//! Before the matrix: the worker under test is started once and must answer its first command
//! (`metrics`) within a bound. A worker that exits at once, never answers or answers garbage stops
//! the run here with one line naming its exit status and the last lines it printed, instead of
//! turning every experiment into a confusing FAIL or a 15-second ERROR each. What the worker
//! printed that breaks the worker contract (a line that is not JSON or longer than 1 MiB, an
//! answer outside the schema, a flood) is a deviation ([`HarnessError::WorkerContract`], exit 4);
//! no answer at all (it exited, or it hangs) is a harness error: no verdict (exit 3).

use std::path::Path;
use std::time::Duration;

use fenceproof_harness::procs::worker::{stderr_tail, WorkerProc, WorkerSpec, STDERR_LINES};
use fenceproof_harness::record::timeline::Timeline;
use fenceproof_harness::HarnessError;
use serde_json::json;

/// How long the worker has to answer its first command.
pub const FIRST_ANSWER: Duration = Duration::from_secs(15);

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
            launch: fenceproof_harness::procs::flags::Launch::Commands,
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

/// What the worker last printed on stdout, as a clause after its stderr's ("" when nothing).
fn events_said(w: &WorkerProc) -> String {
    let out: Vec<String> = w
        .history
        .iter()
        .rev()
        .take(3)
        .map(|e| e.get("line").and_then(|l| l.as_str()).map(String::from).unwrap_or_else(|| e.to_string()))
        .collect();
    if out.is_empty() {
        String::new()
    } else {
        format!("; its last output: {}", out.join(" | "))
    }
}

/// The last lines of the preflight worker's stderr, as a clause.
fn stderr_said(dir: &Path) -> String {
    match stderr_tail(&dir.join("worker-preflight.stderr.log"), STDERR_LINES) {
        t if t.is_empty() => "its stderr is empty".to_string(),
        t => format!("its stderr ends: {t}"),
    }
}

/// Why the worker gave no answer (`e`): it exited (with its status and the last lines of its
/// stderr, which the worker's own error carries), or it hangs (then it is killed); with what it
/// last printed.
async fn no_answer(w: &mut WorkerProc, e: &HarnessError, dir: &Path) -> String {
    let seen = e.to_string();
    let seen = seen.trim_start_matches("worker preflight: ").to_string();
    if seen.starts_with("exited (") {
        return format!("{seen}{}", events_said(w));
    }
    match w.wait_exit(Duration::from_millis(500)).await {
        Ok(code) => format!(
            "exited ({}) before answering its first command (the harness saw: {seen}); {}{}",
            code.map(|c| format!("status {c}")).unwrap_or_else(|| "killed by a signal".into()),
            stderr_said(dir),
            events_said(w)
        ),
        Err(HarnessError::Worker { detail, .. }) if detail.starts_with("exited (") => {
            format!("{detail} (the harness saw: {seen}){}", events_said(w))
        }
        Err(_) => {
            let _ = w.kill().await;
            format!(
                "did not answer its first command (metrics) within {FIRST_ANSWER:?} ({e}); {}{}",
                stderr_said(dir),
                events_said(w)
            )
        }
    }
}
