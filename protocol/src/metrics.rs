//! The protocol's metrics (spec section 12), process-wide, in Prometheus text format. Labels carry
//! outcomes and reasons only — never task_id, run_id or operation_id (those belong in logs).
//!
//! | metric | what |
//! |---|---|
//! | `lease_acquire_total{outcome}` | success, busy, missing, db_error |
//! | `lease_renew_total{outcome}` | success, lost, unknown |
//! | `protected_write_rejected_total{reason}` | lease, state, revision |
//! | `lease_row_lock_wait_seconds` | time a protected write waited for the lease row lock |
//! | `tool_operation_unknown_total` | operations this process moved to unknown |
//! | `tool_operation_oldest_unknown_age_seconds` | age of the oldest unknown operation, as last seen by a reconciler |
//! | `workflow_takeover_duration_seconds` | from the previous holder's expiry to this takeover |

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{ProtocolError, RejectReason};

const BUCKETS: [f64; 10] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0];

pub struct Histogram {
    buckets: [AtomicU64; 10],
    count: AtomicU64,
    /// Sum in microseconds.
    sum_us: AtomicU64,
}

impl Histogram {
    const fn new() -> Histogram {
        Histogram { buckets: [const { AtomicU64::new(0) }; 10], count: AtomicU64::new(0), sum_us: AtomicU64::new(0) }
    }

    pub fn observe(&self, seconds: f64) {
        for (i, b) in BUCKETS.iter().enumerate() {
            if seconds <= *b {
                self.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add((seconds.max(0.0) * 1e6) as u64, Ordering::Relaxed);
    }

    fn render(&self, name: &str, help: &str, out: &mut String) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {}", self.buckets[i].load(Ordering::Relaxed));
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "{name}_sum {}", self.sum_us.load(Ordering::Relaxed) as f64 / 1e6);
        let _ = writeln!(out, "{name}_count {count}");
    }
}

pub struct Metrics {
    acquire: [AtomicU64; 4],
    renew: [AtomicU64; 3],
    rejected: [AtomicU64; 3],
    pub lease_row_lock_wait: Histogram,
    pub takeover_duration: Histogram,
    unknown_total: AtomicU64,
    oldest_unknown_ms: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// This process's metrics.
pub static METRICS: Metrics = Metrics::new();

const ACQUIRE: [&str; 4] = ["success", "busy", "missing", "db_error"];
const RENEW: [&str; 3] = ["success", "lost", "unknown"];
const REASONS: [&str; 3] = ["lease", "state", "revision"];

impl Metrics {
    /// All zero.
    pub const fn new() -> Metrics {
        Metrics {
            acquire: [const { AtomicU64::new(0) }; 4],
            renew: [const { AtomicU64::new(0) }; 3],
            rejected: [const { AtomicU64::new(0) }; 3],
            lease_row_lock_wait: Histogram::new(),
            takeover_duration: Histogram::new(),
            unknown_total: AtomicU64::new(0),
            oldest_unknown_ms: AtomicU64::new(0),
        }
    }

    pub fn acquired<T>(&self, r: &Result<T, ProtocolError>) {
        let i = match r {
            Ok(_) => 0,
            Err(ProtocolError::LeaseBusy { .. }) => 1,
            Err(ProtocolError::RunNotFound(_)) => 2,
            Err(_) => 3,
        };
        self.acquire[i].fetch_add(1, Ordering::Relaxed);
    }

    pub fn renewed<T>(&self, r: &Result<T, ProtocolError>) {
        let i = match r {
            Ok(_) => 0,
            Err(ProtocolError::LeaseLost { .. }) => 1,
            Err(_) => 2,
        };
        self.renew[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Count a renewal abandoned without an answer (its outcome is unknown).
    pub fn renew_unconfirmed(&self) {
        self.renew[2].fetch_add(1, Ordering::Relaxed);
    }

    /// Count a batched renewal: `ok` leases renewed, `lost` not.
    pub fn renewed_many(&self, ok: usize, lost: usize) {
        self.renew[0].fetch_add(ok as u64, Ordering::Relaxed);
        self.renew[1].fetch_add(lost as u64, Ordering::Relaxed);
    }

    /// Count a protected write's rejection, if it was one.
    pub fn protected<T>(&self, r: &Result<T, ProtocolError>) {
        if let Err(e) = r {
            if let Some(reason) = e.reject_reason() {
                let i = match reason {
                    RejectReason::Lease => 0,
                    RejectReason::State => 1,
                    RejectReason::Revision => 2,
                };
                self.rejected[i].fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub fn moved_to_unknown(&self) {
        self.unknown_total.fetch_add(1, Ordering::Relaxed);
    }

    pub fn oldest_unknown(&self, seconds: f64) {
        self.oldest_unknown_ms.store((seconds.max(0.0) * 1000.0) as u64, Ordering::Relaxed);
    }

    /// Everything, in Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let counter = |s: &mut String, name: &str, help: &str, label: &str, names: &[&str], vals: &[AtomicU64]| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} counter");
            for (n, v) in names.iter().zip(vals) {
                let _ = writeln!(s, "{name}{{{label}=\"{n}\"}} {}", v.load(Ordering::Relaxed));
            }
        };
        counter(
            &mut s,
            "lease_acquire_total",
            "Lease acquire / takeover attempts by outcome.",
            "outcome",
            &ACQUIRE,
            &self.acquire,
        );
        counter(&mut s, "lease_renew_total", "Lease renewals by outcome.", "outcome", &RENEW, &self.renew);
        counter(
            &mut s,
            "protected_write_rejected_total",
            "Protected writes rejected, by reason.",
            "reason",
            &REASONS,
            &self.rejected,
        );
        self.lease_row_lock_wait.render(
            "lease_row_lock_wait_seconds",
            "Time protected writes waited for the lease row lock.",
            &mut s,
        );
        let _ = writeln!(
            s,
            "# HELP tool_operation_unknown_total Operations moved to unknown by this process.\n# TYPE tool_operation_unknown_total counter\ntool_operation_unknown_total {}",
            self.unknown_total.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            s,
            "# HELP tool_operation_oldest_unknown_age_seconds Age of the oldest unknown operation at the last reconcile.\n# TYPE tool_operation_oldest_unknown_age_seconds gauge\ntool_operation_oldest_unknown_age_seconds {}",
            self.oldest_unknown_ms.load(Ordering::Relaxed) as f64 / 1000.0
        );
        self.takeover_duration.render(
            "workflow_takeover_duration_seconds",
            "From the previous holder's lease expiry to this takeover.",
            &mut s,
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    #[test]
    fn rejections_are_counted_by_reason_and_rendered_without_ids() {
        let m = Metrics::new();
        let lost: Result<(), _> = Err(ProtocolError::LeaseLost { run_id: Uuid::new_v4(), owner: "w".into(), epoch: 1 });
        m.protected(&lost);
        m.protected(&lost);
        m.renewed(&lost);
        m.protected(&Ok::<_, ProtocolError>(1));
        m.lease_row_lock_wait.observe(0.003);
        let text = m.render();
        assert!(text.contains("protected_write_rejected_total{reason=\"lease\"} 2"), "{text}");
        assert!(text.contains("protected_write_rejected_total{reason=\"revision\"} 0"));
        assert!(text.contains("lease_renew_total{outcome=\"lost\"} 1"));
        assert!(
            text.contains("lease_row_lock_wait_seconds_bucket{le=\"0.005\"} 1")
                && text.contains("lease_row_lock_wait_seconds_count 1")
        );
        assert!(!text.contains("run_id") && !text.contains("task_id") && !text.contains("operation_id"));
    }
}
