//! The schedules' lease terms (rule lease.ttl-milliseconds, §05.1): every term a worker committed
//! (an acquire, a takeover, a renewal) lasts exactly one of the TTLs the schedule asked for, in
//! milliseconds: expiry minus update time, read from the oracle's rows, within the span of the
//! transaction that wrote it. A worker that rounds the TTL to seconds (or passes a formatted
//! duration) commits terms of another length.

use fenceproof_harness::check::evidence::listed;
use fenceproof_harness::check::{lease_terms, Check};
use fenceproof_harness::record::oracle::CommitRow;
use fenceproof_scenarios::tags::{tagged, LEASE_TTL_MILLISECONDS};

/// The check's name (tagged: the catalogue links it by the tag's pattern).
pub fn name() -> String {
    tagged(
        LEASE_TTL_MILLISECONDS,
        "every lease term a worker committed in the schedule lasts exactly a TTL it was asked for",
    )
}

/// Judge the workers' lease commits of `rows` against the TTLs `asked` (milliseconds), each
/// within its own transaction's span ([`lease_terms`]); `None` when no worker committed a term.
pub fn judge(rows: &[CommitRow], asked: &[i64]) -> Option<Check> {
    let workers = rows.iter().filter(|r| r.writer.starts_with("worker-"));
    let (n, bad) = lease_terms::off_terms(workers, asked);
    if n == 0 {
        return None;
    }
    Some(Check::from_found(name(), bad, format!("{n} terms, each an asked TTL ({} ms)", listed(asked))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lease_commit(seq: i64, owner: Option<&str>, updated: &str, expires: &str) -> CommitRow {
        let mut r: CommitRow = serde_json::from_value(json!({
            "seq": seq, "table_name": "worker_leases", "op": "UPDATE", "writer": "worker-w0-1-abcd",
            "login": "fenceproof_worker", "backend_pid": 1, "committed_at": "2026-01-01T00:00:00Z",
        }))
        .unwrap();
        r.new_row = Some(json!({"owner": owner, "updated_at": updated, "expires_at": expires}));
        r
    }

    #[test]
    fn terms_of_an_asked_ttl_pass_and_rounded_ones_fail() {
        let exact = lease_commit(1, Some("w"), "2026-01-01T00:00:00.100000+00:00", "2026-01-01T00:00:00.500013+00:00");
        let release = lease_commit(2, None, "2026-01-01T00:00:01+00:00", "2026-01-01T00:00:01+00:00");
        assert!(judge(&[exact.clone(), release.clone()], &[400, 5000]).unwrap().passed());
        let rounded = lease_commit(3, Some("w"), "2026-01-01T00:00:02+00:00", "2026-01-01T00:00:03+00:00");
        let c = judge(&[exact, rounded], &[400, 5000]).unwrap();
        assert!(!c.passed() && c.evidence.contains("commit #3: a term of 1000.0 ms"), "{}", c.evidence);
        assert!(judge(&[release], &[400]).is_none());
    }
}
