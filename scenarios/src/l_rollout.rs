//! Experiment L-rollout — mixed write paths during rollout (spec §13). A legacy worker that still
//! writes the run rows directly (a login with table privileges, no lease check in its statement)
//! runs beside a fenced worker.
//!
//! Phase *coexisting*: the legacy writer's UPDATE commits while the fenced worker holds the lease;
//! the oracle shows the rule "only the current lease holder commits run state" broken. That FAIL is
//! the phase's known risk (§13: adding fields is not a safety upgrade), so the row requires it and
//! reports it with its evidence. The fenced worker's next save then meets a revision it never saw.
//! The inspection (`fenceproof writers`) lists the legacy role as a direct writer.
//!
//! The revoke step: the legacy role loses INSERT, UPDATE, DELETE and TRUNCATE on the four tables.
//!
//! Phase *fenced*: the inspection no longer lists it; its UPDATE is refused with SQLSTATE 42501;
//! the fenced worker carries on (save, succeed, release) and every global invariant holds over the
//! phase's commits. The legacy role is dropped on every path.

use fenceproof_harness::check::evidence::shown;
use fenceproof_harness::check::{invariants, Check};
use fenceproof_harness::db::{databases, writers};
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::json;
use sqlx::PgPool;

use crate::ctx::{outcome, require_ok, Ctx, CONTROL, LEGAL_STEP_CHECK, STEP};
use crate::experiment::{Checks, Experiment, Judges, Need};

pub const TITLE: &str = "Rollout: a legacy direct writer beside fenced workers, before and after the revoke (§13)";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "L-rollout",
    title: TITLE,
    section: "13",
    needs: &[Need::LegacyLogin],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

/// The legacy writer's application_name (its commits carry it in the oracle).
pub const LEGACY_WRITER: &str = "legacy-writer";

/// The names of its checks, in the order it makes them (the rule catalogue links rules to them).
pub const LEGACY_LISTED: &str = "the inspection lists the legacy role as a direct writer while it keeps its grants";
pub const BYPASS_COMMITS: &str =
    "coexisting phase, the known risk of §13: the legacy writer's direct UPDATE commits around the lease";
pub const NO_DIRECT_WRITER_LEFT: &str =
    "after the revoke no role but the owner and superusers can write the protocol's tables directly";
pub const LEGACY_REFUSED: &str = "after the revoke the legacy writer's UPDATE is refused with 42501";
// Its fenced phase ends with the legal-step check (`ctx::LEGAL_STEP_CHECK`).

const LEGACY_UPDATE: &str =
    "UPDATE agent_runs SET checkpoint = $2, revision = revision + 1, updated_at = clock_timestamp()
  WHERE run_id = $1";

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let role = format!("fp_legacy_{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let schema: String = sqlx::query_scalar("SELECT current_schema()::text").fetch_one(&ctx.pool).await?;
    sqlx::raw_sql(&format!(
        "CREATE ROLE {role} LOGIN PASSWORD '{}';
         GRANT USAGE ON SCHEMA {schema} TO {role};
         GRANT SELECT, INSERT, UPDATE, DELETE ON {tables} TO {role};",
        databases::WORKER_PASSWORD,
        schema = schema,
        tables = writers::TABLES.join(", "),
    ))
    .execute(&ctx.pool)
    .await?;
    let r = phases(ctx, &role).await;
    // Heal: the role goes, whatever happened.
    sqlx::raw_sql(&format!("DROP OWNED BY {role}; DROP ROLE {role};")).execute(&ctx.pool).await?;
    r
}

async fn phases(ctx: &mut Ctx, role: &str) -> Result<(), HarnessError> {
    ctx.environment.push(LEGACY_WRITER.to_string());
    let legacy = databases::pool(&databases::url_as(&ctx.db_url, role)?, LEGACY_WRITER, 1).await?;
    let run_id =
        runs::create_run(&ctx.pool, "task-l", json!({})).await.map_err(|e| HarnessError::Other(e.to_string()))?;
    let mut a = ctx.spawn_worker("a", vec![]).await?;
    let acquire =
        json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 60_000, "heartbeat_ms": 20_000, "renew_timeout_ms": 2000});
    require_ok(&a.request(acquire, STEP).await?, "A acquire")?;
    require_ok(&a.request(json!({"cmd": "start"}), STEP).await?, "A start")?;
    require_ok(&a.request(json!({"cmd": "save", "checkpoint": {"phase": "coexisting"}}), STEP).await?, "A save")?;

    // Phase coexisting.
    let mark2 = coexisting(ctx, &legacy, &mut a, role, run_id).await?;

    // The revoke step of §13.
    sqlx::raw_sql(&format!("REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON {} FROM {role}", writers::TABLES.join(", ")))
        .execute(&ctx.pool)
        .await?;
    ctx.timeline.record("harness", "revoke", "database", json!({ "role": role }));

    // Phase fenced.
    let code = fenced(ctx, legacy, &mut a, run_id).await?;
    require_ok(&a.request(json!({"cmd": "release"}), STEP).await?, "A release")?;
    a.shutdown(STEP).await?;
    ctx.invariants.after_seq = Some(mark2);
    ctx.note(format!(
        "revoked: legacy UPDATE refused ({}); A saved and succeeded; the rules hold",
        code.unwrap_or_default()
    ));
    Ok(())
}

