//! Experiment S-40001 — serialization failures (spec §04, §07). A worker holds the lease of a
//! running run. The harness makes the server answer its checkpoint writes with SQLSTATE 40001
//! (the oracle's trigger: the server's own error, the transaction really aborted): once, then
//! three times, then more often than any sane budget allows. After one failure the worker must
//! retry the whole transaction and commit once; after three it may succeed the same way or give
//! up cleanly; under the endless failures it must stop within a budget and refuse the write; and
//! none of it may be taken for a lost lease: no `lease_lost`, no cancelled execution, and the next
//! write, with the faults healed, commits. The trigger counts every attempt in a sequence no
//! rollback returns, so the attempts are counted by the server, not reported by the worker.

use fenceproof_harness::check::serialization::{self, Episode};
use fenceproof_harness::faults::inject;
use fenceproof_harness::faults::serialization::{SerializationFailures, ENDLESS};
use fenceproof_harness::procs::worker::WorkerProc;
use fenceproof_harness::HarnessError;
use fenceproof_protocol::runs;
use serde_json::json;
use uuid::Uuid;

use crate::ctx::{outcome, require_ok, Ctx, STEP};
use crate::experiment::{Checks, Experiment, Judges};

pub const TITLE: &str = "Serialization failures: 40001 once, three times, endlessly";

/// Its registration: what it needs and what it judges.
pub const EXPERIMENT: Experiment = Experiment {
    id: "S-40001",
    title: TITLE,
    section: "04, 07",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(run(c)),
};

/// Failures of the middle episode: a few, within what a worker may choose as its budget or not.
const SEVERAL: i64 = 3;

pub async fn run(ctx: &mut Ctx) -> Result<(), HarnessError> {
    let run_id =
        runs::create_run(&ctx.pool, "task-s", json!({})).await.map_err(|e| HarnessError::Other(e.to_string()))?;
    let mut w = ctx.spawn_worker("a", vec![]).await?;
    let acq =
        json!({"cmd": "acquire", "run_id": run_id, "ttl_ms": 20_000, "heartbeat_ms": 500, "renew_timeout_ms": 2000});
    require_ok(&w.request(acq, STEP).await?, "acquire")?;
    require_ok(&w.request(json!({"cmd": "start"}), STEP).await?, "start")?;

    let once = episode(ctx, &mut w, run_id, 1, 1).await?;
    let several = episode(ctx, &mut w, run_id, SEVERAL, 2).await?;
    let endless = episode(ctx, &mut w, run_id, ENDLESS, 3).await?;
    let lease_events: Vec<String> = ["heartbeat_lost", "heartbeat_unconfirmed", "execution_cancelled"]
        .iter()
        .filter(|name| w.poll_event(|e| e["event"] == **name).is_some())
        .map(|s| s.to_string())
        .collect();

    // Healed: the next write commits, under the same lease.
    let mark = ctx.oracle_mark().await?;
    let next = w.request(json!({"cmd": "save", "checkpoint": {"step": 4}}), STEP).await?;
    let next_committed = saves_after(ctx, mark, &w.owner, run_id).await?;

    ctx.check(serialization::retried_whole(&once, &several));
    ctx.check(serialization::within_budget(&endless));
    ctx.check(serialization::not_lease_loss(
        &[&once, &several, &endless],
        &lease_events,
        (outcome(&next), next_committed),
    ));
    ctx.note(format!(
        "attempts: {} for 1 failure, {} for {SEVERAL}, {} for {ENDLESS} (answered {})",
        once.attempts, several.attempts, endless.attempts, endless.answer
    ));
    let _ = w.request(json!({"cmd": "succeed"}), STEP).await?;
    let _ = w.request(json!({"cmd": "release"}), STEP).await?;
    w.shutdown(STEP).await?;
    Ok(())
}

/// One save while the server answers the worker's run writes with 40001 `failures` times: what
/// the worker answered, how often it attempted, what committed.
async fn episode(
    ctx: &mut Ctx,
    w: &mut WorkerProc,
    run_id: Uuid,
    failures: i64,
    step: i64,
) -> Result<Episode, HarnessError> {
    let mark = ctx.oracle_mark().await?;
    let fault = SerializationFailures::new(&ctx.pool, &ctx.oracle_schema, &w.owner, "agent_runs", failures);
    let armed = inject(fault, &ctx.timeline).await?;
    let answer = w.request(json!({"cmd": "save", "checkpoint": {"step": step}}), STEP).await?;
    let attempts = armed.attempts().await?;
    armed.heal().await?;
    let committed = saves_after(ctx, mark, &w.owner, run_id).await?;
    Ok(Episode { failures, attempts, answer: outcome(&answer).to_string(), committed })
}

/// The writer's run updates committed after oracle mark `mark`.
async fn saves_after(ctx: &Ctx, mark: i64, writer: &str, run_id: Uuid) -> Result<usize, HarnessError> {
    Ok(ctx
        .commits()
        .await?
        .iter()
        .filter(|r| r.seq > mark && r.is_runs() && r.op == "UPDATE" && r.writer == writer && r.run_id == Some(run_id))
        .count())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_endless_episode_outlasts_the_reference_budget() {
        let budget = fenceproof_protocol::retry::RetryBudget::default().attempts;
        assert!(i64::from(budget) < super::ENDLESS);
        assert!(super::SEVERAL < i64::from(budget));
    }
}
