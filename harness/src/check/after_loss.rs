//! Stopping after a confirmed loss (spec §05.2, §07): a renewal that matches zero rows means the
//! lease is lost; the worker cancels its execution and starts no new work. A worker whose
//! heartbeat ends on the zero-row renewal without cancelling passes every check of committed
//! state (the fencing rejects its later writes), while it goes on working for a run it no longer
//! owns.
//!
//! Judged from the wire, for any worker: the harness's proxy logs every statement the worker
//! sends, in order. The experiment makes the loss certain before a chosen renewal reaches the
//! server (it holds the renewal in the proxy until the lease has been taken over), so that
//! renewal's answer is the confirmed loss; every protected write the worker sends after that
//! renewal began after the loss. A protected write is recognised by its first statement
//! ([`patterns::PROTECTED_ENTRY`]: the fenced function, the lease row lock, or the run update), so
//! an attempt the fencing refuses before it reaches the run row is seen too.

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

/// Whether a renewal reached the server after `from` in `log`: the moment
/// [`no_write_after_loss`] judges was made.
pub fn loss_confirmed(log: &[WireStatement], from: usize) -> bool {
    let renew = Regex::new(patterns::LEASE_RENEW).expect("pattern");
    log.iter().any(|s| s.n > from && renew.is_match(&frame::normalize(&s.sql)))
}

/// `log` is the worker's statements in order; `from` the log's length when the loss was made
/// certain (the lease taken over). The first renewal after `from` is the confirmed loss; any
/// protected write begun after it is a violation. ERROR-free by construction: no such renewal means the worker
/// never confirmed the loss, which the experiment reports itself.
pub fn no_write_after_loss(log: &[WireStatement], from: usize) -> Check {
    let renew = Regex::new(patterns::LEASE_RENEW).expect("pattern");
    let write = Regex::new(patterns::PROTECTED_ENTRY).expect("pattern");
    let later: Vec<&WireStatement> = log.iter().filter(|s| s.n > from).collect();
    let Some(loss) = later.iter().find(|s| renew.is_match(&frame::normalize(&s.sql))) else {
        return Check::fail(
            NO_WRITE_AFTER_LOSS,
            "no renewal reached the server after the takeover: the loss was never confirmed",
        );
    };
    let lease = Regex::new(LEASE_WRITE).expect("pattern");
    let bad: Vec<String> = later
        .iter()
        .filter(|s| s.n > loss.n)
        .filter(|s| {
            let n = frame::normalize(&s.sql);
            write.is_match(&n) || renew.is_match(&n) || lease.is_match(&n)
        })
        .map(|s| {
            format!(
                "statement #{} on connection {} after the zero-row renewal #{}: {}",
                s.n, s.connection, loss.n, s.sql
            )
        })
        .collect();
    Check::from_violations(
        NO_WRITE_AFTER_LOSS,
        bad,
        format!(
            "renewal #{} confirmed the loss; no protected write followed it ({} statement(s) after it)",
            loss.n,
            later.len()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(n: usize, sql: &str) -> WireStatement {
        WireStatement { n, connection: 1, sql: sql.into(), in_transaction: false }
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
}
