//! Experiment P-secret — ledger request bodies follow the masking policy (spec section 12). A
//! worker plans a call whose request marks an API key as secret; a dispatcher sends it. The tool
//! must receive the key (the side effect needs it), while the ledger table, the oracle, the
//! worker's events and logs and every other file of the experiment hold only the reference.

use fenceproof_harness::check::{invariants, Check};
use fenceproof_harness::record::ledger;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::json;

use crate::ctx::{data, require_ok, Ctx, CONTROL, STEP};
use crate::experiment::{Checks, Experiment, Judges};

pub const TITLE: &str = "Secret fields of a request reach the tool but never the ledger table";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "P-secret",
    title: TITLE,
    section: "12",
    needs: &[],
    judges: Judges::Boundary,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

/// The names of its checks (the rule catalogue links rules to them).
pub const TOOL_GOT_SECRET: &str = "the tool received the secret value (the call needs it)";
pub const LEDGER_HOLDS_REFERENCE: &str = "the ledger row's request body holds the reference, not the value";
pub const OPERATION_SUCCEEDED: &str = "the operation succeeded";
pub const NO_ROW_CONTAINS_VALUE: &str = "no row of the ledger, the runs or the oracle contains the value";
pub const NO_FILE_CONTAINS_VALUE: &str =
    "no file of the experiment except the tools' ledger and the secret store contains the value";
pub const STORE_PRIVATE: &str = "the secret store grants nothing to group or others (files 0600)";

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let secret = format!("sk_live_{}", uuid::Uuid::new_v4().simple());
    let err = |e: fenceproof_protocol::ProtocolError| HarnessError::Other(e.to_string());
    let run_id = runs::create_run(&ctx.pool, "task-p-secret", json!({})).await.map_err(err)?;
    let tools = ctx.spawn_tools().await?;
    let mut w = ctx.spawn_worker("w", vec![]).await?;
    let mut d = ctx.spawn_dispatcher("d", &tools).await?;

    let acquire =
        json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 60_000, "heartbeat_ms": 20_000, "renew_timeout_ms": 2000});
    require_ok(&w.request(acquire, STEP).await?, "acquire")?;
    require_ok(&w.request(json!({"cmd": "start"}), STEP).await?, "start")?;
    let request = json!({"amount": 7, "auth": {"$secret": {"name": "api-key", "value": secret}}});
    let plan = w.request(json!({"cmd": "plan", "step_id": "pay", "tool": "idem", "request": request}), STEP).await?;
    require_ok(&plan, "plan")?;
    let op = data(&plan)["operation_id"].as_str().unwrap_or_default().to_string();
    require_ok(&d.request(json!({"cmd": "dispatch"}), STEP).await?, "dispatch")?;

    // The remote side effect really carried the secret.
    let entries = ledger::entries(&tools.ledger)?;
    let created = ledger::created_for(&entries, &op);
    ctx.check(Check::expect(
        TOOL_GOT_SECRET,
        created.len() == 1 && created[0].to_string().contains(&secret),
        format!("{} created entries for {op}", created.len()),
    ));

    // The ledger table holds the reference only, and the operation settled.
    let row = ctx.operation(&op).await?;
    ctx.check(Check::equal(
        LEDGER_HOLDS_REFERENCE,
        row["request_body"].clone(),
        json!({"amount": 7, "auth": {"$secret": "api-key"}}),
    ));
    ctx.check(Check::equal(OPERATION_SUCCEEDED, row["status"].as_str(), Some("succeeded")));
    let hits: i64 = sqlx::query_scalar(&format!(
        "SELECT (SELECT count(*) FROM tool_operations t WHERE strpos(t::text, $1) > 0)
              + (SELECT count(*) FROM agent_runs r WHERE strpos(r::text, $1) > 0)
              + (SELECT count(*) FROM {}.commits c WHERE strpos(c::text, $1) > 0)",
        ctx.oracle_schema
    ))
    .bind(&secret)
    .fetch_one(&ctx.pool)
    .await?;
    ctx.check(Check::equal(NO_ROW_CONTAINS_VALUE, hits, 0));

    // Nothing else the experiment wrote contains it either: events, logs, timeline, oracle dumps.
    w.request(json!({"cmd": "exit"}), STEP).await.ok();
    d.request(json!({"cmd": "exit"}), STEP).await.ok();
    ctx.timeline.save(&ctx.dir.join("timeline.jsonl"))?;
    let leaks = files_containing(&ctx.dir, &secret, &[tools.ledger.clone(), ctx.secrets_dir()])?;
    ctx.check(Check::expect(NO_FILE_CONTAINS_VALUE, leaks.is_empty(), format!("{leaks:?}")));
    // The store holds the value, readable by the worker's own user only (the contract: one file per
    // value, mode 0600): no file or folder in it grants anything to its group or to others.
    let open = world_readable(&ctx.secrets_dir())?;
    ctx.check(Check::expect(
        STORE_PRIVATE,
        open.is_empty(),
        if open.is_empty() { format!("{} checked", ctx.secrets_dir().display()) } else { open.join(", ") },
    ));
    let rows = ctx.commits().await?;
    ctx.checks.extend(invariants::all(&rows, &[CONTROL]));
    ctx.note(format!("{op}: tool got the key, ledger row holds {{\"$secret\": \"api-key\"}}"));
    Ok(())
}

/// Files under `dir` (recursively) whose bytes contain `needle`, skipping the `allowed` paths.
fn files_containing(
    dir: &std::path::Path,
    needle: &str,
    allowed: &[std::path::PathBuf],
) -> Result<Vec<String>, HarnessError> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let p = entry?.path();
            if allowed.iter().any(|a| p.starts_with(a)) {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else if std::fs::read(&p)?.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                found.push(p.display().to_string());
            }
        }
    }
    Ok(found)
}

/// The files under `dir` (recursively) whose mode lets group or others read or write them, each as
/// `path (mode)`.
fn world_readable(dir: &std::path::Path) -> Result<Vec<String>, HarnessError> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.permissions().mode() & 0o066 != 0 {
                out.push(format!("{} ({:o})", entry.path().display(), meta.permissions().mode() & 0o777));
            }
        }
    }
    Ok(out)
}
