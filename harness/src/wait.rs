//! Polling with a global deadline. Every wait in fenceproof goes through here or through a
//! `tokio::time::timeout`: nothing waits forever, and no sleep stands in for synchronization —
//! the condition polled is always something observable (database state, process state).

use std::future::Future;
use std::time::{Duration, Instant};

use crate::error::{HarnessError, Result};

/// How often conditions are re-checked.
pub const POLL_EVERY: Duration = Duration::from_millis(10);

/// Poll `probe` until it yields `Some`, or fail with a timeout naming `what`.
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
            return Err(HarnessError::Timeout { what: what.to_string(), after_ms: timeout.as_millis() });
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// Await `fut` for at most `timeout`.
pub async fn within<T, Fut>(what: &str, timeout: Duration, fut: Fut) -> Result<T>
where
    Fut: Future<Output = Result<T>>,
{
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(HarnessError::Timeout { what: what.to_string(), after_ms: timeout.as_millis() }),
    }
}
