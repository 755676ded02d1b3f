//! Experiment H — failover, judged against the deployment contract (spec sections 10 and 11).
//!
//! The harness builds its own primary + streaming standby (async, or with the standby named in
//! `synchronous_standby_names`) with the session's backend: two native clusters, or two containers
//! on a private Docker network. It runs a task to a known state, then cuts replication so the
//! standby stops receiving WAL: natively it SIGSTOPs the primary's walsender; with containers it
//! disconnects the primary from the replication network, a real cut in which the WAL still in
//! flight is never delivered. While replication is cut:
//! - async: the old owner releases, a new owner takes over (epoch + 1), plans a step, and the
//!   dispatcher really creates its remote resource and records `succeeded` — all acknowledged by
//!   the primary, none of it on the standby;
//! - sync: the owner's release waits for the standby (`SyncRep`); the harness cancels that wait,
//!   and PostgreSQL answers success with "committed locally, might not have been replicated" — the
//!   protocol must report it as outcome unknown, never success.
//!
//! Then the old primary is fenced (its whole process tree SIGKILLed, or `docker kill`), the
//! standby promoted, and
//! epoch, revision, ledger statuses and the tools' high-water are compared before and after. The
//! verdict is whether the outcome matches the contract: a contract that promises no acknowledged
//! loss fails when anything acknowledged is gone, naming the replication setting that allowed it.

use std::collections::BTreeMap;

use fenceproof_harness::check::evidence::shown;
use fenceproof_harness::check::Check;
use fenceproof_harness::contract::{Contract, ReplicationMode};
use fenceproof_harness::procs::tools::ToolsProc;
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::record::{ledger, oracle};
use fenceproof_harness::{wait, HarnessError};
use serde::Serialize;
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use crate::ctx::{data, outcome, require_ok, Ctx, STEP};
use crate::experiment::{Checks, Experiment, Judges, Need};

/// The rows' titles: the standby's replication mode, then the experiment.
pub const TITLE_ASYNC: &str =
    "Failover to an asynchronous standby: controlled promote, judged against the deployment contract";
pub const TITLE_SYNC: &str =
    "Failover to a synchronous standby: controlled promote, judged against the deployment contract";

/// Its registration: what it needs and what it judges.
pub const ASYNC: Experiment = Experiment {
    id: "H-async",
    title: TITLE_ASYNC,
    section: "11 H; 10",
    needs: &[Need::Standby(ReplicationMode::Async)],
    judges: Judges::Deployment,
    checks: Checks::NO_ANSWERS,
    operator_of: &[],
    run: |c| Box::pin(run(c, ReplicationMode::Async)),
};

/// Its registration: what it needs and what it judges.
pub const SYNC: Experiment = Experiment {
    id: "H-sync",
    title: TITLE_SYNC,
    section: "11 H; 10",
    needs: &[Need::Standby(ReplicationMode::Sync)],
    judges: Judges::Deployment,
    checks: Checks::NO_ANSWERS,
    operator_of: &[],
    run: |c| Box::pin(run(c, ReplicationMode::Sync)),
};

mod pair;
pub(crate) mod partition;
pub(crate) mod switchover;
pub(crate) use pair::patroni;

use pair::{Fence, Servers};

/// The names of its checks, in the order it makes them (the rule catalogue links rules to them).
pub const CONTAINER_GONE: &str = "the fenced old primary is gone: its container stopped, its port refuses connections";
pub const NO_PROCESS_LEFT: &str = "the fenced old primary has no process left (its stopped walsender included)";
pub const REFUSES_CONNECTIONS: &str = "the fenced old primary refuses connections";
pub const STALE_CANNOT_COMMIT: &str = "a worker still connected to the fenced primary cannot commit";
pub const NOTHING_LOST_WITHOUT_LAG: &str =
    "with no replication lag, nothing acknowledged is lost by the failover (either mode)";
