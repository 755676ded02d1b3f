//! Lease terms (§05.1): a worker's lease commit (acquire, takeover, renewal) sets its expiry to its
//! update time plus exactly the TTL it was asked for, in milliseconds.
//!
//! Both times come from the database's clock inside the writing transaction, and the spec's own
//! statements read that clock once per column. On a loaded server the backend can be descheduled
//! between the two readings, so a correct worker's term differs from its TTL by up to as long as
//! the statement ran. The judgment allows exactly what it observed: a term may differ from an asked
//! TTL by at most the writing transaction's span (its start to its commit, both recorded by the
//! oracle), and by [`FLOOR_MS`] when the span is shorter. A TTL rounded to whole seconds or sent as
//! a formatted duration is off by hundreds of milliseconds in a transaction of a few; when a
//! transaction did run that long, its term proves nothing and is not held against the worker.

use super::evidence::listed;
use super::Found;
use crate::record::oracle::CommitRow;

/// The least difference allowed between a term and an asked TTL (ms), whatever the span: two
/// readings of the clock in one statement lie microseconds apart on an idle server, and a TTL sent
/// in another unit is off by far more.
pub const FLOOR_MS: f64 = 2.0;

/// One lease term a commit wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Term {
    pub seq: i64,
    /// Expiry minus update time, in milliseconds.
    pub ms: f64,
    /// The writing transaction's span (start to commit), in milliseconds, when the oracle has it.
    pub span_ms: Option<f64>,
}

fn ms(d: chrono::Duration) -> Option<f64> {
    Some(d.num_microseconds()? as f64 / 1000.0)
}

impl Term {
    /// The term a lease commit wrote (`None` for a release, another table, or a row without both
    /// times).
    pub fn of(r: &CommitRow) -> Option<Term> {
        if !r.is_leases() {
            return None;
        }
        r.new_str("owner")?;
        let at = |f: &str| chrono::DateTime::parse_from_rfc3339(r.new_str(f)?).ok();
        let term = ms(at("expires_at")? - at("updated_at")?)?;
        let span_ms = r.began_at.and_then(|b| ms(r.committed_at - b));
        Some(Term { seq: r.seq, ms: term, span_ms })
    }

    /// How far the term may lie from an asked TTL.
    pub fn allowance_ms(&self) -> f64 {
        self.span_ms.map_or(FLOOR_MS, |s| s.max(FLOOR_MS))
    }

    /// Whether the term is one of the `asked` TTLs (ms), within its allowance.
    pub fn is_one_of(&self, asked: &[i64]) -> bool {
        asked.iter().any(|a| (self.ms - *a as f64).abs() <= self.allowance_ms())
    }

    /// The violation of a term that is none of the `asked` TTLs, at its commit.
    pub fn describe(&self, asked: &[i64]) -> Found {
        let span = self.span_ms.map_or("unknown".to_string(), |s| format!("{s:.1} ms"));
        let text = format!(
            "commit #{}: a term of {:.1} ms (asked: {} ms; its transaction ran {span}, allowance {:.1} ms)",
            self.seq,
            self.ms,
            listed(asked),
            self.allowance_ms()
        );
        Found::at(self.seq, text)
    }
}

/// The lease terms of `rows` that are none of the `asked` TTLs, described; and how many terms
/// there were.
pub fn off_terms<'a>(rows: impl IntoIterator<Item = &'a CommitRow>, asked: &[i64]) -> (usize, Vec<Found>) {
    let terms: Vec<Term> = rows.into_iter().filter_map(Term::of).collect();
    let off = terms.iter().filter(|t| !t.is_one_of(asked)).map(|t| t.describe(asked)).collect();
    (terms.len(), off)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::commit_rows::{commit_row, CommitRowBuilder};
    use chrono::{DateTime, Utc};
    use serde_json::{json, Value};

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().into()
    }

    /// A lease commit writing `owner`, `updated` and `expires`, in a transaction from `began` to
    /// `committed`.
    fn lease(seq: i64, owner: Value, updated: &str, expires: &str, began: &str, committed: &str) -> CommitRow {
        let r = commit_row(seq, "worker_leases", "UPDATE")
            .change(json!({}), json!({"owner": owner, "updated_at": updated, "expires_at": expires}))
            .at(t(committed));
        CommitRow { began_at: Some(t(began)), ..r }
    }

    #[test]
    fn an_exact_term_passes_and_a_rounded_one_fails() {
        let exact = lease(
            1,
            json!("w"),
            "2026-01-01T00:00:00.100+00:00",
            "2026-01-01T00:00:00.500013+00:00",
            "2026-01-01T00:00:00.099+00:00",
            "2026-01-01T00:00:00.101+00:00",
        );
        let rounded = lease(
            2,
            json!("w"),
            "2026-01-01T00:00:02+00:00",
            "2026-01-01T00:00:03+00:00",
            "2026-01-01T00:00:01.999+00:00",
            "2026-01-01T00:00:02.001+00:00",
        );
        let (n, off) = off_terms([&exact, &rounded], &[400]);
        assert_eq!(n, 2);
        assert_eq!(off.len(), 1, "{off:?}");
        assert!(off[0].text.starts_with("commit #2: a term of 1000.0 ms (asked: 400 ms;"), "{off:?}");
        assert_eq!(off[0].commits, vec![2]);
    }

    #[test]
    fn a_term_stretched_by_its_own_slow_transaction_passes_and_one_beyond_it_fails() {
        // The two clock readings lay 30 ms apart in a statement that ran 35 ms: allowed.
        let slow = lease(
            3,
            json!("w"),
            "2026-01-01T00:00:00.100+00:00",
            "2026-01-01T00:00:01.364+00:00",
            "2026-01-01T00:00:00.090+00:00",
            "2026-01-01T00:00:00.125+00:00",
        );
        assert!(Term::of(&slow).unwrap().is_one_of(&[1234]));
        // The same 30 ms in a transaction of 5 ms cannot be the clock's doing.
        let fast = lease(
            4,
            json!("w"),
            "2026-01-01T00:00:00.100+00:00",
            "2026-01-01T00:00:01.364+00:00",
            "2026-01-01T00:00:00.099+00:00",
            "2026-01-01T00:00:00.104+00:00",
        );
        assert!(!Term::of(&fast).unwrap().is_one_of(&[1234]));
        // Without a recorded start the floor alone applies.
        let unknown = CommitRow { began_at: None, ..slow };
        assert!(!Term::of(&unknown).unwrap().is_one_of(&[1234]));
    }

    #[test]
    fn releases_and_other_tables_have_no_term() {
        let release = lease(
            5,
            Value::Null,
            "2026-01-01T00:00:01+00:00",
            "2026-01-01T00:00:01+00:00",
            "2026-01-01T00:00:01+00:00",
            "2026-01-01T00:00:01+00:00",
        );
        assert!(Term::of(&release).is_none());
        let run = CommitRow {
            table_name: "agent_runs".into(),
            ..lease(
                6,
                json!("w"),
                "2026-01-01T00:00:00Z",
                "2026-01-01T00:00:01Z",
                "2026-01-01T00:00:00Z",
                "2026-01-01T00:00:00Z",
            )
        };
        assert!(Term::of(&run).is_none());
        assert_eq!(off_terms([&release, &run], &[400]), (0, vec![]));
    }
}
