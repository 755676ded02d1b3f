//! Experiment E-crash-commit — a crash between two durable steps of one command (spec §08, §09).
//! The worker reaches the server through its own wire proxy, which counts the commits of its
//! durable writes (run and outbox writes, not lease renewals) from the moment a command is sent,
//! and SIGKILLs the worker the moment the acknowledgement of the Nth has passed to it. The sweep
//! runs N = 1, 2, ... for each command until the command answers before its Nth commit (it made
//! fewer): `plan` (a request carrying a secret) and `dispatch` (claim, then result).
//!
//! After each crash a recovery does what the spec says recovery does, from what is durable only:
//! once the dead worker's lease (or claim) expired, a new worker takes the run over, a new
//! dispatcher reconciles and dispatches, and the run's owner advances on the operation's result.
//! The recovery does not plan again: the request that carried the secret died with the worker
//! (a takeover worker resumes the plan that committed, §08).
//!
//! Judged from evidence (final rows, the oracle, the tools' ledger; never the killed worker):
//! the committed intent's secret values reach the tool, the operation succeeds and the run
//! advances on it, and the tool creates at most one resource per operation.

use fenceproof_harness::check::crash_points::{self, CrashCase};
use fenceproof_harness::check::{invariants, Check};
use fenceproof_harness::faults::proxy::{patterns, CommitCrash, Proxy};
use fenceproof_harness::faults::{self, Injected};
use fenceproof_harness::procs::tools::ToolsProc;
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::record::ledger;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::ctx::{data, outcome, require_ok, Ctx, STEP};
use crate::experiment::{Checks, Experiment, Judges};
use crate::outbox_setup::plan_operation;

pub const TITLE: &str = "Worker killed right after each commit of a command; recovery finishes the step";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "E-crash-commit",
    title: TITLE,
    section: "11 E; 08, 09",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

/// The name of its check of the sweep itself (the rule catalogue links rules to it).
pub const SWEPT: &str = "the sweep killed the worker after every durable commit of plan and dispatch";

/// The sweep stops at this commit at the latest (a command making more is judged up to it).
const MAX_COMMITS: usize = 3;
/// The killed owner's lease: short, so the takeover comes quickly, and three renewal periods
/// long, so a loaded machine does not lose it before the plan.
const TTL_MS: i64 = 3000;
const HEARTBEAT_MS: u64 = 1000;
const CLAIM_TTL_MS: i64 = 500;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmd {
    Plan,
    Dispatch,
}

impl Cmd {
    fn name(self) -> &'static str {
        match self {
            Cmd::Plan => "plan",
            Cmd::Dispatch => "dispatch",
        }
    }
}

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let tools = ctx.spawn_tools().await?;
    let mut cases = Vec::new();
    let plan_commits = sweep(ctx, &tools, Cmd::Plan, &mut cases).await?;
    let dispatch_commits = sweep(ctx, &tools, Cmd::Dispatch, &mut cases).await?;
    if plan_commits == 0 || dispatch_commits == 0 {
        // The moment was never made: no verdict on the recovery.
        return Err(HarnessError::Other(format!(
            "no durable commit seen on the wire (plan: {plan_commits}, dispatch: {dispatch_commits}); \
             the proxy counts writes of agent_runs / tool_operations and the fp_* functions that make them"
        )));
    }
    ctx.check(Check::pass(
        SWEPT,
        format!("plan: killed after commit 1..={plan_commits}; dispatch: after commit 1..={dispatch_commits}"),
    ));
    ctx.check(crash_points::references_durable(&cases));
    ctx.check(crash_points::recovery_finishes(&cases));
    ctx.check(crash_points::at_most_once(&cases));
    let entries = ledger::entries(&tools.ledger)?;
    ctx.check(invariants::one_effect_per_operation(&entries, &["idem"]));
    let _rows = ctx.commits().await?;
    ctx.note(format!(
        "{} crash points (plan makes {plan_commits} durable commit(s), dispatch {dispatch_commits}); each recovered from durable state",
        cases.len()
    ));
    Ok(())
}

/// Crash the command after its 1st, 2nd, ... durable commit until it answers before the Nth;
/// answers how many commits it made (up to [`MAX_COMMITS`]).
async fn sweep(ctx: &mut Ctx, tools: &ToolsProc, cmd: Cmd, cases: &mut Vec<CrashCase>) -> Result<usize, HarnessError> {
    for n in 1..=MAX_COMMITS {
        let case = match cmd {
            Cmd::Plan => crash_plan(ctx, tools, n).await?,
            Cmd::Dispatch => crash_dispatch(ctx, tools, n).await?,
        };
        match case {
            Some(c) => cases.push(c),
            None => return Ok(n - 1),
        }
    }
    Ok(MAX_COMMITS)
}

