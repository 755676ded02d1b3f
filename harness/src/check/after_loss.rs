//! Stopping after a confirmed loss (spec §05.2, §07): a renewal that matches zero rows means the
//! lease is lost; the worker cancels its execution and starts no new work. A worker whose
//! heartbeat ends on the zero-row renewal without cancelling passes every check of committed
//! state (the fencing rejects its later writes), while it goes on working for a run it no longer
//! owns.
//!
//! Judged from the wire, for any worker: the harness's proxy logs every statement the worker
//! sends, in order. The experiment makes the loss certain before a chosen renewal reaches the
//! server (it holds the renewal in the proxy until the lease has been taken over), so that
//! renewal's answer is the confirmed loss. The proxy notes when that answer was written back to
//! the worker: a protected write the worker begins after that moment began after it knew (a
//! statement of a transaction opened before it only finishes old work, and one sent while the
//! answer was still on its way is no violation). A protected write is recognised by its first
//! statement ([`patterns::PROTECTED_ENTRY`]: the fenced function, the lease row lock, or the run
//! update), so an attempt the fencing refuses before it reaches the run row is seen too.

use regex::Regex;

use super::Check;
use crate::faults::proxy::{frame, patterns, WireStatement};

/// A checker's name (the rule catalogue links rules to it).
pub const NO_WRITE_AFTER_LOSS: &str =
    "after a renewal answered with zero rows, the worker sends no new protected write, renewal, acquire or release";

/// A lease write of the fenced functions (acquire, release; renewals are [`patterns::LEASE_RENEW`],
/// which on the direct path also matches every `UPDATE worker_leases`): after a confirmed loss the
/// heartbeat has stopped, and a new acquire would resurrect the lost execution under a new epoch.
const LEASE_WRITE: &str = r"\bfp_lease_(acquire|release)\b";

/// The first renewal that reached the server after `from` (the loss made certain) and whose
/// answer reached the worker: the confirmed loss.
fn confirming(log: &[WireStatement], from: usize) -> Option<&WireStatement> {
    let renew = Regex::new(patterns::LEASE_RENEW).expect("pattern");
    log.iter().find(|s| s.n > from && renew.is_match(&frame::normalize(&s.sql)))
}

/// Whether a renewal reached the server after `from` in `log` and its answer reached the worker:
/// the moment [`no_write_after_loss`] judges was made.
pub fn loss_confirmed(log: &[WireStatement], from: usize) -> bool {
    confirming(log, from).is_some_and(|s| s.answered_at.is_some())
}

/// A protected write of the worker reached the server after `from` and before the confirming
/// renewal's answer reached the worker: its next step was already under way when it learned the
/// loss (and that step's own refusal may be how it learned it). Its later statements cannot then
/// be told from new work, so the moment is not one to judge.
pub fn step_under_way(log: &[WireStatement], from: usize) -> bool {
    let Some(loss) = confirming(log, from) else { return false };
    let answered = loss.answered_at.unwrap_or(usize::MAX);
    let write = Regex::new(patterns::PROTECTED_ENTRY).expect("pattern");
    log.iter()
        .filter(|s| s.n > from && s.n <= answered && s.n != loss.n && !same_transaction(log, s, loss))
        .any(|s| write.is_match(&frame::normalize(&s.sql)))
}

/// Whether `s` came earlier in the transaction that `later` ended in, on the same connection (a
/// renewal that locks the lease row first: its lock opens no step of work).
fn same_transaction(log: &[WireStatement], s: &WireStatement, later: &WireStatement) -> bool {
    s.connection == later.connection
        && s.n < later.n
        && s.in_transaction
        && later.in_transaction
        && log.iter().filter(|o| o.connection == s.connection && o.n > s.n && o.n <= later.n).all(|o| o.in_transaction)
}

/// Whether `s` continues a transaction its connection opened before statement `mark`: the
/// statement that opened it (the last one on the connection outside a transaction) came first.
fn continues_from_before(log: &[WireStatement], s: &WireStatement, mark: usize) -> bool {
    s.in_transaction
        && log
            .iter()
            .rev()
            .filter(|o| o.connection == s.connection && o.n < s.n)
            .find(|o| !o.in_transaction)
            .is_none_or(|opener| opener.n <= mark)
}

