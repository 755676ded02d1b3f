//! Probe `control`: the control-plane process (the same `--worker-bin`, owner id
//! `control-plane-…`, the schema owner's connection). `create_run` creates the task when it is new,
//! the run (`pending`) and its lease row in one transaction and makes it the task's active run;
//! it refuses while the task's active run is live, and creates a new run once it has ended.
//! `cancel` ends a live run and cancels its operations still `prepared`.

use std::collections::BTreeSet;

use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::HarnessError;
use serde_json::json;

use super::{acquire, run_row, Points};
use fenceproof_scenarios::ctx::{data, outcome, Ctx, STEP};

const TASK: &str = "conf-control";

pub async fn run(ctx: &mut Ctx, p: &mut Points) -> Result<(), HarnessError> {
    let mut cp = ctx.spawn_control_plane().await?;
    let task = TASK;
    let Some(run_id) = create_run(ctx, p, &mut cp).await? else {
        return Ok(());
    };
    let mut w = cancel(ctx, p, &mut cp, run_id).await?;
    let next = cp.request(json!({"cmd": "create_run", "task_id": task}), STEP).await?;
    let next_id: Option<uuid::Uuid> = data(&next)["run_id"].as_str().and_then(|s| s.parse().ok());
    p.expect(
        "create_run of a task whose run has ended (the task exists) creates a new run with a new run_id",
        outcome(&next) == "ok" && next_id.is_some_and(|n| n != run_id),
        format!("create_run after the cancel answered `{}` with data {}", outcome(&next), data(&next)),
    );
    cp.shutdown(STEP).await?;
    w.shutdown(STEP).await?;
    Ok(())
}

/// create_run of a new task: the task, a pending run and a free lease row in one transaction;
/// refused while the run is live. The new run, or `None` when there is none to go on with.
async fn create_run(ctx: &Ctx, p: &mut Points, cp: &mut WorkerProc) -> Result<Option<uuid::Uuid>, HarnessError> {
    let task = TASK;
    let mark = ctx.oracle_mark().await?;
    let made = cp.request(json!({"cmd": "create_run", "task_id": task}), STEP).await?;
    if !p.outcome("create_run of a new task", &made, "ok") {
        return Ok(None);
    }
    let run_id: Option<uuid::Uuid> = data(&made)["run_id"].as_str().and_then(|s| s.parse().ok());
    let Some(run_id) = run_id else {
        p.expect("create_run answers data.run_id", false, format!("create_run answered data {}", data(&made)));
        return Ok(None);
    };
    let active: Option<(Option<uuid::Uuid>,)> =
        sqlx::query_as("SELECT active_run_id FROM agent_tasks WHERE task_id = $1")
            .bind(task)
            .fetch_optional(&ctx.pool)
            .await?;
    let lease: Option<(Option<String>, i64)> =
        sqlx::query_as("SELECT owner, epoch FROM worker_leases WHERE run_id = $1")
            .bind(run_id)
            .fetch_optional(&ctx.pool)
            .await?;
    let status = run_row(ctx, run_id).await.map(|r| r.0).unwrap_or_else(|_| "missing".into());
    p.expect(
        "create_run makes the task, a `pending` run and a free lease row (epoch 0), the run the task's active one",
        active == Some((Some(run_id),)) && status == "pending" && lease == Some((None, 0)),
        format!("after create_run: task active run {active:?}, run {status}, lease row {lease:?}"),
    );
    let rows: Vec<_> = ctx.commits().await?.into_iter().filter(|r| r.seq > mark).collect();
    let xids: BTreeSet<&str> = rows.iter().map(|r| r.xid.as_str()).collect();
    let tables: BTreeSet<&str> = rows.iter().map(|r| r.table_name.as_str()).collect();
    p.expect(
        "create_run writes task, run and lease in one transaction",
        xids.len() == 1 && tables.contains("agent_runs") && tables.contains("worker_leases"),
        format!("create_run committed {} change(s) of {tables:?} in {} transaction(s)", rows.len(), xids.len()),
    );
    let live = cp.request(json!({"cmd": "create_run", "task_id": task}), STEP).await?;
    p.expect(
        "create_run while the task's active run is live is refused",
        outcome(&live) != "ok",
        "create_run while the task's active run is live answered `ok`",
    );
    p.outcome("create_run while the task's active run is live", &live, "active_run_live");
    p.advisory_last();

    Ok(Some(run_id))
}

/// A prepared operation on the run, then cancel: the run and its prepared operation cancelled,
/// and a second cancel refused. The worker that planned it.
async fn cancel(
    ctx: &Ctx,
    p: &mut Points,
    cp: &mut WorkerProc,
    run_id: uuid::Uuid,
) -> Result<WorkerProc, HarnessError> {
    // A prepared operation on the run, then cancel.
    let mut w = ctx.spawn_worker("w", vec![]).await?;
    w.request(acquire(run_id), STEP).await?;
    w.request(json!({"cmd": "start"}), STEP).await?;
    let plan =
        w.request(json!({"cmd": "plan", "step_id": "mail", "tool": "plain", "request": {"to": "x"}}), STEP).await?;
    let op = data(&plan)["operation_id"].as_str().unwrap_or_default().to_string();
    let cancelled = cp.request(json!({"cmd": "cancel", "run_id": run_id}), STEP).await?;
    if p.outcome("cancel of a running run", &cancelled, "ok") {
        let (status, revision, _) = run_row(ctx, run_id).await?;
        p.expect("cancel moves the run to `cancelled`", status == "cancelled", format!("after cancel: run {status}"));
        p.advise(
            "cancel answers the run's new revision in data.revision",
            data(&cancelled)["revision"] == json!(revision),
            format!("cancel answered data {}; the run is at revision {revision}", data(&cancelled)),
        );
        let op_status = ctx.operation(&op).await?["status"].clone();
        p.expect(
            "cancel also cancels the run's operations still `prepared`",
            op_status == "cancelled",
            format!("after cancel the run's prepared operation is {op_status}"),
        );
    }
    let again = cp.request(json!({"cmd": "cancel", "run_id": run_id}), STEP).await?;
    p.outcome("cancel of an ended run", &again, "invalid_state");
    Ok(w)
}
