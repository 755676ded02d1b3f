//! Probe `barriers`: a save armed with a barrier at each fault point must really wait inside the
//! database at that point: after BEGIN before the lease row is locked, after the lease row is
//! locked and validated, and after the run update just before COMMIT.

use fenceproof_harness::faults::{self, DbBarrier};
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::HarnessError;
use serde_json::json;

use super::{acquire, new_run, run_row, Points};
use fenceproof_scenarios::ctx::{outcome, Ctx, STEP};

const KEY: i64 = 0x0C0F;

/// Whether the lease row of `run_id` is locked by some transaction now (FOR UPDATE NOWAIT fails).
async fn lease_row_locked(ctx: &Ctx, run_id: uuid::Uuid) -> Result<bool, HarnessError> {
    let mut tx = ctx.pool.begin().await?;
    let r = sqlx::query("SELECT 1 FROM worker_leases WHERE run_id = $1 FOR UPDATE NOWAIT")
        .bind(run_id)
        .execute(&mut *tx)
        .await;
    tx.rollback().await?;
    match r {
        Ok(_) => Ok(false),
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("55P03") => Ok(true),
        Err(e) => Err(e.into()),
    }
}

/// A fault point of the protected transaction and what holds there: whether the lease row is
/// locked, and whether the run row is updated (`None`: not judged).
struct Stop {
    point: &'static str,
    lease_locked: bool,
    updated: Option<bool>,
}

pub async fn run(ctx: &mut Ctx, p: &mut Points) -> Result<(), HarnessError> {
    let run_id = new_run(ctx, "conf-barriers").await?;
    let mut w = ctx.spawn_worker("w", vec![]).await?;
    w.request(acquire(run_id), STEP).await?;
    w.request(json!({"cmd": "start"}), STEP).await?;
    for (point, lease_locked, updated) in [
        ("after_begin", false, Some(false)),
        ("after_lease_validated", true, None),
        ("before_commit", true, Some(true)),
    ] {
        held_save(ctx, p, &mut w, run_id, &Stop { point, lease_locked, updated }).await?;
    }
    w.shutdown(STEP).await?;
    Ok(())
}

/// A save armed at `stop`: it must wait there, with the rows locked as the point says, and
/// commit once released.
async fn held_save(
    ctx: &Ctx,
    p: &mut Points,
    w: &mut WorkerProc,
    run_id: uuid::Uuid,
    stop: &Stop,
) -> Result<(), HarnessError> {
    let point = stop.point;
    let (_, before, _) = run_row(ctx, run_id).await?;
    let barrier = faults::inject(DbBarrier::new(&ctx.db_url, KEY).at(point), &ctx.timeline).await?;
    let id = w
        .send(json!({"cmd": "save", "checkpoint": {"at": point},
                     "faults": {"barriers": [{"point": point, "key": KEY}]}}))
        .await?;
    let waited = barrier.wait_blocked(&ctx.pool, std::slice::from_ref(&w.owner), 1, STEP).await;
    let Ok(_) = waited else {
        barrier.heal().await?;
        let ev = w.reply(id, STEP).await?;
        p.expect(
            format!("a save armed at `{point}` waits there inside the database"),
            false,
            format!("save with a barrier at `{point}` answered `{}` without waiting on the barrier", outcome(&ev)),
        );
        return Ok(());
    };
    let locked = lease_row_locked(ctx, run_id).await?;
    let run_locked = run_row_locked(ctx, run_id).await?;
    barrier.heal().await?;
    let ev = w.reply(id, STEP).await?;
    let (_, after, _) = run_row(ctx, run_id).await?;
    judge_locks(p, stop, locked, run_locked);
    p.expect(
        format!("the save held at `{point}` commits once released"),
        outcome(&ev) == "ok" && after == before + 1,
        format!("released at `{point}`, the save answered `{}` and the revision went {before} → {after}", outcome(&ev)),
    );
    Ok(())
}

/// Whether the run row is locked now. Uncommitted, so only the holding transaction's own row lock
/// tells an update happened: an update of the run row locks it too.
async fn run_row_locked(ctx: &Ctx, run_id: uuid::Uuid) -> Result<bool, HarnessError> {
    let mut tx = ctx.pool.begin().await?;
    let run_locked = sqlx::query("SELECT 1 FROM agent_runs WHERE run_id = $1 FOR UPDATE NOWAIT")
        .bind(run_id)
        .execute(&mut *tx)
        .await
        .is_err();
    tx.rollback().await?;
    Ok(run_locked)
}

/// The rows' locks seen while the save was held at `stop`, against what the point says.
fn judge_locks(p: &mut Points, stop: &Stop, locked: bool, run_locked: bool) {
    let (point, lease_locked) = (stop.point, stop.lease_locked);
    p.expect(
        format!(
            "at `{point}` the lease row is {}",
            if lease_locked { "locked and validated" } else { "not locked yet" }
        ),
        locked == lease_locked,
        format!(
            "while held at `{point}` the lease row was {}locked; expected it {}",
            if locked { "" } else { "not " },
            if lease_locked {
                "locked (the point comes after the lease is validated)"
            } else {
                "free (the point comes right after BEGIN)"
            }
        ),
    );
    // On the api path one fp_run_transition call locks, validates and updates, so there
    // `after_lease_validated` comes after the update, as `before_commit` does: not judged.
    if let Some(updated) = stop.updated {
        p.expect(
            format!(
                "at `{point}` the run row is {}",
                if updated { "already updated (uncommitted)" } else { "not updated yet" }
            ),
            run_locked == updated,
            format!(
                "while held at `{point}` the run row was {}locked by the save; expected {}",
                if run_locked { "" } else { "not " },
                if updated { "the update done before COMMIT" } else { "no update yet" }
            ),
        );
    }
}