/// `log` is the worker's statements in order; `from` the log's length when the loss was made
/// certain (the lease taken over). The first renewal after `from` is the confirmed loss, known to
/// the worker once its answer was written back: a protected write, renewal, acquire or release the
/// worker began after that is a violation (a statement that continues a transaction opened
/// before is not a new beginning). ERROR-free by construction: no such renewal means the worker
/// never confirmed the loss, which the experiment reports itself.
pub fn no_write_after_loss(log: &[WireStatement], from: usize) -> Check {
    let renew = Regex::new(patterns::LEASE_RENEW).expect("pattern");
    let write = Regex::new(patterns::PROTECTED_ENTRY).expect("pattern");
    let Some(loss) = confirming(log, from) else {
        return Check::fail(
            NO_WRITE_AFTER_LOSS,
            "no renewal reached the server after the takeover: the loss was never confirmed",
        );
    };
    let known = loss.answered_at.unwrap_or(usize::MAX);
    let lease = Regex::new(LEASE_WRITE).expect("pattern");
    let bad: Vec<String> = log
        .iter()
        .filter(|s| s.n > known && !continues_from_before(log, s, known))
        .filter(|s| {
            let n = frame::normalize(&s.sql);
            write.is_match(&n) || renew.is_match(&n) || lease.is_match(&n)
        })
        .map(|s| {
            format!(
                "statement #{} on connection {}, sent after the zero-row answer to renewal #{} reached the worker (after statement #{known}): {}",
                s.n, s.connection, loss.n, s.sql
            )
        })
        .collect();
    Check::from_violations(
        NO_WRITE_AFTER_LOSS,
        bad,
        format!(
            "renewal #{} confirmed the loss (its answer reached the worker after statement #{known}); no protected write began after it ({} statement(s) after it)",
            loss.n,
            log.len().saturating_sub(known.min(log.len()))
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A statement on connection 1 answered before the next one was sent.
    fn st(n: usize, sql: &str) -> WireStatement {
        WireStatement { n, connection: 1, sql: sql.into(), in_transaction: false, answered_at: Some(n) }
    }

    fn on(n: usize, connection: u64, sql: &str, in_transaction: bool) -> WireStatement {
        WireStatement { n, connection, sql: sql.into(), in_transaction, answered_at: Some(n) }
    }

    #[test]
    fn a_write_after_the_zero_row_renewal_fails_and_one_before_it_passes() {
        let before = vec![
            st(1, "select fp_run_transition($1)"),
            st(2, "select * from fp_lease_renew($1, $2, $3, $4)"),
            st(3, "select status from agent_runs"),
        ];
        assert!(no_write_after_loss(&before, 0).passed());
        let mut after = before.clone();
        after.push(st(4, "select owner, epoch from worker_leases where run_id = $1 for update"));
        let c = no_write_after_loss(&after, 0);
        assert!(!c.passed() && c.evidence.contains("#4"), "{}", c.evidence);
        // A re-acquire after the loss (a resurrection under a new epoch) fails too.
        let mut again = before.clone();
        again.push(st(4, "select * from fp_lease_acquire($1, $2, $3)"));
        assert!(!no_write_after_loss(&again, 0).passed());
        // A write before the takeover mark is not judged; no renewal after it is a failure.
        assert!(no_write_after_loss(&before, 1).passed());
        assert!(!no_write_after_loss(&before, 3).passed());
    }

    /// Another thread's write that reached the proxy after the renewal but before the renewal's
    /// zero-row answer was written back was sent by a worker that could not know yet: no
    /// violation. Sent after the answer, it is one.
    #[test]
    fn a_write_sent_before_the_answer_reached_the_worker_is_not_after_the_loss() {
        let mut renew = on(2, 1, "select * from fp_lease_renew($1, $2, $3, $4)", false);
        renew.answered_at = Some(3);
        let log = vec![
            on(1, 2, "select 1", false),
            renew,
            on(3, 2, "select owner, epoch from worker_leases where run_id = $1 for update", false),
        ];
        assert!(no_write_after_loss(&log, 0).passed(), "{}", no_write_after_loss(&log, 0).evidence);
        assert!(step_under_way(&log, 0), "the write came before the answer");
        let mut late = log.clone();
        late[1].answered_at = Some(2);
        assert!(!no_write_after_loss(&late, 0).passed());
        assert!(!step_under_way(&late, 0));
    }

    /// The statements of a transaction opened before the answer continue old work; a new
    /// transaction opened after it is new work.
    #[test]
    fn a_transaction_opened_before_the_answer_may_finish() {
        let log = vec![
            on(1, 2, "begin", false),
            on(2, 1, "select * from fp_lease_renew($1, $2, $3, $4)", false),
            on(3, 2, "update agent_runs set checkpoint = $1 where run_id = $2", true),
            on(4, 2, "commit", true),
        ];
        assert!(no_write_after_loss(&log, 0).passed(), "{}", no_write_after_loss(&log, 0).evidence);
        let mut next = log.clone();
        next.push(on(5, 2, "begin", false));
        next.push(on(6, 2, "update agent_runs set checkpoint = $1 where run_id = $2", true));
        let c = no_write_after_loss(&next, 0);
        assert!(!c.passed() && c.evidence.contains("#6"), "{}", c.evidence);
    }

    /// A renewal that locks the lease row first: its own lock, sent after the takeover and before
    /// the zero-row UPDATE, is no step under way; a protected write's lock on another connection is.
    #[test]
    fn a_renewals_own_row_lock_is_no_step_under_way() {
        let lock = "select owner, epoch from worker_leases where run_id = $1 for update";
        let mut renew = on(4, 1, "update worker_leases set expires_at = $1 where run_id = $2", true);
        renew.answered_at = Some(4);
        let log = vec![on(2, 1, "begin", false), on(3, 1, lock, true), renew.clone(), on(5, 1, "commit", true)];
        assert!(loss_confirmed(&log, 1));
        assert!(!step_under_way(&log, 1), "the renewal's own lock");
        assert!(no_write_after_loss(&log, 1).passed(), "{}", no_write_after_loss(&log, 1).evidence);
        let other = vec![on(2, 1, "begin", false), on(3, 2, lock, true), renew];
        assert!(step_under_way(&other, 1), "another connection's lock opens a step");
    }

    #[test]
    fn an_unanswered_renewal_confirms_nothing() {
        let mut renew = st(1, "select * from fp_lease_renew($1, $2, $3, $4)");
        renew.answered_at = None;
        assert!(!loss_confirmed(&[renew.clone()], 0));
        assert!(loss_confirmed(&[st(1, &renew.sql)], 0));
    }
}
