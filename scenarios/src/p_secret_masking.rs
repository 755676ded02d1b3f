//! Experiment P-secret — ledger request bodies follow the masking policy (spec section 12). A
//! worker plans a call whose request marks an API key as secret; a dispatcher sends it. The tool
//! must receive the key (the side effect needs it), while the ledger table, the oracle, the
//! worker's events and logs and every other file of the experiment hold only the reference.

use fenceproof_harness::check::Check;
use fenceproof_harness::record::ledger;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::json;

use crate::ctx::{data, require_ok, Ctx, STEP};
use crate::experiment::{Checks, Experiment, Judges};

pub const TITLE: &str = "Secret fields of a request reach the tool but never the ledger table";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "P-secret",
    title: TITLE,
    section: "12",
    needs: &[],
    judges: Judges::Protocol,
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
pub const GENERATED_MASKED: &str =
    "generated bodies with secrets at any depth (arrays, nested objects, several, unicode names): the ledger holds only references";
pub const GENERATED_SENT: &str = "every secret of the generated bodies reached the tool";

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
    let op = plan_and_dispatch(&mut w, &mut d, "pay", request).await?;

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
    let mut values = generated_bodies(ctx, &mut w, &mut d, &tools).await?;
    values.push(secret);
    no_value_anywhere(ctx, &values).await?;

    // Nothing else the experiment wrote contains them either: events, logs, timeline, oracle dumps.
    w.request(json!({"cmd": "exit"}), STEP).await.ok();
    d.request(json!({"cmd": "exit"}), STEP).await.ok();
    ctx.timeline.save(&ctx.dir.join("timeline.jsonl"))?;
    let mut leaks = Vec::new();
    for v in &values {
        leaks.extend(files_containing(&ctx.dir, v, &[tools.ledger.clone(), ctx.secrets_dir()])?);
    }
    ctx.check(Check::expect(NO_FILE_CONTAINS_VALUE, leaks.is_empty(), format!("{leaks:?}")));
    // The store holds the value, readable by the worker's own user only (the contract: one file per
    // value, mode 0600): no file or folder in it grants anything to its group or to others.
    let open = world_readable(&ctx.secrets_dir())?;
    ctx.check(Check::expect(
        STORE_PRIVATE,
        open.is_empty(),
        if open.is_empty() { format!("{} checked", ctx.secrets_dir().display()) } else { open.join(", ") },
    ));
    let _rows = ctx.commits().await?;
    ctx.note(format!(
        "{op}: tool got the key, ledger row holds {{\"$secret\": \"api-key\"}}; {} secrets of {GENERATED} generated bodies masked at depth",
        values.len() - 1
    ));
    Ok(())
}

/// How many generated bodies the row plans (seeds 1..=GENERATED).
const GENERATED: u64 = 3;

/// Plan step `step` with `request`, then one dispatcher pass: the operation_id.
async fn plan_and_dispatch(
    w: &mut fenceproof_harness::procs::worker::WorkerProc,
    d: &mut fenceproof_harness::procs::worker::WorkerProc,
    step: &str,
    request: serde_json::Value,
) -> Result<String, HarnessError> {
    let plan = w.request(json!({"cmd": "plan", "step_id": step, "tool": "idem", "request": request}), STEP).await?;
    require_ok(&plan, "plan")?;
    let op = data(&plan)["operation_id"].as_str().unwrap_or_default().to_string();
    require_ok(&d.request(json!({"cmd": "dispatch"}), STEP).await?, "dispatch")?;
    Ok(op)
}

