//! Probe `flags`: the worker starts with every flag the harness passes (`--database-url`,
//! `--owner`, `--events`, `--secrets-dir`, `--write-path`, `--trace-id`, and `--tools-addr` for a
//! dispatcher) and says `ready`; and
//! `--list-mutants` ends promptly: status 0 with one `name<TAB>rule` line per mutant, or non-zero
//! for a build without mutants (`mutants` and `schedules` use it).

use std::time::Duration;

use fenceproof_harness::HarnessError;
use serde_json::json;

use super::Points;
use fenceproof_scenarios::ctx::{outcome, Ctx, STEP};

pub async fn run(ctx: &mut Ctx, p: &mut Points) -> Result<(), HarnessError> {
    let tools = ctx.spawn_tools().await?;
    let mut w = ctx.spawn_dispatcher("w", &tools).await?;
    let ready = w.wait_event("ready", STEP, |e| e["event"] == "ready").await;
    p.expect(
        "the worker starts with the flags the harness passes and says `ready`",
        ready.as_ref().is_ok_and(|e| outcome(e) == "ok"),
        match &ready {
            Ok(e) => format!("ready came with outcome `{}`", outcome(e)),
            Err(e) => format!("no ready event: {e}"),
        },
    );
    p.advisory_last();
    let m = w.request(json!({"cmd": "metrics"}), STEP).await?;
    p.outcome("metrics", &m, "ok");
    w.shutdown(STEP).await?;

    let out = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::process::Command::new(&ctx.worker_bin)
            .arg(fenceproof_harness::procs::flags::LIST_MUTANTS)
            .kill_on_drop(true)
            .output(),
    )
    .await;
    match out {
        Err(_) => p.advise("--list-mutants ends promptly", false, "--list-mutants did not end within 5 s"),
        Ok(Err(e)) => p.advise("--list-mutants ends promptly", false, format!("--list-mutants could not run: {e}")),
        Ok(Ok(o)) => {
            let text = String::from_utf8_lossy(&o.stdout).to_string();
            let bad: Vec<&str> = text.lines().filter(|l| l.split('\t').count() != 2).collect();
            p.advise(
                "--list-mutants prints `name<TAB>rule` lines and exits 0, or exits non-zero when the build has none",
                !o.status.success() || (!text.trim().is_empty() && bad.is_empty()),
                format!(
                    "--list-mutants exited {} printing {:?}",
                    o.status,
                    bad.first().copied().unwrap_or(text.trim())
                ),
            );
        }
    }
    Ok(())
}
