//! Scripted mode: run one whole task alone — acquire, start, N checkpoints with pacing, succeed,
//! release — stopping (without any terminal write) as soon as the execution is cancelled.

use std::sync::Arc;
use std::time::Duration;

use crate::commands::Command;
use crate::session::Session;
use fenceproof_protocol::FaultPoints;

pub struct Script {
    pub run_id: uuid::Uuid,
    pub steps: u32,
    pub pace_ms: u64,
    pub ttl_ms: i64,
    pub heartbeat_ms: u64,
    pub renew_timeout_ms: u64,
}

/// Returns true when the script ran to completion.
pub async fn run(session: &Arc<Session>, s: Script) -> bool {
    let mut plan = vec![Command::Acquire {
        run_id: s.run_id,
        ttl_ms: s.ttl_ms,
        heartbeat_ms: s.heartbeat_ms,
        renew_timeout_ms: s.renew_timeout_ms,
        faults: FaultPoints::none(),
    }];
    plan.push(Command::Start { expected_revision: None, faults: FaultPoints::none() });
    for step in 1..=s.steps {
        plan.push(Command::Save {
            checkpoint: serde_json::json!({ "step": step, "of": s.steps }),
            expected_revision: None,
            faults: Default::default(),
        });
    }
    plan.push(Command::Succeed { expected_revision: None, faults: FaultPoints::none() });
    plan.push(Command::Release);

    for (i, cmd) in plan.into_iter().enumerate() {
        if session.execution.is_cancelled() {
            return false;
        }
        let is_save = matches!(cmd, Command::Save { .. });
        if !session.handle(i as u64 + 1, cmd).await {
            return false;
        }
        if is_save && s.pace_ms > 0 {
            // Pacing between steps stands for the work a real step does; not a synchronization.
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(s.pace_ms)) => {}
                _ = session.execution.cancelled() => return false,
            }
        }
    }
    true
}
