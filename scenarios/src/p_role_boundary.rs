//! Experiment P-role — the database permission boundary of spec section 12 (not one of the letters
//! of section 11; `P` for permissions). The reference worker runs as `fenceproof_worker_login`, a
//! member of the `fenceproof_worker` role of migration 0002, and does a normal piece of work through
//! the fenced fp_* functions. Then the same login tries to write around them: direct UPDATE, INSERT,
//! DELETE, TRUNCATE, a row lock, disabling the oracle's triggers, and the same worker binary on its
//! direct write path. Every one must be refused with SQLSTATE 42501 and leave the tables exactly as
//! they were; the fp_* functions themselves must refuse a forged owner and a stale epoch; and the
//! privilege audit of the row's database (`fenceproof writers`) must find nothing.

use fenceproof_harness::check::Check;
use fenceproof_harness::db::{databases, privileges};
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::record::oracle;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use crate::ctx::{outcome, require_ok, Ctx, STEP, WORKER_LOGIN_EXISTS};
use crate::experiment::{Checks, Experiment, Judges, Need};

pub const TITLE: &str = "Permission boundary: the worker role writes only through the fenced functions";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "P-role",
    title: TITLE,
    section: "12",
    needs: &[Need::WorkerLogin],
    judges: Judges::Boundary,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

/// The names of its checks, in the order it makes them (the rule catalogue links rules to them); `WORKER_LOGIN_EXISTS` is `ctx`'s.
pub const REPLAN_REFUSED: &str = "re-planning a step with another request is refused";
pub const LOGIN_WITHOUT_PRIVILEGES: &str =
    "the worker login is not a superuser and has no write privilege on any protocol table";
pub const AUDIT_FINDS_NOTHING: &str = "the privilege audit of the row's database (`fenceproof writers`) finds nothing";
pub const COMMITS_FROM_LOGIN: &str =
    "the worker's commits (acquire, start, plan + intent, save) came from the worker login";
pub const ANY_DENIED: &str = "denied with 42501: *";
pub const DIRECT_PATH_REFUSED: &str = "the worker binary on its direct write path is refused (permission denied)";
pub const TRANSITION_REFUSES_FORGED_OWNER: &str = "fp_run_transition refuses a forged owner";
pub const TRANSITION_REFUSES_STALE_EPOCH: &str = "fp_run_transition refuses a stale epoch";
pub const RENEW_REFUSES_STALE_EPOCH: &str = "fp_lease_renew refuses a stale epoch";
pub const STATE_UNCHANGED: &str = "state unchanged: every protocol table is as it was before the attempts";
pub const NO_COMMIT_DURING_ATTEMPTS: &str = "the oracle recorded no commit during the attempts";
pub const RUN_ENDS_SUCCEEDED: &str = "the run ends succeeded";

/// The direct writes the worker role tries; each must be denied (SQLSTATE 42501).
const DIRECT_WRITES: &[(&str, &str)] = &[
    ("UPDATE agent_runs (forge a terminal state)", "UPDATE agent_runs SET status = 'succeeded', revision = revision + 1 WHERE run_id = $1"),
    ("UPDATE worker_leases (steal the lease)", "UPDATE worker_leases SET owner = 'intruder', epoch = epoch + 1 WHERE run_id = $1"),
    (
        "INSERT tool_operations (an unplanned side effect)",
        "INSERT INTO tool_operations (operation_id, run_id, step_id, effect_version, tool_name, request_digest, request_body, status)
         VALUES ('forged/' || $1::text, $1, 'forged', 1, 'idem', 'x', '{}', 'prepared')",
    ),
    ("DELETE tool_operations (erase the ledger)", "DELETE FROM tool_operations WHERE run_id = $1"),
    ("SELECT … FOR UPDATE on the lease (hold its row lock)", "SELECT 1 FROM worker_leases WHERE run_id = $1 FOR UPDATE"),
    ("TRUNCATE worker_leases", "TRUNCATE worker_leases CASCADE"),
    ("ALTER TABLE … DISABLE TRIGGER ALL (blind the oracle)", "ALTER TABLE agent_runs DISABLE TRIGGER ALL"),
];

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let Some(login) = ctx.worker_login.clone() else {
        ctx.check(Check::expect(
            WORKER_LOGIN_EXISTS,
            false,
            "this backend gives the harness no worker login (an external database): run P-role on a native cluster"
                .to_string(),
        ));
        return Ok(());
    };
    let err = |e: fenceproof_protocol::ProtocolError| HarnessError::Other(e.to_string());
    let run_id = runs::create_run(&ctx.pool, "task-p", json!({})).await.map_err(err)?;

    // The reference worker, as the worker role, does its work through the fp_* functions.
    let (mut w, epoch) = works_through_functions(ctx, run_id).await?;
    let role = databases::pool(&login, "fenceproof-role-probe", 1).await?;
    judge_login(ctx, &role, &w.owner).await?;
    judge_audit(ctx).await?;

    // The fault: writes around the boundary.
    let before = snapshot(&ctx.pool).await?;
    let mark = ctx.oracle_mark().await?;
    let denied = judge_direct_writes(ctx, &role, run_id).await?;
    judge_direct_write_path(ctx, &login, run_id).await?;
    judge_functions_fenced(ctx, &role, run_id, (&w.owner, epoch)).await?;
    let after = snapshot(&ctx.pool).await?;
    let after_mark = ctx.oracle_mark().await?;
    ctx.check(Check::expect(
        STATE_UNCHANGED,
        before == after,
        if before == after { "identical".to_string() } else { format!("before {before}\nafter {after}") },
    ));
    ctx.check(Check::equal(NO_COMMIT_DURING_ATTEMPTS, after_mark, mark));
    role.close().await;

    // The worker finishes normally through the functions.
    require_ok(&w.request(json!({"cmd": "succeed"}), STEP).await?, "succeed")?;
    require_ok(&w.request(json!({"cmd": "release"}), STEP).await?, "release")?;
    let state = oracle::run_state(&ctx.pool, run_id).await?;
    ctx.check(Check::equal(RUN_ENDS_SUCCEEDED, state.run["status"].as_str(), Some("succeeded")));
    let _rows = ctx.commits().await?;
    ctx.note(format!(
        "{denied}/{} direct writes denied (42501); worker ran as {}",
        DIRECT_WRITES.len(),
        databases::WORKER_LOGIN
    ));
    std::fs::write(
        ctx.dir.join("state_before_after.json"),
        serde_json::to_string_pretty(&json!({"before": before, "after": after})).expect("json"),
    )?;
    Ok(())
}

