//! W-control: the control plane of the worker under test (its `create_run` and `cancel`) at the
//! boundaries of spec §04, §07 and §09.3. A cancel changes the named run and that run's prepared
//! intents only, and never a finished run. Two retries of one task racing (both held on the task
//! row by the harness's share lock, then released together) leave the task with one live run.

use std::time::Duration;

use fenceproof_harness::check::evidence::shown;
use fenceproof_harness::check::Check;
use fenceproof_harness::faults::row_hold::RowHold;
use fenceproof_harness::HarnessError;
use serde_json::json;
use uuid::Uuid;

use fenceproof_harness::procs::worker::WorkerProc;

use crate::ctx::{data, outcome, require_ok, Ctx, CONTROL, STEP};
use crate::experiment::{Checks, Experiment, Judges};
use crate::tags::{self, tagged};

pub const TITLE: &str =
    "The worker's control plane at its boundaries: cancel of one run among others, of a finished run, racing retries";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "W-control",
    title: TITLE,
    section: "04, 07, 09.3",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

fn run_of(ev: &serde_json::Value) -> Result<Uuid, HarnessError> {
    data(ev)["run_id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| HarnessError::Other(format!("create_run answered no run_id: {ev}")))
}

fn create(t: &str, task: &str) -> serde_json::Value {
    json!({"cmd": "create_run", "task_id": format!("{task}-{t}")})
}

fn acquire(r: Uuid) -> serde_json::Value {
    json!({"cmd": "acquire", "run_id": r, "ttl_ms": 600_000, "heartbeat_ms": 600_000, "renew_timeout_ms": 5_000})
}

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let mut cp = ctx.spawn_control_plane().await?;
    let mut cp2 = ctx.spawn_control_plane().await?;
    ctx.invariants.control.extend([cp.owner.clone(), cp2.owner.clone()]);
    let t = Uuid::new_v4().simple().to_string()[..8].to_string();
    let (mut workers, r2) = cancel_one_of_two(ctx, &mut cp, &t).await?;
    cancel_finished(ctx, &mut cp, &mut workers[1], r2).await?;
    racing_retries(ctx, &mut cp, &mut cp2, &t).await?;
    for w in workers.iter_mut() {
        w.shutdown(STEP).await?;
    }
    cp.shutdown(Duration::from_secs(10)).await?;
    cp2.shutdown(Duration::from_secs(10)).await?;
    ctx.note(format!("{} boundary checks on the worker's control plane", ctx.checks.len()));
    Ok(())
}

/// Two live runs, each with a prepared intent; cancel one: the other run and its intent stay.
/// Returns the two runs' workers and the second run.
async fn cancel_one_of_two(
    ctx: &mut Ctx,
    cp: &mut WorkerProc,
    t: &str,
) -> Result<(Vec<WorkerProc>, Uuid), HarnessError> {
    let c1 = cp.request(create(t, "wx-1"), STEP).await?;
    require_ok(&c1, "create a first run")?;
    let c2 = cp.request(create(t, "wx-2"), STEP).await?;
    require_ok(&c2, "create a second run")?;
    let (r1, r2) = (run_of(&c1)?, run_of(&c2)?);
    let mut intents = Vec::new();
    let mut workers = Vec::new();
    for (i, r) in [r1, r2].into_iter().enumerate() {
        let mut w = ctx.spawn_worker(&format!("w{i}"), vec![]).await?;
        require_ok(&w.request(acquire(r), STEP).await?, "a worker acquires")?;
        require_ok(&w.request(json!({"cmd": "start"}), STEP).await?, "a worker starts")?;
        let p = w.request(json!({"cmd": "plan", "step_id": "s", "tool": "idem", "request": {"i": i}}), STEP).await?;
        require_ok(&p, "a worker plans a step")?;
        intents.push(data(&p)["operation_id"].as_str().unwrap_or_default().to_string());
        workers.push(w);
    }
    require_ok(&cp.request(json!({"cmd": "cancel", "run_id": r1}), STEP).await?, "cancel the first run")?;
    let other = fenceproof_harness::record::oracle::run_state(&ctx.pool, r2).await?.run;
    let other_op = ctx.operation(&intents[1]).await?;
    ctx.check(Check::expect(
        tagged(tags::CANCEL_PREPARED_TO_CANCELLED, "a cancel changes the named run and its own prepared intents only"),
        other["status"] == "running" && other_op["status"] == "prepared",
        format!("the other run is {}, its intent {}", other["status"], other_op["status"]),
    ));
    Ok((workers, r2))
}

