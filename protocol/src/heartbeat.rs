//! The heartbeat: renew the lease every interval with its own timeout; any renewal that is not
//! confirmed cancels the execution (spec section 07). Cancellation only reduces further work — a
//! remote peer may already have done what it was asked — and the database fencing still rejects
//! whatever a stale worker tries to commit.

use std::future::Future;
use std::time::Duration;

use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::error::ProtocolError;
use crate::ids::{Lease, Ttl};
use crate::lease;
use crate::mutant::{self, Mutant};

/// Why a heartbeat loop ended.
#[derive(Debug)]
pub enum HeartbeatEnd {
    /// Stopped by its owner (release, completion) or because the execution ended.
    Stopped,
    /// The database said the lease is gone (zero rows): confirmed loss.
    Lost(ProtocolError),
    /// The renewal errored or timed out: the outcome is unknown, so the lease counts as lost.
    Unconfirmed(String),
}

/// Run renewals every `interval` until `stop` or `execution` is cancelled, or a renewal is not
/// confirmed within `timeout` — then cancel `execution` and return why.
pub async fn heartbeat_loop<F, Fut>(
    interval: Duration,
    timeout: Duration,
    stop: CancellationToken,
    execution: CancellationToken,
    mut renew: F,
) -> HeartbeatEnd
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), ProtocolError>>,
{
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return HeartbeatEnd::Stopped,
            _ = execution.cancelled() => return HeartbeatEnd::Stopped,
            _ = ticker.tick() => {}
        }
        let end = match tokio::time::timeout(timeout, renew()).await {
            Ok(Ok(())) => continue,
            Ok(Err(e @ ProtocolError::LeaseLost { .. })) => HeartbeatEnd::Lost(e),
            // MUTANT continue-after-unconfirmed-renewal: no answer (or a lost one) taken as
            // "probably renewed".
            Ok(Err(_)) | Err(_) if mutant::active(Mutant::ContinueAfterUnconfirmedRenewal) => continue,
            Ok(Err(e)) => HeartbeatEnd::Unconfirmed(e.to_string()),
            Err(_) => {
                // The renewal was abandoned unanswered: it counts as unknown, like a lost reply.
                crate::metrics::METRICS.renew_unconfirmed();
                HeartbeatEnd::Unconfirmed(format!("renewal not confirmed within {timeout:?}"))
            }
        };
        // MUTANT lost-renewal-keeps-running: the heartbeat ends on a zero-row renewal without
        // cancelling the execution.
        if !(matches!(end, HeartbeatEnd::Lost(_)) && mutant::active(Mutant::LostRenewalKeepsRunning)) {
            execution.cancel();
        }
        return end;
    }
}

/// A running heartbeat task.
pub struct Heartbeat {
    pub stop: CancellationToken,
    pub task: JoinHandle<HeartbeatEnd>,
}

impl Heartbeat {
    /// Spawn the heartbeat of `lease` on the current runtime.
    pub fn spawn(
        pool: PgPool,
        lease: Lease,
        ttl: Ttl,
        interval: Duration,
        timeout: Duration,
        execution: CancellationToken,
    ) -> Heartbeat {
        let stop = CancellationToken::new();
        let task = tokio::spawn(heartbeat_loop(interval, timeout, stop.clone(), execution, move || {
            let pool = pool.clone();
            let lease = lease.clone();
            async move { lease::renew(&pool, &lease, ttl).await.map(|_| ()) }
        }));
        Heartbeat { stop, task }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn lost() -> ProtocolError {
        ProtocolError::LeaseLost { run_id: Uuid::nil(), owner: "w".into(), epoch: 1 }
    }

    #[tokio::test(start_paused = true)]
    async fn lost_renewal_cancels_execution() {
        let exec = CancellationToken::new();
        let mut n = 0;
        let end = heartbeat_loop(
            Duration::from_millis(10),
            Duration::from_millis(5),
            CancellationToken::new(),
            exec.clone(),
            || {
                n += 1;
                let r = if n < 3 { Ok(()) } else { Err(lost()) };
                async move { r }
            },
        )
        .await;
        assert!(matches!(end, HeartbeatEnd::Lost(_)));
        assert!(exec.is_cancelled());
        assert_eq!(n, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn slow_renewal_is_unconfirmed_and_cancels() {
        let exec = CancellationToken::new();
        let end = heartbeat_loop(
            Duration::from_millis(10),
            Duration::from_millis(5),
            CancellationToken::new(),
            exec.clone(),
            || async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(())
            },
        )
        .await;
        assert!(matches!(end, HeartbeatEnd::Unconfirmed(_)));
        assert!(exec.is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn stop_ends_without_cancelling_execution() {
        let exec = CancellationToken::new();
        let stop = CancellationToken::new();
        stop.cancel();
        let end = heartbeat_loop(Duration::from_millis(10), Duration::from_millis(5), stop, exec.clone(), || async {
            Ok(())
        })
        .await;
        assert!(matches!(end, HeartbeatEnd::Stopped));
        assert!(!exec.is_cancelled());
    }
}