pub const CANCELLED_WAIT_UNKNOWN: &str =
    "a commit whose synchronous wait was cancelled is reported as outcome unknown, not success";
pub const LOCAL_ONLY: &str = "that commit was local only: on the old primary, not after failover";
pub const CONTRACT_NO_LOSS: &str = "contract: acknowledged epochs and ledger transitions survive failover";
pub const CONTRACT_LOSS_REPORTED: &str = "contract: loss allowed, and reported";
pub const HIGH_WATER_KEPT: &str = "the tools' high-water never goes back";

/// What the database says at one moment.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct Snapshot {
    epoch: i64,
    owner: Option<String>,
    revision: i64,
    status: String,
    /// operation_id -> status
    operations: BTreeMap<String, String>,
}

async fn snapshot(pool: &PgPool, run_id: Uuid) -> Result<Snapshot, HarnessError> {
    let (epoch, owner): (i64, Option<String>) =
        sqlx::query_as("SELECT epoch, owner FROM worker_leases WHERE run_id = $1").bind(run_id).fetch_one(pool).await?;
    let (revision, status): (i64, String) = sqlx::query_as("SELECT revision, status FROM agent_runs WHERE run_id = $1")
        .bind(run_id)
        .fetch_one(pool)
        .await?;
    let ops: Vec<(String, String)> =
        sqlx::query_as("SELECT operation_id, status FROM tool_operations WHERE run_id = $1")
            .bind(run_id)
            .fetch_all(pool)
            .await?;
    Ok(Snapshot { epoch, owner, revision, status, operations: ops.into_iter().collect() })
}

/// Differences that mean an acknowledged state is gone.
fn losses(acked: &Snapshot, after: &Snapshot) -> Vec<String> {
    let mut lost = Vec::new();
    if after.epoch < acked.epoch {
        lost.push(format!("epoch {} -> {}", acked.epoch, after.epoch));
    }
    if after.revision < acked.revision {
        lost.push(format!("revision {} -> {}", acked.revision, after.revision));
    }
    for (op, st) in &acked.operations {
        match after.operations.get(op) {
            Some(now) if now == st => {}
            Some(now) => lost.push(format!("operation …{} {st} -> {now}", short(op))),
            None => lost.push(format!("operation …{} {st} -> missing", short(op))),
        }
    }
    lost
}

/// Operations acknowledged succeeded that really exist remotely but are no longer succeeded in
/// the ledger after the failover.
fn remote_forks(acked: &Snapshot, after: &Snapshot, tools: &ToolsProc) -> Vec<String> {
    acked
        .operations
        .iter()
        .filter(|(op, st)| *st == "succeeded" && after.operations.get(*op).map(String::as_str) != Some("succeeded"))
        .filter(|(op, _)| !ledger::created_for(&ledger::entries(&tools.ledger).unwrap_or_default(), op).is_empty())
        .map(|(op, _)| format!("…{} exists remotely but is not succeeded in the ledger", short(op)))
        .collect()
}

fn short(op: &str) -> &str {
    op.rsplit_once('/').map(|(a, _)| a.rsplit_once('/').map(|(_, s)| s).unwrap_or(a)).unwrap_or(op)
}

/// The tools' high-water: how many resources they created.
fn high_water(tools: &ToolsProc) -> Result<usize, HarnessError> {
    Ok(ledger::entries(&tools.ledger)?.iter().filter(|e| e["kind"] == "created").count())
}

async fn wait_caught_up(primary: &PgPool, standby: &PgPool) -> Result<(), HarnessError> {
    let lsn: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text").fetch_one(primary).await?;
    wait::until("the standby to replay the primary's WAL", STEP, || {
        let lsn = lsn.clone();
        async move {
            let done: bool = sqlx::query_scalar("SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)")
                .bind(&lsn)
                .fetch_one(standby)
                .await?;
            Ok(done.then_some(()))
        }
    })
    .await
}