/// A finished run cannot be cancelled.
async fn cancel_finished(
    ctx: &mut Ctx,
    cp: &mut WorkerProc,
    worker: &mut WorkerProc,
    r2: Uuid,
) -> Result<(), HarnessError> {
    require_ok(&worker.request(json!({"cmd": "succeed"}), STEP).await?, "the second run completes")?;
    let late = cp.request(json!({"cmd": "cancel", "run_id": r2}), STEP).await?;
    let done = fenceproof_harness::record::oracle::run_state(&ctx.pool, r2).await?.run;
    ctx.check(Check::expect(
        tagged(tags::RUNS_TERMINAL_FINAL, "a cancel of a finished run changes nothing"),
        done["status"] == "succeeded",
        format!("cancel answered {}; the run is {}", outcome(&late), done["status"]),
    ));
    Ok(())
}

/// Two retries of one finished task, held on the task row, then released together: one live run.
async fn racing_retries(ctx: &mut Ctx, cp: &mut WorkerProc, cp2: &mut WorkerProc, t: &str) -> Result<(), HarnessError> {
    // Two retries of one finished task, held on the task row, then released together.
    let task = format!("wx-3-{t}");
    let c3 = cp.request(json!({"cmd": "create_run", "task_id": task}), STEP).await?;
    require_ok(&c3, "create a run to retry")?;
    let r3 = run_of(&c3)?;
    require_ok(&cp.request(json!({"cmd": "cancel", "run_id": r3}), STEP).await?, "cancel it (a retry may follow)")?;
    // A share lock: a create that locks the task row waits at that lock; one that reads it
    // unlocked runs on to its write of active_run_id and waits there, having read the old value.
    let hold = fenceproof_harness::faults::inject(
        RowHold::share(&ctx.db_url, CONTROL, "agent_tasks", "task_id", &task),
        &ctx.timeline,
    )
    .await?;
    let ids = (
        cp.send(json!({"cmd": "create_run", "task_id": task})).await?,
        cp2.send(json!({"cmd": "create_run", "task_id": task})).await?,
    );
    // Each retry either answers or is seen waiting; only then is the hold released. A control
    // plane that never touches the task row answers at once, and is judged all the same.
    let mut early = [None, None];
    let started = std::time::Instant::now();
    for (k, (p, id)) in [(&mut *cp, ids.0), (&mut *cp2, ids.1)].into_iter().enumerate() {
        loop {
            if let Some(a) = p.poll_event(|ev| ev["id"] == json!(id)) {
                early[k] = Some(a);
                break;
            }
            if hold.queued(&ctx.pool, &p.owner).await? {
                break;
            }
            if started.elapsed() > STEP {
                hold.heal().await?;
                return Err(HarnessError::Other(format!(
                    "{} neither answered create_run nor waited within {STEP:?}",
                    p.owner
                )));
            }
            tokio::time::sleep(fenceproof_harness::wait::POLL_EVERY).await;
        }
    }
    hold.heal().await?;
    let [e1, e2] = early;
    let a1 = match e1 {
        Some(a) => a,
        None => cp.reply(ids.0, STEP).await?,
    };
    let a2 = match e2 {
        Some(a) => a,
        None => cp2.reply(ids.1, STEP).await?,
    };
    let live: Vec<(String, String)> = sqlx::query_as(
        "SELECT run_id::text, status FROM agent_runs WHERE task_id = $1 AND status IN ('pending', 'running')",
    )
    .bind(&task)
    .fetch_all(&ctx.pool)
    .await?;
    ctx.check(Check::expect(
        tagged(tags::RUNS_ONE_LIVE_RUN_PER_TASK, "two racing retries of one task leave it one live run"),
        live.len() == 1,
        format!("the retries answered {} and {}; live runs of the task: {}", outcome(&a1), outcome(&a2), shown(&live)),
    ));

    Ok(())
}