/// Arm the crash after commit `n` on `w`'s proxy, send `command`, and wait for the crash or the
/// answer. `Ok(None)`: the worker was killed (and reaped); `Ok(Some(answer))`: it answered first.
async fn crash_or_answer(
    ctx: &Ctx,
    w: &mut WorkerProc,
    proxy: &Proxy,
    n: usize,
    command: Value,
) -> Result<Option<Value>, HarnessError> {
    let crash: Injected<CommitCrash> =
        faults::inject(proxy.crash_after_commit(patterns::DURABLE_STEP, n, w.pid, STEP)?, &ctx.timeline).await?;
    let id = w.send(command).await?;
    let answer = tokio::select! {
        biased;
        f = crash.fired(STEP) => { f?; None }
        a = w.reply(id, STEP) => Some(a),
    };
    if let Some(f) = crash.try_fired() {
        if !f.killed {
            return Err(HarnessError::Other("the crash fired but the worker was not a registered child".into()));
        }
        w.kill().await?;
        crash.heal().await?;
        return Ok(None);
    }
    crash.heal().await?;
    answer.transpose()
}

/// Plan a step whose request carries a secret, killed after durable commit `n` of the plan.
async fn crash_plan(ctx: &mut Ctx, tools: &ToolsProc, n: usize) -> Result<Option<CrashCase>, HarnessError> {
    let run_id = new_run(ctx, &format!("task-crash-plan-{n}")).await?;
    let (mut w, proxy) = ctx.spawn_worker_proxied(&format!("plan{n}"), vec![]).await?;
    let acquire = json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": TTL_MS, "heartbeat_ms": HEARTBEAT_MS, "renew_timeout_ms": HEARTBEAT_MS});
    require_ok(&w.request(acquire, STEP).await?, "acquire")?;
    // The 3 s lease can lapse before the start on a starved machine, as before the plan below.
    let started = w.request(json!({"cmd": "start"}), STEP).await?;
    ctx.require_ok_while_live(&started, "start", run_id).await?;
    let secret = format!("sk_crash_{}", Uuid::new_v4().simple());
    let request = json!({"size": n, "auth": {"$secret": {"name": "api-key", "value": secret}}});
    let plan = json!({"cmd": "plan", "step_id": "create", "tool": "idem", "request": request});
    if let Some(answer) = crash_or_answer(ctx, &mut w, &proxy, n, plan).await? {
        // The plan made fewer than n durable commits: the sweep of plan ends here. Its operation
        // is finished, so that no prepared operation is left for the next dispatcher to claim.
        // A 3 s lease kept by 1 s heartbeats can lapse on a starved machine: a refusal is judged
        // against the database clock (no verdict when the lease had lapsed there).
        ctx.require_ok_while_live(&answer, "plan", run_id).await?;
        let op = data(&answer)["operation_id"].as_str().unwrap_or_default().to_string();
        finish_step(ctx, tools, (&mut w, run_id), &op, &format!("plan{n}-finish")).await?;
        let released = w.request(json!({"cmd": "release"}), STEP).await?;
        ctx.require_ok_while_live(&released, "release", run_id).await?;
        w.shutdown(STEP).await?;
        return Ok(None);
    }
    drop(proxy);
    // Recovery: a new worker takes the run over once the dead one's lease expired.
    ctx.wait_lease_expired(run_id).await?;
    let mut owner = ctx.spawn_worker(&format!("plan{n}-takeover"), vec![]).await?;
    let acquire =
        json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 30_000, "heartbeat_ms": 2000, "renew_timeout_ms": 2000});
    require_ok(&owner.request(acquire, STEP).await?, "acquire")?;
    let case = recover(ctx, tools, &mut owner, run_id, Cmd::Plan, n, vec![secret]).await?;
    owner.request(json!({"cmd": "release"}), STEP).await?;
    owner.shutdown(STEP).await?;
    Ok(Some(case))
}

/// Dispatch a planned operation, the dispatcher killed after durable commit `n` of the dispatch.
async fn crash_dispatch(ctx: &mut Ctx, tools: &ToolsProc, n: usize) -> Result<Option<CrashCase>, HarnessError> {
    let run_id = new_run(ctx, &format!("task-crash-dispatch-{n}")).await?;
    let mut p = plan_operation(ctx, &format!("owner{n}"), run_id, "idem", true).await?;
    let (mut d, proxy) =
        ctx.spawn_worker_proxied(&format!("dispatch{n}"), crate::ctx::Launch::dispatcher(tools.addr)).await?;
    let dispatch = json!({"cmd": "dispatch", "claim_ttl_ms": CLAIM_TTL_MS, "call_timeout_ms": 5000, "limit": 1});
    let answered = crash_or_answer(ctx, &mut d, &proxy, n, dispatch).await?;
    drop(proxy);
    if let Some(answer) = answered {
        require_ok(&answer, "dispatch")?;
        d.shutdown(STEP).await?;
        p.worker.request(json!({"cmd": "release"}), STEP).await?;
        p.worker.shutdown(STEP).await?;
        return Ok(None);
    }
    let case = recover(ctx, tools, &mut p.worker, run_id, Cmd::Dispatch, n, vec![]).await?;
    p.worker.request(json!({"cmd": "release"}), STEP).await?;
    p.worker.shutdown(STEP).await?;
    Ok(Some(case))
}

async fn new_run(ctx: &Ctx, task: &str) -> Result<Uuid, HarnessError> {
    runs::create_run(&ctx.pool, task, json!({})).await.map_err(|e| HarnessError::Other(e.to_string()))
}

