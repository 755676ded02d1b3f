//! Probe `sync_rep`: a COMMIT waiting for a synchronous standby that never answers is cancelled;
//! PostgreSQL then reports success with a WARNING although the commit is only local. The worker
//! must answer that write `outcome_unknown` (H-sync requires it). The probe names a standby that
//! does not exist in this session's own server, cancels the waiting backend, and restores the
//! setting on every path. It needs a superuser (a throwaway cluster has one); elsewhere it says so.

use fenceproof_harness::HarnessError;
use serde_json::json;

use super::{acquire, new_run, Points};
use fenceproof_scenarios::ctx::{Ctx, STEP};

const NOBODY: &str = "fenceproof_conformance_nobody";

async fn set_standby(ctx: &Ctx, names: Option<&str>) -> Result<(), HarnessError> {
    match names {
        Some(n) => {
            sqlx::query(&format!("ALTER SYSTEM SET synchronous_standby_names = '{n}'")).execute(&ctx.pool).await?
        }
        None => sqlx::query("ALTER SYSTEM RESET synchronous_standby_names").execute(&ctx.pool).await?,
    };
    sqlx::query("SELECT pg_reload_conf()").execute(&ctx.pool).await?;
    let want = names.unwrap_or("").to_string();
    fenceproof_harness::wait::until("the server to load synchronous_standby_names", STEP, || {
        let want = want.clone();
        async move {
            let now: String = sqlx::query_scalar("SHOW synchronous_standby_names").fetch_one(&ctx.pool).await?;
            Ok((now == want).then_some(()))
        }
    })
    .await
}

/// Wait until a commit of any session waits for the standby. `SHOW` answers with the reloaded
/// setting in this session at once, but whether commits wait is a flag a background process (the
/// checkpointer) sets when it processes the reload: a worker's pooled session could commit before
/// it. A harness transaction with a write commits; once its COMMIT is seen waiting on `SyncRep` the
/// setting is in force (that commit is then cancelled: local, as the probe's own will be).
async fn in_force_for_every_backend(ctx: &Ctx) -> Result<(), HarnessError> {
    use sqlx::Connection;
    fenceproof_harness::wait::until("a harness COMMIT to wait for the standby", STEP, || async {
        let opts = ctx.db_url.parse::<sqlx::postgres::PgConnectOptions>()?.application_name("fenceproof-syncrep-probe");
        let mut c = sqlx::PgConnection::connect_with(&opts).await?;
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut c).await?;
        sqlx::query("BEGIN").execute(&mut c).await?;
        // A write: a commit that wrote no WAL does not wait for a standby.
        sqlx::query("INSERT INTO fenceproof_syncrep_probe VALUES (1)").execute(&mut c).await?;
        let pool = ctx.pool.clone();
        let waiting = async move {
            fenceproof_harness::wait::until("the harness COMMIT on SyncRep", std::time::Duration::from_secs(2), || {
                let pool = pool.clone();
                async move {
                    let w: Option<i32> = sqlx::query_scalar(
                        "SELECT pid FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'SyncRep'",
                    )
                    .bind(pid)
                    .fetch_optional(&pool)
                    .await?;
                    Ok(w)
                }
            })
            .await
        };
        let in_force = tokio::select! {
            done = sqlx::query("COMMIT").execute(&mut c) => { done?; false }
            seen = waiting => seen.is_ok(),
        };
        if in_force {
            sqlx::query("SELECT pg_cancel_backend($1)").bind(pid).execute(&ctx.pool).await?;
        }
        Ok(in_force.then_some(()))
    })
    .await
}

pub async fn run(ctx: &mut Ctx, p: &mut Points) -> Result<(), HarnessError> {
    let superuser: bool =
        sqlx::query_scalar("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetch_one(&ctx.pool).await?;
    if !superuser {
        ctx.note("sync_rep: not judged (the harness's role is not a superuser here)");
        return Ok(());
    }
    let run_id = new_run(ctx, "conf-sync").await?;
    let mut w = ctx.spawn_worker("w", vec![]).await?;
    w.request(acquire(run_id), STEP).await?;
    w.request(json!({"cmd": "start"}), STEP).await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS fenceproof_syncrep_probe (n int)").execute(&ctx.pool).await?;
    set_standby(ctx, Some(NOBODY)).await?;
    in_force_for_every_backend(ctx).await?;
    let pool = ctx.pool.clone();
    let probe = async {
        let id = w.send(json!({"cmd": "save", "checkpoint": {"sync": 1}})).await?;
        let owner = w.owner.clone();
        let pid: i32 = fenceproof_harness::wait::until("the worker's COMMIT to wait for the standby", STEP, || {
            let owner = owner.clone();
            let pool = pool.clone();
            async move {
                let pid: Option<i32> = sqlx::query_scalar(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event = 'SyncRep' LIMIT 1",
                )
                .bind(owner)
                .fetch_optional(&pool)
                .await?;
                Ok(pid)
            }
        })
        .await?;
        sqlx::query("SELECT pg_cancel_backend($1)").bind(pid).execute(&pool).await?;
        w.reply(id, STEP).await
    }
    .await;
    set_standby(ctx, None).await?;
    let ev = probe?;
    p.outcome(
        "a save whose synchronous-replication wait was cancelled (success with a WARNING)",
        &ev,
        "outcome_unknown",
    );
    w.shutdown(STEP).await?;
    Ok(())
}
