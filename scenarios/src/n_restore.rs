//! Experiment N-restore — a restore from an old backup while workers from after the backup still run
//! (spec §10: before dispatch resumes, resolve stale workers, epochs, the ledger and remote forks).
//!
//! The harness builds a server of its own, in the session's backend (a native cluster, or a
//! container whose restored data folder is bind-mounted into a new container on the same port). Worker A acquires the run (epoch 1), saves and plans
//! `op1`; then a base backup is taken (pg_basebackup). After the backup, A is SIGSTOPped; once its
//! lease expires B takes over (epoch 2), saves, and a dispatcher really executes `op1`; B plans and
//! the dispatcher executes `op2`. The tools' ledger holds both side effects; the database knows B's
//! term. The oracle is read out, and the server is restored to the backup: epoch 1, `op1` prepared,
//! `op2` unknown to it, while A (paused) and B (live) still believe in their terms.
//!
//! Hold: the restored server admits no worker (natively it listens only on its private socket; in a
//! container its pg_hba admits only the operator's login). The
//! operator's recovery (`protocol::restore::recover`) runs there: every lease freed with its epoch
//! raised above anything handed out since the backup, `op1` settled from the remote history, `op2`
//! (a fork: the restored ledger never saw it) registered `unknown` under its operation_id. Then the server listens again and the story resumes: C acquires and saves, A
//! is SIGCONTed and both A and B try everything; a fresh dispatcher runs; C succeeds.
//!
//! Judged from the oracle (before and after the restore), the restored ledger and the tools'
//! ledger: no worker commits during the hold; every term after the restore is above every epoch
//! handed out before it; nothing of A or B commits after it; every remote side effect is settled,
//! registered unknown or reported before dispatch resumes; no side effect is created twice; the global invariants hold
//! over the history after the recovery. The operator mutant `restore-skips-recovery` reopens the
//! restored database as it is.

use std::collections::{BTreeMap, BTreeSet};

use fenceproof_harness::check::{invariants, restore, Check};
use fenceproof_harness::db::databases;
use fenceproof_harness::db::restorable::Restorable;
use fenceproof_harness::procs::tools::ToolsProc;
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::record::{ledger, oracle};
use fenceproof_harness::{wait, HarnessError};
use fenceproof_protocol::mutant::Mutant;
use fenceproof_protocol::restore::{recover, RemoteHistory, RestoreReport, DEFAULT_EPOCH_MARGIN};
use fenceproof_protocol::runs;
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::ctx::{data, outcome, require_ok, stale_attempts, Ctx, CONTROL, STEP};
use crate::experiment::{Checks, Experiment, Judges, Need};

pub const TITLE: &str = "Restore from an old backup while workers from after it still run (§10)";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "N-restore",
    title: TITLE,
    section: "10",
    needs: &[Need::OwnServer],
    judges: Judges::Protocol,
    checks: Checks::NO_ANSWERS,
    operator_of: &[Mutant::RestoreSkipsRecovery],
    run: |c| Box::pin(run(c)),
};

/// The names of its own check (the rule catalogue links rules to it); the rest are `check::restore`'s.
pub const BOTH_EXECUTED_AFTER_BACKUP: &str = "both intents were really executed after the backup (tools' ledger)";

/// The tool every side effect goes through: it does not deduplicate, so a second dispatch of the
/// same intent is a second real resource.
const TOOL: &str = "plain";

/// Whether the session runs the operator mutant that skips the recovery.
fn skips_recovery(ctx: &Ctx) -> bool {
    ctx.worker_args.windows(2).any(|w| w[0] == "--mutant" && w[1] == Mutant::RestoreSkipsRecovery.name())
}

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let log = ctx.dir.join("server-n.log");
    let mut server = match (&ctx.container_image, ctx.pg_bin.clone()) {
        (Some(image), _) => Restorable::start_container(image, &log).await?,
        (None, Some(bin)) => Restorable::start_native(bin, &log).await?,
        (None, None) => {
            return Err(HarnessError::Other(
                "N-restore builds, backs up and restores a server of its own from the machine's PostgreSQL binaries; none found (--pg-bin)".into(),
            ))
        }
    };
    let r = story(ctx, &mut server).await;
    server.stop().await;
    r
}