/// The contract the row judges: the session's, when it is for this replication mode (and not
/// for Patroni, which the Patroni rows judge), else the default one of the mode.
fn contract_for(ctx: &Ctx, mode: ReplicationMode) -> Contract {
    match &ctx.contract {
        Some(c) if c.replication_mode() == Some(mode) && c.patroni().is_none() => (**c).clone(),
        _ if mode == ReplicationMode::Sync => Contract::default_sync(),
        _ => Contract::default_async(),
    }
}

/// The task's processes on the primary: the control plane, its owner A, the owner B that takes
/// over, and a dispatcher.
struct Task {
    run_id: Uuid,
    cp: WorkerProc,
    a: WorkerProc,
    b: WorkerProc,
    d: WorkerProc,
    acquire: Value,
}

/// What was acknowledged before the fence, on the old primary.
struct Acked {
    /// The run and its operations as the old primary had them when it was fenced.
    at_fence: Snapshot,
    /// What was acknowledged as success: in sync mode nothing new (the release was not a success).
    success: Snapshot,
    /// The sync release whose wait was cancelled: its outcome, its detail, and whether the old
    /// primary had released the lease.
    trap: Option<(String, String, bool)>,
}

/// Whether replication lags when the old primary goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lag {
    /// The standby stops receiving WAL first (the walsender SIGSTOPped, the network cut, a hook).
    Cut,
    /// No lag: everything acknowledged is on the standby (replayed) before the old primary goes;
    /// the story is the asynchronous one in both modes (every step acknowledged).
    None,
}

pub async fn run(ctx: &mut Ctx, mode: ReplicationMode) -> Result<(), HarnessError> {
    let contract = contract_for(ctx, mode);
    run_with(ctx, contract, mode, Lag::Cut).await
}

/// The fault before the fence: replication cut (what was done, the stopped walsender), or none.
async fn lag_fault(ctx: &Ctx, servers: &Servers, lag: Lag) -> Result<(&'static str, Option<i32>), HarnessError> {
    match lag {
        Lag::Cut => servers.pair.cut_replication(ctx, &servers.p_admin).await,
        Lag::None => Ok(("no lag: the standby replayed every acknowledged commit before the old primary went", None)),
    }
}

