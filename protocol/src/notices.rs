//! Notices that come with a *successful* command, and the one that changes its meaning.
//!
//! When a commit is waiting for a synchronous standby and that wait is cancelled (statement cancel,
//! `pg_cancel_backend`, a timeout), PostgreSQL answers success with the WARNING "canceling wait for
//! synchronous replication due to user request" (DETAIL: the transaction has already committed
//! locally, but might not have been replicated to the standby). The row is not durable in the sense the deployment promised:
//! a failover can lose it. The protocol treats such a success as an unknown outcome (read back from
//! the primary that survives), never as success.
//!
//! sqlx hands notices only to `tracing` (target `sqlx::postgres::notice`). [`NoticeLayer`] catches
//! them for the future that is being polled on the same thread ([`capture`]); an application that
//! embeds the protocol installs the layer in its subscriber (the reference worker does).

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use uuid::Uuid;

use crate::error::ProtocolError;

/// The tracing target sqlx uses for server notices.
pub const NOTICE_TARGET: &str = "sqlx::postgres::notice";

thread_local! {
    static SLOT: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
}

/// A tracing layer that records server notices for the future currently under [`capture`].
pub struct NoticeLayer;

struct MessageVisitor(String);

impl tracing::field::Visit for MessageVisitor {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.0 = value.to_string();
        }
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for NoticeLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() != NOTICE_TARGET {
            return;
        }
        let mut v = MessageVisitor(String::new());
        event.record(&mut v);
        SLOT.with(|s| {
            if let Some(list) = s.borrow_mut().as_mut() {
                list.push(v.0);
            }
        });
    }
}

struct Capture<F> {
    inner: Pin<Box<F>>,
    got: Vec<String>,
}

impl<F: Future> Future for Capture<F> {
    type Output = (F::Output, Vec<String>);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let outer = SLOT.with(|s| s.borrow_mut().replace(Vec::new()));
        let r = self.inner.as_mut().poll(cx);
        let mine = SLOT.with(|s| std::mem::replace(&mut *s.borrow_mut(), outer)).unwrap_or_default();
        self.got.extend(mine);
        match r {
            Poll::Ready(v) => Poll::Ready((v, std::mem::take(&mut self.got))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Run `fut`, collecting the server notices it received (when [`NoticeLayer`] is installed).
pub async fn capture<F: Future>(fut: F) -> (F::Output, Vec<String>) {
    Capture { inner: Box::pin(fut), got: Vec::new() }.await
}

/// The notice saying a commit is local only, if any. PostgreSQL says "canceling wait for
/// synchronous replication due to user request" (or "... and terminating connection ..."); the
/// "committed locally, might not have been replicated" part is in the DETAIL, which sqlx does not
/// pass on, so the primary message is what is matched.
pub fn unreplicated(notices: &[String]) -> Option<&String> {
    notices.iter().find(|n| n.contains("wait for synchronous replication"))
}

/// Run a write; a success that came with the "committed locally only" warning becomes
/// [`ProtocolError::OutcomeUnknown`].
pub async fn durable<T, F>(operation: &'static str, run_id: Uuid, fut: F) -> Result<T, ProtocolError>
where
    F: Future<Output = Result<T, ProtocolError>>,
{
    let (r, notices) = capture(fut).await;
    match (r, unreplicated(&notices)) {
        (Ok(_), Some(w)) => {
            Err(ProtocolError::OutcomeUnknown { operation, run_id, detail: format!("success came with: {w}") })
        }
        (r, _) => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::prelude::*;

    #[tokio::test]
    async fn a_locally_committed_success_is_an_unknown_outcome() {
        let subscriber = tracing_subscriber::registry().with(NoticeLayer);
        let _guard = tracing::subscriber::set_default(subscriber);
        let ok = durable("t", Uuid::nil(), async { Ok::<_, ProtocolError>(1) }).await;
        assert_eq!(ok.unwrap(), 1);
        let trapped = durable("commit", Uuid::nil(), async {
            tracing::warn!(target: "sqlx::postgres::notice", message = "canceling wait for synchronous replication due to user request");
            Ok::<_, ProtocolError>(1)
        })
        .await;
        assert!(matches!(trapped, Err(ProtocolError::OutcomeUnknown { .. })), "{trapped:?}");
        // Notices of other futures are not attributed to this one.
        tracing::warn!(target: "sqlx::postgres::notice", message = "canceling wait for synchronous replication due to user request");
        assert!(durable("t", Uuid::nil(), async { Ok::<_, ProtocolError>(3) }).await.is_ok());
        let other = durable("t", Uuid::nil(), async {
            tracing::warn!(target: "sqlx::postgres::notice", message = "there is no transaction in progress");
            Ok::<_, ProtocolError>(4)
        })
        .await;
        assert_eq!(other.unwrap(), 4, "other warnings do not change the outcome");
        assert!(durable("t", Uuid::nil(), async { Ok::<_, ProtocolError>(2) }).await.is_ok());
    }
}
