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
        tokio::time::sleep(POLL_EVERY).await;
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
                let (grant, lag) = crate::lag::granted(timeout, start, Duration::ZERO, MAX_STRETCH);
                if grant <= deadline {
                    return Err(HarnessError::timed_out(what.to_string(), start.elapsed(), lag));
                }
                deadline = grant;
            }
        }
    }
}