/// Finish the step from what is durable: a new dispatcher reconciles (after any claim expired),
/// dispatches and reconciles again, then `owner` (the run's lease holder) advances on the result.
/// The answers are kept as notes; the case is judged from the rows and the tools' ledger.
async fn recover(
    ctx: &mut Ctx,
    tools: &ToolsProc,
    owner: &mut WorkerProc,
    run_id: Uuid,
    cmd: Cmd,
    n: usize,
    secrets: Vec<String>,
) -> Result<CrashCase, HarnessError> {
    let op: Option<String> =
        sqlx::query_scalar("SELECT operation_id FROM tool_operations WHERE run_id = $1 ORDER BY operation_id LIMIT 1")
            .bind(run_id)
            .fetch_optional(&ctx.pool)
            .await?;
    let mut told = Vec::new();
    if let Some(op) = &op {
        if ctx.operation(op).await?["status"] == "dispatching" {
            ctx.wait_claim_expired(op).await?;
        }
        told = finish_step(ctx, tools, (&mut *owner, run_id), op, &format!("{}{n}-recovery", cmd.name())).await?;
    }
    ctx.note(format!("{} killed after commit {n}: recovery told {}", cmd.name(), told.join("; ")));
    judge_case(ctx, tools, owner, cmd, n, op, secrets).await
}

/// A new dispatcher `name` reconciles, dispatches and reconciles again, then `owner` advances on
/// `op`'s result; answers what each was told (`cmd=outcome (what it did)`).
async fn finish_step(
    ctx: &Ctx,
    tools: &ToolsProc,
    (owner, run_id): (&mut WorkerProc, Uuid),
    op: &str,
    name: &str,
) -> Result<Vec<String>, HarnessError> {
    let mut told = Vec::new();
    let mut d = ctx.spawn_dispatcher(name, tools).await?;
    for c in [
        json!({"cmd": "reconcile"}),
        json!({"cmd": "dispatch", "claim_ttl_ms": 5000, "limit": 10}),
        json!({"cmd": "reconcile"}),
    ] {
        let ev = d.request(c.clone(), STEP).await?;
        told.push(format!("{}={}{}", c["cmd"].as_str().unwrap_or("?"), outcome(&ev), brief(data(&ev))));
    }
    d.shutdown(STEP).await?;
    let ev = owner.request(json!({"cmd": "advance", "operation_id": op}), STEP).await?;
    told.push(format!("advance={}", outcome(&ev)));
    // An advance refused after the owner's heartbeat-kept lease lapsed on the database clock (a
    // starved heartbeat) is no verdict on the recovery, never a FAIL of it.
    if outcome(&ev) != "ok" && matches!(ctx.ok_while_live(&ev, "advance", run_id).await, Ok(false)) {
        return Err(HarnessError::Inconclusive(format!(
            "the owner's advance was answered {} after its lease lapsed on the database clock ({})",
            outcome(&ev),
            told.join("; ")
        )));
    }
    Ok(told)
}

/// The case as the evidence has it: the operation's final row, its created resources, and whether
/// `owner` committed a run write after the operation settled.
async fn judge_case(
    ctx: &Ctx,
    tools: &ToolsProc,
    owner: &WorkerProc,
    cmd: Cmd,
    n: usize,
    op: Option<String>,
    secrets: Vec<String>,
) -> Result<CrashCase, HarnessError> {
    let (mut created, mut status, mut advanced) = (Vec::new(), None, false);
    if let Some(op) = &op {
        let entries = ledger::entries(&tools.ledger)?;
        created = ledger::created_for(&entries, op).iter().map(|e| e.to_string()).collect();
        status = ctx.operation(op).await?["status"].as_str().map(str::to_string);
        let rows = ctx.commits().await?;
        let settled = rows
            .iter()
            .filter(|r| r.table_name == "tool_operations" && r.new_str("operation_id") == Some(op.as_str()))
            .filter(|r| r.new_str("status") == Some("succeeded"))
            .map(|r| r.seq)
            .min();
        advanced = settled
            .is_some_and(|s| rows.iter().any(|r| r.seq > s && r.table_name == "agent_runs" && r.writer == owner.owner));
    }
    Ok(CrashCase { command: cmd.name().into(), commit: n, operation_id: op, secrets, created, status, advanced })
}

/// What a dispatch or reconcile pass did, in a few words: ` (dispatched: succeeded)`,
/// ` (unknown 1, converged 1)`, or nothing.
fn brief(d: &Value) -> String {
    if let Some(list) = d.as_array() {
        let outcomes: Vec<&str> = list.iter().filter_map(|x| x["outcome"].as_str()).collect();
        return if outcomes.is_empty() { String::new() } else { format!(" (dispatched: {})", outcomes.join(", ")) };
    }
    let count = |k: &str| d[k].as_array().map_or(0, Vec::len);
    let parts: Vec<String> = [("unknown", "marked_unknown"), ("converged", "converged"), ("raised", "raised")]
        .iter()
        .filter(|(_, k)| count(k) > 0)
        .map(|(label, k)| format!("{label} {}", count(k)))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}