/// Bodies with several secrets at depth (arrays, objects in arrays, nested objects, unicode
/// names), each planned and dispatched: the ledger holds references only, the tool got every
/// value. Returns the values (for the leak checks).
async fn generated_bodies(
    ctx: &mut Ctx,
    w: &mut fenceproof_harness::procs::worker::WorkerProc,
    d: &mut fenceproof_harness::procs::worker::WorkerProc,
    tools: &fenceproof_harness::procs::tools::ToolsProc,
) -> Result<Vec<String>, HarnessError> {
    let (mut all, mut wrong, mut missing) = (Vec::new(), Vec::new(), Vec::new());
    for seed in 1..=GENERATED {
        let (body, values) = generated_body(seed);
        let op = plan_and_dispatch(w, d, &format!("gen{seed}"), body.clone()).await?;
        let row = ctx.operation(&op).await?;
        if row["request_body"] != masked(&body) {
            wrong.push(format!("{op}: ledger body {} where {} was due", row["request_body"], masked(&body)));
        }
        let entries = ledger::entries(&tools.ledger)?;
        let created = ledger::created_for(&entries, &op);
        let sent: String = created.iter().map(|e| e.to_string()).collect();
        missing.extend(values.iter().filter(|v| !sent.contains(v.as_str())).map(|_| format!("{op}: a value not sent")));
        all.extend(values);
    }
    ctx.check(Check::expect(
        GENERATED_MASKED,
        wrong.is_empty(),
        if wrong.is_empty() { format!("{GENERATED} bodies, {} secrets", all.len()) } else { wrong.join("; ") },
    ));
    ctx.check(Check::expect(
        GENERATED_SENT,
        missing.is_empty(),
        if missing.is_empty() { format!("{} values reached the tool", all.len()) } else { missing.join("; ") },
    ));
    Ok(all)
}

/// No row of the ledger, the runs or the oracle contains any of `values`.
async fn no_value_anywhere(ctx: &mut Ctx, values: &[String]) -> Result<(), HarnessError> {
    let mut hits = 0i64;
    for v in values {
        let n: i64 = sqlx::query_scalar(&format!(
            "SELECT (SELECT count(*) FROM tool_operations t WHERE strpos(t::text, $1) > 0)
                  + (SELECT count(*) FROM agent_runs r WHERE strpos(r::text, $1) > 0)
                  + (SELECT count(*) FROM {}.commits c WHERE strpos(c::text, $1) > 0)",
            ctx.oracle_schema
        ))
        .bind(v)
        .fetch_one(&ctx.pool)
        .await?;
        hits += n;
    }
    ctx.check(Check::equal(NO_ROW_CONTAINS_VALUE, hits, 0));
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

/// A request body generated from `seed`, with several secrets at depth: in arrays, in objects in
/// arrays, in nested objects, under unicode names. Returns the body and its secrets' values.
pub fn generated_body(seed: u64) -> (serde_json::Value, Vec<String>) {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut next = move || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 33) as usize
    };
    let names = ["ключ", "tök", "密钥", "🔑", "clé-é", "api key"];
    let mut values = Vec::new();
    let mut secret = |i: usize, pick: usize| {
        let value = format!("sk_gen_{}", uuid::Uuid::new_v4().simple());
        values.push(value.clone());
        json!({"$secret": {"name": format!("{}-{seed}-{i}", names[pick % names.len()]), "value": value}})
    };
    let (a, b, c) = (next(), next(), next());
    let body = json!({
        "amount": seed,
        "cards": [{"number": secret(0, a)}, {"plain": "not secret"}, secret(1, b)],
        "nested": {"deeper": {"list": [[secret(2, c)], {"k": secret(3, a + b)}]}},
        "headers": {"x-token": secret(4, b + c)},
    });
    (body, values)
}

/// `body` with every `{"$secret": {"name": N, "value": V}}` replaced by `{"$secret": N}`: what the
/// ledger must hold.
pub fn masked(body: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match body {
        Value::Object(m) if m.len() == 1 && m.get("$secret").is_some_and(|i| i.get("name").is_some()) => {
            json!({"$secret": m["$secret"]["name"]})
        }
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), masked(v))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(masked).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_body_has_secrets_at_depth_and_masks_to_references_only() {
        let (body, values) = generated_body(2);
        assert_eq!(values.len(), 5);
        let text = body.to_string();
        assert!(values.iter().all(|v| text.contains(v.as_str())));
        let m = masked(&body).to_string();
        assert!(values.iter().all(|v| !m.contains(v.as_str())), "{m}");
        assert_eq!(masked(&body)["cards"][2]["$secret"], body["cards"][2]["$secret"]["name"]);
        assert!(m.matches("\"$secret\"").count() == 5, "{m}");
    }
}