/// While the legacy role keeps its grants, the inspection lists it, and its direct UPDATE
/// commits around A's lease: the rule "only the current lease holder commits run state" is
/// broken, as the phase's known risk requires. Returns the oracle's mark at the phase's end.
async fn coexisting(
    ctx: &mut Ctx,
    legacy: &PgPool,
    a: &mut WorkerProc,
    role: &str,
    run_id: uuid::Uuid,
) -> Result<i64, HarnessError> {
    let listed = writers::direct_writers(&ctx.pool, None).await?;
    let legacy_listed = listed.iter().find(|w| w.role == role).cloned();
    ctx.check(Check::expect(
        LEGACY_LISTED,
        legacy_listed.as_ref().is_some_and(|w| w.is_bypass() && w.grants.contains(&"UPDATE agent_runs".to_string())),
        shown(legacy_listed.as_ref().map(writer)),
    ));
    let mark = ctx.oracle_mark().await?;
    let wrote = sqlx::query(LEGACY_UPDATE).bind(run_id).bind(json!({"legacy": 1})).execute(legacy).await;
    let a_next = a.request(json!({"cmd": "save", "checkpoint": {"phase": "after-bypass"}}), STEP).await?;
    let mark2 = ctx.oracle_mark().await?;
    let coexisting: Vec<_> = ctx.commits().await?.into_iter().filter(|r| r.seq > mark && r.seq <= mark2).collect();
    let holder = invariants::only_lease_holder_commits(&coexisting, &[CONTROL]);
    ctx.check(Check::expect(
        BYPASS_COMMITS,
        wrote.as_ref().is_ok_and(|w| w.rows_affected() == 1) && !holder.passed(),
        format!(
            "legacy UPDATE: {}; rule \"{}\": {} ({})",
            match &wrote {
                Ok(w) => format!("{} row committed", w.rows_affected()),
                Err(e) => e.to_string(),
            },
            holder.name,
            if holder.passed() { "held" } else { "FAIL, as expected in this phase" },
            holder.evidence
        ),
    ));
    ctx.note(format!(
        "coexisting: the legacy UPDATE committed around A's lease (rule broken, expected); A's next save: {}",
        outcome(&a_next)
    ));
    Ok(mark2)
}

/// A direct writer as a person reads it: its role, what it is and what it may write.
fn writer(w: &writers::DirectWriter) -> String {
    format!(
        "{} (login {}, superuser {}, owner {}; grants {})",
        w.role,
        w.can_login,
        w.superuser,
        w.owner,
        fenceproof_harness::check::evidence::listed(&w.grants)
    )
}

/// After the revoke no role can write directly, the legacy UPDATE is refused with 42501, and A
/// carries on. Returns the SQLSTATE the legacy UPDATE got.
async fn fenced(
    ctx: &mut Ctx,
    legacy: PgPool,
    a: &mut WorkerProc,
    run_id: uuid::Uuid,
) -> Result<Option<String>, HarnessError> {
    let listed = writers::direct_writers(&ctx.pool, None).await?;
    let still: Vec<&writers::DirectWriter> = listed.iter().filter(|w| w.is_bypass()).collect();
    ctx.check(Check::expect(
        NO_DIRECT_WRITER_LEFT,
        still.is_empty(),
        shown(still.iter().map(|w| writer(w)).collect::<Vec<_>>()),
    ));
    let refused = sqlx::query(LEGACY_UPDATE).bind(run_id).bind(json!({"legacy": 2})).execute(&legacy).await;
    let code = match &refused {
        Err(sqlx::Error::Database(db)) => db.code().map(|c| c.to_string()),
        _ => None,
    };
    let said = match &refused {
        Ok(done) => format!("the legacy UPDATE went through ({} row(s) changed)", done.rows_affected()),
        Err(e) => format!("the legacy UPDATE was refused ({}): {e}", shown(code.as_deref())),
    };
    ctx.check(Check::expect(LEGACY_REFUSED, code.as_deref() == Some("42501"), said));
    legacy.close().await;
    let current: i64 = sqlx::query_scalar("SELECT revision FROM agent_runs WHERE run_id = $1")
        .bind(run_id)
        .fetch_one(&ctx.pool)
        .await?;
    let save = a
        .request(json!({"cmd": "save", "checkpoint": {"phase": "fenced"}, "expected_revision": current}), STEP)
        .await?;
    let done = a.request(json!({"cmd": "succeed", "expected_revision": current + 1}), STEP).await?;
    ctx.check(Check::expect(
        LEGAL_STEP_CHECK,
        outcome(&save) == "ok" && outcome(&done) == "ok",
        format!("A's save at revision {current}: {}; succeed: {}", outcome(&save), outcome(&done)),
    ));
    Ok(code)
}