async fn story(ctx: &mut Ctx, server: &mut Restorable) -> Result<(), HarnessError> {
    databases::create_template(server.backend()?).await?;
    let url = databases::create_from_template(server.backend()?, "n").await?;
    let pool = databases::pool(&url, CONTROL, 4).await?;
    if let Some(patch) = &ctx.sql_patch {
        sqlx::raw_sql(patch).execute(&pool).await?;
    }
    let tools = ctx.spawn_tools().await?;
    let run_id = runs::create_run(&pool, "task-n", json!({})).await.map_err(|e| HarnessError::Other(e.to_string()))?;

    // Before the backup: A's term, a checkpoint and an intent.
    let (mut a, op1) = a_plans(ctx, (&url, &pool), run_id).await?;
    server.base_backup().await?;
    ctx.timeline.record("harness", "base_backup", "database", json!({"epoch": 1, "op1": op1}));

    // After the backup: A paused, B's term, both intents really executed.
    let paused = a.pause().await?;
    wait_lease_expired(&pool, run_id).await?;
    let (mut b, executed) = b_executes(ctx, (&url, &tools), run_id, &op1).await?;
    let before = oracle::commits(&pool).await?;
    std::fs::write(ctx.dir.join("oracle-before-restore.json"), serde_json::to_string_pretty(&before).expect("json"))?;
    pool.close().await;

    // Fault: the server is restored to the backup, held from the workers.
    let operator_url = server.restore_held("n").await?;
    ctx.timeline.record("harness", "restore", "database", json!({"hold": true}));
    let recovery = recover_held(ctx, &operator_url, &tools).await?;

    // Heal: the server listens again; dispatch resumes.
    server.reopen(&operator_url).await?;
    ctx.timeline.record("harness", "reopen", "database", json!({}));
    let pool = databases::pool(&url, CONTROL, 4).await?;
    let at_reopen: BTreeMap<String, String> =
        sqlx::query_as::<_, (String, String)>("SELECT operation_id, status FROM tool_operations")
            .fetch_all(&pool)
            .await?
            .into_iter()
            .collect();
    let (mut c, current) = c_takes_over(ctx, &url, &pool, run_id).await?;
    a.resume(paused).await?;
    let told = stale_told(&mut a, &mut b, current).await?;
    let dispatched = c_completes(ctx, (&url, &tools), &mut c).await?;
    let stale = vec![a.owner.clone(), b.owner.clone()];
    a.shutdown(STEP).await?;
    b.shutdown(STEP).await?;

    // Checks.
    let restored_history = oracle::commits(&pool).await?;
    let saved = serde_json::to_string_pretty(&restored_history).expect("json");
    std::fs::write(ctx.dir.join("oracle-after-restore.json"), &saved)?;
    // The row's history is the restored server's (the session database saw none of it): the
    // runner's trace validation and coverage read it as `oracle.json`.
    std::fs::write(ctx.dir.join("oracle.json"), &saved)?;
    let after: Vec<_> = restored_history.into_iter().filter(|r| r.seq > recovery.recovered_mark).collect();
    ctx.check(restore::dispatch_held(&recovery.hold_rows, &[CONTROL]));
    ctx.check(restore::epochs_above_before(&before, &after, &[CONTROL]));
    ctx.check(restore::stale_writers_silent(&after, &stale));
    ctx.check(restore::remote_reconciled(&executed, &at_reopen, (&recovery.report.registered, &recovery.report.forks)));
    let entries = ledger::entries(&tools.ledger)?;
    ctx.check(invariants::one_effect_per_operation(&entries, &[TOOL]));
    ctx.invariants.after_seq = Some(recovery.recovered_mark);
    let lease: (i64, Option<String>) = sqlx::query_as("SELECT epoch, owner FROM worker_leases WHERE run_id = $1")
        .bind(run_id)
        .fetch_one(&pool)
        .await?;
    pool.close().await;
    let report = &recovery.report;
    ctx.note(format!(
        "restored to epoch 1 with op1 prepared; recovery: floor {}, {} corrected, {} fork(s) registered unknown, {} reported; C ended at epoch {}; {}; dispatch after: {}",
        report.epoch_floor,
        report.corrected.len(),
        report.registered.len(),
        report.forks.len(),
        lease.0,
        told.join("; "),
        outcome(&dispatched)
    ));
    Ok(())
}

/// Workers give up on a dead server quickly.
fn fast() -> Vec<String> {
    vec!["--acquire-timeout-ms".to_string(), "1500".to_string()]
}

