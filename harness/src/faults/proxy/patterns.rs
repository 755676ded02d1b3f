//! The statements the experiments pick with the proxy, as patterns over normalized SQL (lower
//! case, no quotes, single spaces). They name the protocol's tables and functions, not any one
//! worker's statements: a worker writing through the `fp_*` functions and one writing the tables
//! directly (with or without a schema) are both matched.

/// A write of the run row: a protected transition (save, start, succeed, fail).
pub const RUN_WRITE: &str = r"\bfp_run_transition\b|\bupdate (\w+\.)?agent_runs\b";

/// The first statement of a protected write: the fenced function, the lease row lock the direct
/// path takes first, or the run update of a worker that locks nothing before it.
pub const PROTECTED_ENTRY: &str = r"\bfp_run_transition\b|\bfrom (\w+\.)?worker_leases\b.*\bfor (no key )?(update|share)\b|\bupdate (\w+\.)?agent_runs\b";

/// A lease renewal, one lease or a batch.
pub const LEASE_RENEW: &str = r"\bfp_lease_renew(_many)?\b|\bupdate (\w+\.)?worker_leases\b";

/// The first statement of a lease renewal: the fenced function, the lease row's UPDATE, or the
/// lease row lock of a renewal that locks the row first (`SELECT … FOR UPDATE`, then its UPDATE,
/// in one transaction). A protected write opens with the same lock: pick with it only while no
/// protected write is due (a worker inside its work's pacing).
pub const RENEWAL_ENTRY: &str = r"\bfp_lease_renew(_many)?\b|\bupdate (\w+\.)?worker_leases\b|\bfrom (\w+\.)?worker_leases\b.*\bfor (no key )?update\b";

/// A durable step of a command: a write of the run or of the outbox (a protected transition with
/// or without an intent, a claim, a result, an unknown mark, a convergence), not of the lease (a
/// heartbeat's renewals go on while a command runs and are no step of it).
pub const DURABLE_STEP: &str = r"\bfp_(run_transition|claim|record_result|mark_unknown_own|mark_expired_unknown|converge)\b|\b(insert into|update|delete from) (\w+\.)?(agent_runs|tool_operations)\b";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::proxy::frame::normalize;
    use regex::Regex;

    #[test]
    fn patterns_match_both_write_paths_and_nothing_else() {
        let run = Regex::new(RUN_WRITE).unwrap();
        for s in [
            "SELECT * FROM fp_run_transition($1, $2, $3)",
            "UPDATE agent_runs SET revision = revision + 1",
            "update \"fp_x\".\"agent_runs\" set status = $1",
        ] {
            assert!(run.is_match(&normalize(s)), "{s}");
        }
        for s in ["SELECT status FROM agent_runs", "UPDATE worker_leases SET x = 1", "SELECT fp_lease_renew($1)"] {
            assert!(!run.is_match(&normalize(s)), "{s}");
        }
        let renew = Regex::new(LEASE_RENEW).unwrap();
        for s in
            ["SELECT fp_lease_renew($1,$2,$3,$4)", "select * from fp_lease_renew_many($1)", "UPDATE worker_leases SET"]
        {
            assert!(renew.is_match(&normalize(s)), "{s}");
        }
        assert!(!renew.is_match(&normalize("SELECT fp_lease_acquire($1)")));
        let entry = Regex::new(PROTECTED_ENTRY).unwrap();
        for s in [
            "SELECT owner, epoch FROM worker_leases WHERE run_id = $1 FOR UPDATE",
            "select * from fp_run_transition($1)",
            "UPDATE agent_runs SET revision = revision + 1",
        ] {
            assert!(entry.is_match(&normalize(s)), "{s}");
        }
        assert!(!entry.is_match(&normalize("SELECT owner FROM worker_leases WHERE run_id = $1")));
        let renewal = Regex::new(RENEWAL_ENTRY).unwrap();
        for s in [
            "SELECT fp_lease_renew($1)",
            "UPDATE worker_leases SET x = 1",
            "SELECT owner FROM worker_leases WHERE run_id = $1 FOR UPDATE",
        ] {
            assert!(renewal.is_match(&normalize(s)), "{s}");
        }
        for s in ["SELECT owner FROM worker_leases WHERE run_id = $1", "SELECT fp_lease_acquire($1)"] {
            assert!(!renewal.is_match(&normalize(s)), "{s}");
        }
        let durable = Regex::new(DURABLE_STEP).unwrap();
        for s in [
            "SELECT * FROM fp_run_transition($1)",
            "SELECT revision FROM fp_record_result($1, $2)",
            "select * from fp_claim($1, $2, $3)",
            "INSERT INTO tool_operations (operation_id) VALUES ($1)",
            "UPDATE \"fp_x\".\"tool_operations\" SET status = $1",
        ] {
            assert!(durable.is_match(&normalize(s)), "{s}");
        }
        for s in ["SELECT fp_lease_renew($1)", "UPDATE worker_leases SET x = 1", "SELECT * FROM tool_operations"] {
            assert!(!durable.is_match(&normalize(s)), "{s}");
        }
    }
}
