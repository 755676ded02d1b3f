//! The schedules' serialization failures: the server answers the holder's run writes with
//! SQLSTATE 40001 (the harness's [`SerializationFailures`] fault: the server's own error, the
//! transaction really aborted) while the holder saves; the episode is kept for the judgement
//! (`check::serialization::in_schedule`).

use fenceproof_harness::check::serialization::Episode;
use fenceproof_harness::faults::{self, serialization::SerializationFailures};
use fenceproof_harness::wait::POLL_EVERY;
use fenceproof_harness::HarnessError;
use fenceproof_scenarios::ctx::STEP;
use std::time::Instant;

use super::bodies;
use super::exec::Exec;
use super::ops::{Body, Failures};

impl Exec<'_> {
    /// The holder saves (naming no revision) while the server answers its run writes with 40001
    /// `failures` times; the attempts are counted by the server.
    pub(super) async fn serialization(&mut self, failures: Failures) -> Result<String, HarnessError> {
        let Some(h) = self.make_holder(None).await? else { return Ok("no live holder could be made".into()) };
        let Some(owner) = self.owner(h) else { return Ok(format!("w{h} has no process")) };
        let before = self.lease().await?;
        let mark = self.ctx.oracle_mark().await?;
        let fault =
            SerializationFailures::new(&self.ctx.pool, &self.ctx.oracle_schema, &owner, "agent_runs", failures.count());
        let armed = faults::inject(fault, &self.ctx.timeline).await?;
        self.note_write(h, false).await?;
        let n = self.counter + 1;
        let (cmd, k) = self.save_cmd_believed(h, bodies::value(Body::Plain, n));
        let answer = self.tell(h, cmd, Some(k)).await?;
        if answer == "no_answer_yet" {
            outlast(&armed).await?;
        }
        let attempts = armed.attempts().await?;
        armed.heal().await?;
        let after = self.lease().await?;
        let lease_kept = after.live && after.owner == before.owner && after.epoch == before.epoch;
        let committed = self
            .ctx
            .commits()
            .await?
            .iter()
            .filter(|r| r.seq > mark && r.is_runs() && r.op == "UPDATE" && r.writer == owner)
            .count();
        if attempts > 0 {
            self.reached.insert("serialization-failure");
        }
        let e = Episode { failures: failures.count(), attempts, answer, committed };
        let line = format!("w{h} save under {} 40001(s): {} attempt(s), answered {}", e.failures, e.attempts, e.answer);
        self.serialization.push((e, lease_kept));
        Ok(line)
    }
}

/// The worker had not answered within the schedule's answer time: it is still trying. Let it
/// meet the rest of the failures (bounded), so that a worker with no budget shows it by outlasting
/// them all; stop waiting once its attempts stand still for a while (it waits on something else).
async fn outlast(armed: &SerializationFailures) -> Result<(), HarnessError> {
    let deadline = Instant::now() + STEP;
    let (mut last, mut still) = (-1, 0u32);
    while Instant::now() < deadline && still < 50 {
        let now = armed.attempts().await?;
        if now >= armed.failures() {
            break;
        }
        still = if now == last { still + 1 } else { 0 };
        last = now;
        tokio::time::sleep(POLL_EVERY).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_episodes_run_from_one_failure_to_more_than_the_reference_budget() {
        let budget = i64::from(fenceproof_protocol::retry::RetryBudget::default().attempts);
        assert_eq!(Failures::Once.count(), 1);
        assert!(Failures::Several.count() < budget && Failures::Endless.count() > budget);
    }
}
