//! The schedules' crash between two durable steps: the holder plans a step whose request carries
//! secrets, and its wire proxy kills it the moment the plan's first durable commit has been
//! acknowledged ([`fenceproof_harness::faults::proxy::CommitCrash`]). At the end a dispatcher sends
//! what committed, and every value must have reached the tool (`super::crash_judge`, rule
//! crash.references-durable-first): judged from the final rows and the tools' ledger.

use fenceproof_harness::faults::{self, proxy::patterns};
use fenceproof_harness::HarnessError;
use fenceproof_scenarios::ctx::outcome;
use fenceproof_scenarios::p_secret_masking::generated_body;
use serde_json::json;

use super::exec::{Exec, ANSWER};
use super::ops::Tool;

impl Exec<'_> {
    /// The holder plans a step for `tool` with generated secrets and is killed right after the
    /// plan's first durable commit (if the plan answers first, nothing was killed).
    pub(super) async fn plan_crash(&mut self, tool: Tool) -> Result<String, HarnessError> {
        let Some(w) = self.make_holder(None).await? else { return Ok("no live holder could be made".into()) };
        let crash = {
            let slot = &self.slots[w];
            let (Some(p), Some(proxy)) = (slot.proc.as_ref(), slot.proxy.as_ref()) else {
                return Ok("the holder has no proxy of its own".into());
            };
            proxy.crash_after_commit(patterns::DURABLE_STEP, 1, p.pid, ANSWER)?
        };
        let crash = faults::inject(crash, &self.ctx.timeline).await?;
        self.note_write(w, false).await?;
        let n = self.next();
        let step = format!("s{n}");
        let (body, values) = generated_body(u64::from(n));
        let name = format!("res-{}-{step}", &self.run_id.simple().to_string()[..8]);
        let request = json!({"name": name, "size": n, "data": body});
        let cmd = json!({"cmd": "plan", "step_id": step, "tool": tool.name(), "request": request});
        let Some(id) = self.send(w, cmd, None).await? else { return Ok("no process".into()) };
        let p = self.slots[w].proc.as_mut().ok_or_else(|| HarnessError::Other(format!("slot {w} has no process")))?;
        // Neither a commit nor an answer within ANSWER is a worker that has not answered yet (the
        // schedule goes on and its checks judge what it did), not a harness error.
        let answer = tokio::select! {
            biased;
            _ = crash.fired(ANSWER) => None,
            a = p.reply(id, ANSWER) => Some(a),
        };
        self.secrets.extend(values.iter().cloned());
        if crash.try_fired().is_some() {
            self.kill(w).await?;
            crash.heal().await?;
            self.crash_planned.push((step.clone(), values));
            self.reached.insert("crash-after-plan-commit");
            return Ok(format!("w{w} planned {step} with secrets and was killed right after its commit"));
        }
        crash.heal().await?;
        Ok(match answer {
            Some(Ok(ev)) => {
                self.settle(w, id, &ev);
                format!("w{w} planned {step} with secrets (no commit seen): {}", outcome(&ev))
            }
            Some(Err(HarnessError::Timeout { .. } | HarnessError::Starved { .. })) | None => "no_answer_yet".into(),
            Some(Err(e)) => return Err(e),
        })
    }

    /// Before the judgement: one dispatcher pass when a step planned by a killed holder is still
    /// prepared (its run live), so that what committed is sent.
    pub(super) async fn send_crash_planned(&mut self) -> Result<(), HarnessError> {
        if self.crash_planned.is_empty() {
            return Ok(());
        }
        let steps: Vec<String> = self.crash_planned.iter().map(|(s, _)| s.clone()).collect();
        let prepared: i64 =
            sqlx::query_scalar("SELECT count(*) FROM tool_operations WHERE step_id = ANY($1) AND status = 'prepared'")
                .bind(&steps)
                .fetch_one(&self.ctx.pool)
                .await?;
        if prepared > 0 {
            let cmd = json!({"cmd": "dispatch", "call_timeout_ms": 2000, "limit": 50});
            let ev = super::exec::ask(&mut self.dispatcher, cmd, ANSWER).await?;
            self.log.push(format!("dispatch of what crashed holders planned -> {}", outcome(&ev)));
        }
        Ok(())
    }
}
