//! Polling with a global deadline. Every wait in fenceproof goes through here or through a
//! `tokio::time::timeout`: nothing waits forever, and no sleep stands in for synchronization —
//! the condition polled is always something observable (database state, process state).

use std::future::Future;
use std::time::{Duration, Instant};

use crate::error::{HarnessError, Result};

/// How often conditions are re-checked.
pub const POLL_EVERY: Duration = Duration::from_millis(10);

/// At most how many times its timeout a wait grants itself for the harness's own delay.
pub const MAX_STRETCH: u32 = 4;

/// Poll `probe` until it yields `Some`, or fail with a timeout naming `what`. The timeout is
/// granted whatever the harness lost meanwhile to its own scheduling delay ([`crate::lag`]), up
/// to [`MAX_STRETCH`] times it; a wait that still runs out on a starved machine says so.
pub async fn until<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = probe().await? {
            return Ok(v);
        }
        if start.elapsed() >= timeout {
            let (grant, lag) = crate::lag::granted(timeout, start, Duration::ZERO, MAX_STRETCH);
            if start.elapsed() >= grant {
                return Err(HarnessError::timed_out(what.to_string(), start.elapsed(), lag));
            }
        }
        let due = Instant::now() + POLL_EVERY;
        tokio::time::sleep(POLL_EVERY).await;
        crate::lag::record(due, Instant::now().saturating_duration_since(due));
    }
}

/// Await `fut` for at most `timeout` (granted the harness's own delay, as [`until`]).
pub async fn within<T, Fut>(what: &str, timeout: Duration, fut: Fut) -> Result<T>
where
    Fut: Future<Output = Result<T>>,
{
    let start = Instant::now();
    tokio::pin!(fut);
    let mut deadline = timeout;
    loop {
        match tokio::time::timeout_at((start + deadline).into(), &mut fut).await {
            Ok(r) => return r,
            Err(_) => {
                let due = start + deadline;
                crate::lag::record(due, Instant::now().saturating_duration_since(due));
                let (grant, lag) = crate::lag::granted(timeout, start, Duration::ZERO, MAX_STRETCH);
                if grant <= deadline {
                    return Err(HarnessError::timed_out(what.to_string(), start.elapsed(), lag));
                }
                deadline = grant;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// The harness's thread held for 1.5 s at once (what a machine at four times its cores did to
    /// it), measured by the lag watch on that same thread, while it waits 1 s for a condition
    /// that comes 2 s in: the wait is granted the 1.5 s it lost and sees the condition. Never
    /// true, the wait says the harness was starved, with the delay.
    #[tokio::test(flavor = "current_thread")]
    async fn a_wait_on_a_starved_thread_is_granted_its_lost_time_then_says_starved() {
        // On a quiet thread (nothing recorded yet), a wait that runs out is a plain timeout.
        let quiet = until("nothing", Duration::from_millis(100), || async { Ok(None::<()>) }).await;
        assert!(matches!(quiet, Err(HarnessError::Timeout { .. })), "{quiet:?}");
        let watch = tokio::spawn(crate::lag::watch(Duration::from_millis(100), |_| {}));
        tokio::time::sleep(Duration::from_millis(150)).await;
        let start = Instant::now();
        let hog = tokio::spawn(async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            std::thread::sleep(Duration::from_millis(1500));
        });
        let came = Arc::new(AtomicBool::new(false));
        let c = came.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(2000)).await;
            c.store(true, Ordering::SeqCst);
        });
        let seen = until("the condition", Duration::from_secs(1), || {
            let v = came.load(Ordering::SeqCst);
            async move { Ok(v.then_some(())) }
        })
        .await;
        assert!(seen.is_ok(), "{seen:?} after {:?}", start.elapsed());
        hog.await.unwrap();

        let hog = tokio::spawn(async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            std::thread::sleep(Duration::from_millis(1500));
        });
        let never = until("a condition that never comes", Duration::from_secs(1), || async { Ok(None::<()>) }).await;
        hog.await.unwrap();
        watch.abort();
        match never {
            Err(HarnessError::Starved { what, lag, .. }) => {
                assert!(what.contains("never comes") && lag.contains("ms late"), "{what}: {lag}");
            }
            other => panic!("a starved wait must say so: {other:?}"),
        }
    }
}