/// The reference worker acquires, starts, plans a step and saves through the fp_* functions;
/// planning the same step again with another request is refused. Returns it and its epoch.
async fn works_through_functions(ctx: &mut Ctx, run_id: Uuid) -> Result<(WorkerProc, i64), HarnessError> {
    let mut w = ctx.spawn_worker("w", vec![]).await?;
    let acq = w.request(json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 60_000, "heartbeat_ms": 20_000, "renew_timeout_ms": 2000}), STEP).await?;
    require_ok(&acq, "acquire")?;
    let epoch = acq["epoch"].as_i64().unwrap_or(-1);
    require_ok(&w.request(json!({"cmd": "start"}), STEP).await?, "start")?;
    let plan = json!({"cmd": "plan", "step_id": "s1", "tool": "idem", "request": {"amount": 5}});
    require_ok(&w.request(plan, STEP).await?, "plan")?;
    // Planning the same step again with another request is an intent mismatch, refused inside
    // fp_run_transition (SQLSTATE FP001) so that neither the checkpoint nor the intent commits.
    let again = json!({"cmd": "plan", "step_id": "s1", "tool": "idem", "request": {"amount": 6}});
    let mismatch = w.request(again, STEP).await?;
    ctx.check(Check::equal(REPLAN_REFUSED, outcome(&mismatch), "intent_mismatch"));
    require_ok(&w.request(json!({"cmd": "save", "checkpoint": {"step": 2}}), STEP).await?, "save")?;
    Ok((w, epoch))
}

/// The login (`role`) is the worker login, no superuser, with no write privilege on the
/// protocol's tables, and every commit of the worker `owner` came from it.
async fn judge_login(ctx: &mut Ctx, role: &PgPool, owner: &str) -> Result<(), HarnessError> {
    let (who, superuser): (String, bool) =
        sqlx::query_as("SELECT current_user::text, rolsuper FROM pg_roles WHERE rolname = current_user")
            .fetch_one(role)
            .await?;
    let privileges: Vec<(String, String)> = sqlx::query_as(
        "SELECT t, p FROM unnest(ARRAY['agent_tasks', 'agent_runs', 'worker_leases', 'tool_operations']) t,
                          unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) p
          WHERE has_table_privilege(current_user, t, p)",
    )
    .fetch_all(role)
    .await?;
    ctx.check(Check::expect(
        LOGIN_WITHOUT_PRIVILEGES,
        who == databases::WORKER_LOGIN && !superuser && privileges.is_empty(),
        format!("current_user {who}, superuser {superuser}, write privileges {privileges:?}"),
    ));
    let worker_commits: Vec<_> = ctx.commits().await?.into_iter().filter(|c| c.writer == owner).collect();
    let logins: std::collections::BTreeSet<&str> = worker_commits.iter().map(|c| c.login.as_str()).collect();
    ctx.check(Check::expect(
        COMMITS_FROM_LOGIN,
        worker_commits.len() >= 5 && logins.len() == 1 && logins.contains(databases::WORKER_LOGIN),
        format!("{} commits by {}, logged in as {logins:?}", worker_commits.len(), owner),
    ));
    Ok(())
}

/// The privilege audit of the row's database finds no way around the fp_* functions: no role but
/// the owner and superusers can write the tables (PUBLIC included, by column or through
/// membership), every SECURITY DEFINER function keeps a search_path ending in pg_temp, none is
/// PUBLIC's, and no schema CREATE or default privilege opens one later.
async fn judge_audit(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let audit = privileges::audit(&ctx.pool, &privileges::Scope::default()).await?;
    let lines: Vec<String> = audit.findings.iter().map(privileges::Finding::line).collect();
    ctx.check(Check::expect(
        AUDIT_FINDS_NOTHING,
        lines.is_empty(),
        if lines.is_empty() { format!("no finding in schema {}", audit.schema) } else { lines.join("\n") },
    ));
    Ok(())
}