/// A dispatcher's start: as [`fast`], reaching the tools.
fn with_tools(tools: &ToolsProc) -> crate::ctx::Start {
    crate::ctx::Start { launch: crate::ctx::Launch::dispatcher(tools.addr), extra: fast() }
}

/// A fresh owner id for worker `n`.
fn owner(n: &str) -> String {
    format!("worker-{n}-{}", &Uuid::new_v4().simple().to_string()[..8])
}

/// A's term before the backup: acquire (epoch 1), start, save, plan `op1`. Returns A and `op1`.
/// A's lease is short (it must lapse soon after A's pause) and kept by A's heartbeat: a step
/// refused after it lapsed on the database clock (a heartbeat starved on a loaded machine) is no
/// verdict, never a FAIL.
async fn a_plans(ctx: &Ctx, (url, pool): (&str, &PgPool), run_id: Uuid) -> Result<(WorkerProc, String), HarnessError> {
    let mut a = ctx.spawn_worker_at("a", &owner("a"), url, fast()).await?;
    let acquire_a =
        json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 3000, "heartbeat_ms": 1000, "renew_timeout_ms": 1000});
    require_ok(&a.request(acquire_a, STEP).await?, "A acquire")?;
    let start = a.request(json!({"cmd": "start"}), STEP).await?;
    ctx.require_ok_while_live_on(pool, &start, "A start", run_id).await?;
    let save = a.request(json!({"cmd": "save", "checkpoint": {"by": "a"}}), STEP).await?;
    ctx.require_ok_while_live_on(pool, &save, "A save", run_id).await?;
    let plan1 = a.request(json!({"cmd": "plan", "step_id": "s1", "tool": TOOL, "request": {"n": 1}}), STEP).await?;
    ctx.require_ok_while_live_on(pool, &plan1, "A plan op1", run_id).await?;
    let op1 = data(&plan1)["operation_id"].as_str().unwrap_or_default().to_string();
    Ok((a, op1))
}

/// B's term after the backup: B takes over (epoch 2) and saves, a dispatcher really executes
/// `op1`, B plans `op2` and the dispatcher executes it. Returns B and the operations the tools'
/// ledger shows executed.
async fn b_executes(
    ctx: &mut Ctx,
    (url, tools): (&str, &ToolsProc),
    run_id: Uuid,
    op1: &str,
) -> Result<(WorkerProc, BTreeSet<String>), HarnessError> {
    let mut b = ctx.spawn_worker_at("b", &owner("b"), url, fast()).await?;
    let acquire_b =
        json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 60_000, "heartbeat_ms": 30_000, "renew_timeout_ms": 2000});
    require_ok(&b.request(acquire_b, STEP).await?, "B acquire")?;
    require_ok(&b.request(json!({"cmd": "save", "checkpoint": {"by": "b"}}), STEP).await?, "B save")?;
    let mut d = ctx.spawn_worker_at("d", &owner("d"), url, with_tools(tools)).await?;
    require_ok(&d.request(json!({"cmd": "dispatch", "claim_ttl_ms": 30_000}), STEP).await?, "dispatch op1")?;
    let plan2 = b.request(json!({"cmd": "plan", "step_id": "s2", "tool": TOOL, "request": {"n": 2}}), STEP).await?;
    require_ok(&plan2, "B plan op2")?;
    let op2 = data(&plan2)["operation_id"].as_str().unwrap_or_default().to_string();
    require_ok(&d.request(json!({"cmd": "dispatch", "claim_ttl_ms": 30_000}), STEP).await?, "dispatch op2")?;
    d.shutdown(STEP).await?;
    let executed: BTreeSet<String> = ledger::entries(&tools.ledger)?
        .iter()
        .filter(|e| e["kind"] == "created")
        .filter_map(|e| e["operation_id"].as_str().map(str::to_string))
        .collect();
    ctx.check(Check::expect(
        BOTH_EXECUTED_AFTER_BACKUP,
        executed.contains(op1) && executed.contains(&op2),
        format!("executed: {executed:?}"),
    ));
    Ok((b, executed))
}

/// What the operator's recovery on the held server did: its report, the oracle's mark after it,
/// and every commit made during the hold.
struct Recovery {
    report: RestoreReport,
    recovered_mark: i64,
    hold_rows: Vec<oracle::CommitRow>,
}