/// The story on the pair the contract makes (the harness's own, the team's through hooks, or a
/// Patroni cluster), judged against `contract`.
pub(crate) async fn run_with(
    ctx: &mut Ctx,
    contract: Contract,
    mode: ReplicationMode,
    lag: Lag,
) -> Result<(), HarnessError> {
    let mut servers = Servers::start(ctx, &contract, mode).await?;

    // A task in a known, replicated state: A owns it, one step planned and really executed.
    let tools = ctx.spawn_tools().await?;
    let mut task = start_task(ctx, &servers.url, &tools).await?;
    wait_caught_up(&servers.p_pool, &servers.s_pool).await?;
    let before = snapshot(&servers.p_pool, task.run_id).await?;
    let high_before = high_water(&tools)?;

    // Fault: the standby stops receiving WAL (natively: the primary's walsender is SIGSTOPped).
    let (fault, walsender) = lag_fault(ctx, &servers, lag).await?;
    let story = if lag == Lag::Cut { mode } else { ReplicationMode::Async };
    let acked = acknowledge_while_cut(ctx, &mut task, &servers, story, &before).await?;
    if lag == Lag::None {
        wait_caught_up(&servers.p_pool, &servers.s_pool).await?;
    }
    let high_acked = high_water(&tools)?;
    let positions = patroni::positions(&servers).await?;

    // Fence the old primary (under Patroni: the leader crashes), then promote the standby.
    servers.p_pool.close().await;
    servers.p_admin.close().await;
    let fence = servers.pair.fence(ctx, walsender).await?;
    judge_fence(ctx, &fence);
    let (n_pool, oracle_schema) = servers.pair.promote(ctx, &servers.s_pool).await?;
    ctx.timeline.record("harness", "promote", "standby", json!({}));
    let stale = task.b.request(json!({"cmd": "save", "checkpoint": {"after": "fence"}}), STEP).await?;
    ctx.check(Check::expect(
        STALE_CANNOT_COMMIT,
        outcome(&stale) != "ok",
        format!("its save answered {}", outcome(&stale)),
    ));
    let after = snapshot(&n_pool, task.run_id).await?;
    let high = (high_before, high_acked, high_water(&tools)?);
    let lost = losses(&acked.success, &after);
    let forks = remote_forks(&acked.success, &after, &tools);

    // Verdict against the contract (and, under Patroni, against Patroni's own bound).
    let evidence = judge_contract(ctx, (mode, lag, &contract), &acked, &after, &lost, &servers.actual);
    let manager = patroni::judge(ctx, &servers.pair, &n_pool, positions, &lost).await?;
    judge_high_water(ctx, high);
    let rows = oracle::commits_in(&n_pool, &oracle_schema).await?;
    std::fs::write(ctx.dir.join("oracle.json"), serde_json::to_string_pretty(&rows).expect("json"))?;
    ctx.invariants.control.push(task.cp.owner.clone());
    let record = json!({
        "contract": contract, "actual_settings": servers.actual, "fault": fault, "before": before, "acknowledged": acked.success, "on_old_primary_at_fence": acked.at_fence,
        "after": after, "lost": lost, "remote_forks": forks, "tools_high_water": {"before": high.0, "acknowledged": high.1, "after": high.2}, "manager": manager,
    });
    std::fs::write(ctx.dir.join("failover.json"), serde_json::to_string_pretty(&record).expect("json"))?;
    note_outcome(ctx, mode, (&acked.success, &after), high, &evidence, &forks);

    for w in [&mut task.a, &mut task.b, &mut task.d, &mut task.cp] {
        w.kill().await?;
    }
    servers.pair.drop_external_schemas(&servers.s_pool).await;
    n_pool.close().await;
    servers.s_pool.close().await;
    patroni::stop_and_judge(ctx, &mut servers.pair);
    servers.pair.stop_servers().await?;
    premise_held((mode, lag), fault, &lost)
}

/// Asynchronous replication cut before the acknowledged steps: the promoted standby must miss
/// some of them, or the fault never happened (a pause hook that paused nothing, a walsender that
/// was not the standby's). That is no verdict on anyone's rules: an ERROR that says so, not a FAIL.
fn premise_held((mode, lag): (ReplicationMode, Lag), fault: &str, lost: &[String]) -> Result<(), HarnessError> {
    if lag == Lag::Cut && mode == ReplicationMode::Async && lost.is_empty() {
        return Err(HarnessError::Other(format!(
            "the fault did not take effect ({fault}): the promoted standby holds every commit acknowledged after the cut, so nothing about losses can be judged; check that the cut stops the standby's WAL stream"
        )));
    }
    Ok(())
}

/// The row's one-line outcome in the report.
fn note_outcome(
    ctx: &mut Ctx,
    mode: ReplicationMode,
    (acked, after): (&Snapshot, &Snapshot),
    high: (usize, usize, usize),
    evidence: &str,
    forks: &[String],
) {
    ctx.note(format!(
        "{}: epoch/rev {}/{} acknowledged, {}/{} after promote; tools high-water {}→{}; {evidence}{}",
        mode.as_str(),
        acked.epoch,
        acked.revision,
        after.epoch,
        after.revision,
        high.1,
        high.2,
        if forks.is_empty() { String::new() } else { format!("; remote fork: {}", forks.join(", ")) }
    ));
}