/// The name of the check of one direct write (`denied with 42501: {what}`).
pub(crate) fn denied_check(what: &str) -> String {
    format!("denied with 42501: {what}")
}

/// Every direct write as the worker role must be denied with 42501. Returns how many were.
async fn judge_direct_writes(ctx: &mut Ctx, role: &PgPool, run_id: Uuid) -> Result<usize, HarnessError> {
    let mut denied = 0;
    for (what, sql) in DIRECT_WRITES {
        let q = sqlx::query(sql);
        let q = if sql.contains("$1") { q.bind(run_id) } else { q };
        let r = q.execute(role).await;
        let code = match &r {
            Err(sqlx::Error::Database(db)) => db.code().map(|c| c.to_string()),
            _ => None,
        };
        if code.as_deref() == Some("42501") {
            denied += 1;
        }
        ctx.check(Check::expect(
            denied_check(what),
            code.as_deref() == Some("42501"),
            match r {
                Ok(done) => format!("accepted, {} rows", done.rows_affected()),
                Err(e) => e.to_string(),
            },
        ));
    }
    Ok(denied)
}

/// The same binary on its direct write path, as the worker role (`login`): refused by the
/// database.
async fn judge_direct_write_path(ctx: &mut Ctx, login: &str, run_id: Uuid) -> Result<(), HarnessError> {
    let mut d = ctx
        .spawn_worker_at(
            "direct",
            &format!("worker-direct-{}", &Uuid::new_v4().simple().to_string()[..8]),
            login,
            vec!["--write-path".into(), "direct".into()],
        )
        .await?;
    let direct = d
        .request(
            json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 1000, "heartbeat_ms": 500, "renew_timeout_ms": 500}),
            STEP,
        )
        .await?;
    ctx.check(Check::expect(
        DIRECT_PATH_REFUSED,
        outcome(&direct) == "db_error" && direct.to_string().contains("permission denied"),
        direct.to_string(),
    ));
    d.request(json!({"cmd": "exit"}), STEP).await.ok();
    Ok(())
}

/// The functions themselves stay fenced: a forged owner and a stale epoch (below the worker
/// `owner`'s `epoch`) are refused.
async fn judge_functions_fenced(
    ctx: &mut Ctx,
    role: &PgPool,
    run_id: Uuid,
    (owner, epoch): (&str, i64),
) -> Result<(), HarnessError> {
    for (name, owner, ep) in
        [(TRANSITION_REFUSES_FORGED_OWNER, "intruder", epoch), (TRANSITION_REFUSES_STALE_EPOCH, owner, epoch - 1)]
    {
        let (answer,): (String,) = sqlx::query_as(
            "SELECT outcome FROM fp_run_transition($1, $2, $3, 4, 'running', 'succeeded', NULL,
                                                   NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
        )
        .bind(run_id)
        .bind(owner)
        .bind(ep)
        .fetch_one(role)
        .await?;
        ctx.check(Check::equal(name, answer.as_str(), "lease_lost"));
    }
    let renewed: Vec<(chrono::DateTime<chrono::Utc>,)> =
        sqlx::query_as("SELECT expires_at FROM fp_lease_renew($1, $2, $3, 600000)")
            .bind(run_id)
            .bind(owner)
            .bind(epoch - 1)
            .fetch_all(role)
            .await?;
    ctx.check(Check::equal(RENEW_REFUSES_STALE_EPOCH, renewed.len(), 0));
    Ok(())
}

/// Every row of the four protocol tables, as one JSON value.
async fn snapshot(pool: &PgPool) -> Result<Value, HarnessError> {
    Ok(sqlx::query_scalar(
        "SELECT jsonb_build_object(
           'agent_tasks', (SELECT coalesce(jsonb_agg(to_jsonb(t) ORDER BY task_id), '[]') FROM agent_tasks t),
           'agent_runs', (SELECT coalesce(jsonb_agg(to_jsonb(r) ORDER BY run_id), '[]') FROM agent_runs r),
           'worker_leases', (SELECT coalesce(jsonb_agg(to_jsonb(l) ORDER BY run_id), '[]') FROM worker_leases l),
           'tool_operations', (SELECT coalesce(jsonb_agg(to_jsonb(o) ORDER BY operation_id), '[]') FROM tool_operations o))",
    )
    .fetch_one(pool)
    .await?)
}

#[cfg(test)]
mod tests {
    use fenceproof_harness::check::rule::matches;

    use super::*;

    #[test]
    fn every_direct_write_check_matches_the_denied_pattern() {
        for (what, _) in DIRECT_WRITES {
            assert!(matches(ANY_DENIED, &denied_check(what)), "{what}");
        }
        assert!(!matches(ANY_DENIED, DIRECT_PATH_REFUSED));
    }
}