/// The operator's recovery (`protocol::restore::recover`) on the restored server while it is
/// held at `operator_url` (skipped by the operator mutant).
async fn recover_held(ctx: &mut Ctx, operator_url: &str, tools: &ToolsProc) -> Result<Recovery, HarnessError> {
    let held = databases::pool(operator_url, CONTROL, 2).await?;
    let restored_mark = max_seq(&held).await?;
    let report = if skips_recovery(ctx) {
        ctx.note("operator mutant: the restored database reopens without the recovery");
        RestoreReport::default()
    } else {
        let remote = RemoteHistory::from_ledger(&ledger::entries(&tools.ledger)?, |_| true);
        let report = recover(&held, &remote, DEFAULT_EPOCH_MARGIN)
            .await
            .map_err(|e| HarnessError::Other(format!("the recovery failed: {e}")))?;
        std::fs::write(ctx.dir.join("restore-report.json"), serde_json::to_string_pretty(&report).expect("json"))?;
        report
    };
    ctx.timeline.record("harness", "recovered", "database", json!({"report": report}));
    let recovered_mark = max_seq(&held).await?;
    let hold_rows: Vec<_> = oracle::commits(&held)
        .await?
        .into_iter()
        .filter(|c| c.seq > restored_mark && c.seq <= recovered_mark)
        .collect();
    held.close().await;
    Ok(Recovery { report, recovered_mark, hold_rows })
}

/// After the reopen C acquires and saves. Returns C and the run's revision then.
async fn c_takes_over(ctx: &Ctx, url: &str, pool: &PgPool, run_id: Uuid) -> Result<(WorkerProc, i64), HarnessError> {
    let mut c = ctx.spawn_worker_at("c", &owner("c"), url, fast()).await?;
    let acquire_c =
        json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 60_000, "heartbeat_ms": 30_000, "renew_timeout_ms": 2000});
    require_ok(&c.request(acquire_c, STEP).await?, "C acquire after the restore")?;
    require_ok(&c.request(json!({"cmd": "save", "checkpoint": {"by": "c"}}), STEP).await?, "C save")?;
    let current: i64 =
        sqlx::query_scalar("SELECT revision FROM agent_runs WHERE run_id = $1").bind(run_id).fetch_one(pool).await?;
    Ok((c, current))
}

/// A and B, from before the restore, try everything at the run's `current` revision: what each
/// was told, as `name: label=outcome …`.
async fn stale_told(a: &mut WorkerProc, b: &mut WorkerProc, current: i64) -> Result<Vec<String>, HarnessError> {
    let mut told = Vec::new();
    for w in [a, b] {
        let attempts = stale_attempts(w, current).await?;
        told.push(format!(
            "{}: {}",
            w.name,
            attempts.iter().map(|(l, o)| format!("{l}={o}")).collect::<Vec<_>>().join(" ")
        ));
    }
    Ok(told)
}

/// A fresh dispatcher runs, then C succeeds and releases. Returns the dispatch's answer.
async fn c_completes(
    ctx: &Ctx,
    (url, tools): (&str, &ToolsProc),
    c: &mut WorkerProc,
) -> Result<serde_json::Value, HarnessError> {
    let mut d2 = ctx.spawn_worker_at("d2", &owner("d2"), url, with_tools(tools)).await?;
    let dispatched = d2.request(json!({"cmd": "dispatch", "claim_ttl_ms": 30_000}), STEP).await?;
    require_ok(&dispatched, "dispatch after the restore")?;
    d2.shutdown(STEP).await?;
    let done = c.request(json!({"cmd": "succeed"}), STEP).await?;
    require_ok(&done, "C succeed")?;
    require_ok(&c.request(json!({"cmd": "release"}), STEP).await?, "C release")?;
    c.shutdown(STEP).await?;
    Ok(dispatched)
}

/// The remote history as the tools' own ledger tells it.
async fn max_seq(pool: &PgPool) -> Result<i64, HarnessError> {
    Ok(sqlx::query_scalar(&format!("SELECT coalesce(max(seq), 0) FROM {}.commits", oracle::DEFAULT_SCHEMA))
        .fetch_one(pool)
        .await?)
}

async fn wait_lease_expired(pool: &PgPool, run_id: Uuid) -> Result<(), HarnessError> {
    wait::until("A's lease to expire on the database clock", STEP, || async move {
        let done: bool =
            sqlx::query_scalar("SELECT expires_at <= clock_timestamp() FROM worker_leases WHERE run_id = $1")
                .bind(run_id)
                .fetch_one(pool)
                .await?;
        Ok(done.then_some(()))
    })
    .await
}