/// The control plane creates the run on the primary at `url`; A acquires, starts and plans a
/// step, which the dispatcher really executes.
async fn start_task(ctx: &Ctx, url: &str, tools: &ToolsProc) -> Result<Task, HarnessError> {
    // Workers give up on a dead server quickly (the fenced primary never comes back).
    let fast = || vec!["--acquire-timeout-ms".to_string(), "1500".to_string()];
    let args = || crate::ctx::Start { launch: crate::ctx::Launch::dispatcher(tools.addr), extra: fast() };
    let id = || Uuid::new_v4().simple().to_string()[..8].to_string();
    let mut cp = ctx.spawn_worker_at("cp", &format!("control-plane-{}", id()), url, fast()).await?;
    let created = cp.request(json!({"cmd": "create_run", "task_id": "task-h"}), STEP).await?;
    require_ok(&created, "create_run")?;
    let run_id: Uuid = data(&created)["run_id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| HarnessError::Other("no run_id".into()))?;
    let mut a = ctx.spawn_worker_at("a", &format!("worker-a-{}", id()), url, fast()).await?;
    let b = ctx.spawn_worker_at("b", &format!("worker-b-{}", id()), url, fast()).await?;
    let mut d = ctx.spawn_worker_at("d", &format!("worker-d-{}", id()), url, args()).await?;
    let acquire =
        json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 60_000, "heartbeat_ms": 30_000, "renew_timeout_ms": 5000});
    require_ok(&a.request(acquire.clone(), STEP).await?, "A acquire")?;
    require_ok(&a.request(json!({"cmd": "start"}), STEP).await?, "A start")?;
    require_ok(
        &a.request(json!({"cmd": "plan", "step_id": "s1", "tool": "idem", "request": {"n": 1}}), STEP).await?,
        "A plan",
    )?;
    require_ok(&d.request(json!({"cmd": "dispatch", "claim_ttl_ms": 30_000}), STEP).await?, "dispatch")?;
    Ok(Task { run_id, cp, a, b, d, acquire })
}

/// While replication is cut: async, the old owner releases, B takes over, plans a step and the
/// dispatcher executes it, all acknowledged; sync, A's release waits for the standby, and the
/// harness cancels that wait. `before` is the state before the cut.
async fn acknowledge_while_cut(
    ctx: &Ctx,
    task: &mut Task,
    servers: &Servers,
    mode: ReplicationMode,
    before: &Snapshot,
) -> Result<Acked, HarnessError> {
    let trap = match mode {
        ReplicationMode::Async => {
            require_ok(&task.a.request(json!({"cmd": "release"}), STEP).await?, "A release")?;
            require_ok(&task.b.request(task.acquire.clone(), STEP).await?, "B takeover")?;
            require_ok(
                &task
                    .b
                    .request(json!({"cmd": "plan", "step_id": "s2", "tool": "idem", "request": {"n": 2}}), STEP)
                    .await?,
                "B plan",
            )?;
            require_ok(&task.d.request(json!({"cmd": "dispatch", "claim_ttl_ms": 30_000}), STEP).await?, "dispatch")?;
            None
        }
        ReplicationMode::Sync => Some(cancel_sync_release(ctx, task, servers).await?),
    };
    let at_fence = snapshot(&servers.p_pool, task.run_id).await?;
    let success = if mode == ReplicationMode::Sync { before.clone() } else { at_fence.clone() };
    Ok(Acked { at_fence, success, trap })
}

/// The release waits for the synchronous standby, which hears nothing: cancel the wait. Returns
/// the release's outcome, its detail, and whether the old primary released the lease.
async fn cancel_sync_release(
    ctx: &Ctx,
    task: &mut Task,
    servers: &Servers,
) -> Result<(String, String, bool), HarnessError> {
    let id = task.a.send(json!({"cmd": "release"})).await?;
    let owner = task.a.owner.clone();
    let p_admin = &servers.p_admin;
    let pid = wait::until("A's release to wait for the synchronous standby", STEP, || {
        let p = p_admin.clone();
        let owner = owner.clone();
        async move {
            let pid: Option<i32> = sqlx::query_scalar(
                "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event = 'SyncRep'",
            )
            .bind(&owner)
            .fetch_optional(&p)
            .await?;
            Ok(pid)
        }
    })
    .await?;
    ctx.timeline.record("harness", "observed", "database", json!({"waiting_in": "SyncRep", "pid": pid}));
    sqlx::query("SELECT pg_cancel_backend($1)").bind(pid).execute(p_admin).await?;
    ctx.timeline.record("harness", "cancel_backend", "database", json!({"pid": pid}));
    let answer = task.a.reply(id, STEP).await?;
    let on_primary = snapshot(&servers.p_pool, task.run_id).await?;
    Ok((outcome(&answer).to_string(), answer["detail"].as_str().unwrap_or("").to_string(), on_primary.owner.is_none()))
}

/// The old primary is gone once fenced: no process, no container, no connection.
fn judge_fence(ctx: &mut Ctx, fence: &Fence) {
    ctx.check(match fence {
        Fence::Container { gone, id } => Check::expect(CONTAINER_GONE, *gone, format!("container {id}")),
        Fence::Native { gone, pgid, walsender } => {
            Check::expect(NO_PROCESS_LEFT, *gone, format!("postmaster {}, walsender {}", shown(pgid), shown(walsender)))
        }
        Fence::External { refused, url } => Check::expect(REFUSES_CONNECTIONS, *refused, url.clone()),
        Fence::Crashed { gone, killed } => {
            Check::expect(NO_PROCESS_LEFT, *gone, format!("the leader crashed: pids {killed:?} SIGKILLed"))
        }
    });
}

/// The fault's outcome (sync: the cancelled wait is reported unknown and was local only) and
/// the contract's promise about losses. Returns the evidence of the contract's check.
fn judge_contract(
    ctx: &mut Ctx,
    (mode, lag, contract): (ReplicationMode, Lag, &Contract),
    acked: &Acked,
    after: &Snapshot,
    lost: &[String],
    actual: &str,
) -> String {
    match (lag, mode) {
        (Lag::None, _) => ctx.check(Check::expect(
            NOTHING_LOST_WITHOUT_LAG,
            lost.is_empty(),
            format!("lost: {lost:?} (the standby had replayed every acknowledged commit)"),
        )),
        // The loss is the fault's premise, not a rule: see `premise_held`.
        (Lag::Cut, ReplicationMode::Async) => {}
        (Lag::Cut, ReplicationMode::Sync) => {
            let (o, detail, released_on_primary) = acked.trap.clone().unwrap_or_default();
            ctx.check(Check::expect(
                CANCELLED_WAIT_UNKNOWN,
                o == "outcome_unknown" && detail.contains("replicat"),
                format!("release answered {o}: {detail}"),
            ));
            ctx.check(Check::expect(
                LOCAL_ONLY,
                released_on_primary && after.owner.is_some(),
                format!("old primary released: {released_on_primary}; new primary owner {}", shown(&after.owner)),
            ));
        }
    }
    let evidence = if lost.is_empty() {
        "nothing acknowledged was lost".to_string()
    } else {
        let ssn_empty = actual.contains("synchronous_standby_names = ''");
        format!(
            "lost {}; the deployment replicates {} ({actual})",
            lost.join(", "),
            if ssn_empty { "asynchronously" } else { "synchronously" }
        )
    };
    if contract.replication.as_ref().is_some_and(|r| r.acknowledged_epochs_survive_failover) {
        ctx.check(Check::expect(CONTRACT_NO_LOSS, lost.is_empty(), evidence.clone()));
    } else {
        ctx.check(Check::pass(CONTRACT_LOSS_REPORTED, evidence.clone()));
    }
    evidence
}

/// The tools' high-water (before the cut, acknowledged, after the failover) never goes back.
fn judge_high_water(ctx: &mut Ctx, (before, acked, after): (usize, usize, usize)) {
    ctx.check(Check::expect(
        HIGH_WATER_KEPT,
        after >= acked,
        format!("{before} before, {acked} acknowledged, {after} after"),
    ));
}
