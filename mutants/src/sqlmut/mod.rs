//! Generated SQL mutants: of the fenced `fp_*` functions (migration 0002), the path the reference
//! worker, P-role and every deployment with the permission boundary use, and of any other SQL
//! statement handed to [`generate_statement`] (the scenarios crate passes the worker's direct-path
//! statements).
//!
//! Standard mutation operators ([`operators::Operator`]) are applied one site at a time. A function
//! mutant is a `CREATE OR REPLACE FUNCTION` statement the harness runs in an experiment's fresh
//! database, so no rebuild is needed per mutant; a statement mutant is the whole mutated statement.
//! Ids are `<function>/<operator>/<n>` or `direct/<statement>/<operator>/<n>` (the n-th site of that
//! operator, in text order), stable as long as the text is.

pub mod operators;
pub mod parse;
pub mod scan;

use serde::{Deserialize, Serialize};

pub use operators::Operator;

/// The migration whose functions are mutated.
pub const SOURCE_FILE: &str = "migrations/0002_worker_role.sql";

/// One generated mutant.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SqlMutant {
    pub id: String,
    pub function: String,
    pub operator: Operator,
    /// The 1-based line of `SOURCE_FILE` the (first) edit changes.
    pub line: usize,
    /// That line before and after.
    pub before: String,
    pub after: String,
    /// The statement that installs the mutated function.
    pub sql: String,
}

/// Every mutant of every fp_* function of migration 0002.
pub fn generate() -> Vec<SqlMutant> {
    generate_from(fenceproof_harness::db::databases::MIGRATIONS[1].1)
}

/// Every mutant of the fp_* functions defined in `sql`, in file order, then operator order.
pub fn generate_from(sql: &str) -> Vec<SqlMutant> {
    let mut out = Vec::new();
    for f in parse::functions(sql) {
        for &op in Operator::ALL {
            for (n, (focus, edits)) in operators::sites_focused(op, &f.body).into_iter().enumerate() {
                let body = operators::apply(&f.body, &edits);
                if body == f.body {
                    continue;
                }
                let first = edits.iter().map(|e| e.start).min().unwrap_or(0);
                out.push(SqlMutant {
                    id: format!("{}/{}/{}", f.name, op.name(), n + 1),
                    function: f.name.clone(),
                    operator: op,
                    line: f.line_of(focus),
                    before: f.line_text(&f.body, focus),
                    after: f.line_text(&body, first),
                    sql: f.replacement(&body),
                });
            }
        }
    }
    out
}

/// Every mutant of one direct-path statement (`name`, its reference `text`), with ids
/// `direct/<name>/<operator>/<n>` and the line counted within the statement. Its `sql` is the whole
/// mutated statement, which a mutants build of the worker runs in place of the original.
pub fn generate_statement(name: &str, text: &str) -> Vec<SqlMutant> {
    let f =
        parse::Function { name: format!("direct/{name}"), header: String::new(), body: text.to_string(), body_line: 1 };
    let mut out = Vec::new();
    for &op in Operator::ALL {
        for (n, (focus, edits)) in operators::sites_focused(op, text).into_iter().enumerate() {
            let body = operators::apply(text, &edits);
            if body == text {
                continue;
            }
            let first = edits.iter().map(|e| e.start).min().unwrap_or(0);
            out.push(SqlMutant {
                id: format!("direct/{name}/{}/{}", op.name(), n + 1),
                function: format!("direct/{name}"),
                operator: op,
                line: f.line_of(focus),
                before: f.line_text(text, focus),
                after: f.line_text(&body, first),
                sql: body,
            });
        }
    }
    out
}

/// The deterministic share `k` of `n` (1-based) of `mutants`: every n-th, starting at the k-th.
pub fn shard<T: Clone>(mutants: &[T], k: usize, n: usize) -> Vec<T> {
    mutants.iter().enumerate().filter(|(i, _)| n > 0 && i % n == k.saturating_sub(1)).map(|(_, m)| m.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(ms: &[SqlMutant]) -> Vec<&str> {
        ms.iter().map(|m| m.id.as_str()).collect()
    }

    #[test]
    fn every_operator_finds_its_sites_in_the_migration() {
        let ms = generate();
        for op in Operator::ALL {
            assert!(ms.iter().any(|m| m.operator == *op), "{} found no site", op.name());
        }
        let renew: Vec<&SqlMutant> = ms.iter().filter(|m| m.function == "fp_lease_renew").collect();
        let conj: Vec<&str> =
            renew.iter().filter(|m| m.operator == Operator::DropConjunct).map(|m| m.after.as_str()).collect();
        assert_eq!(conj.len(), 4, "{conj:?}");
        assert!(conj.contains(&"WHERE l.run_id = p_run AND l.owner = p_owner AND l.expires_at > clock_timestamp()"));
        assert!(conj.contains(&"WHERE l.run_id = p_run AND l.owner = p_owner AND l.epoch = p_epoch"));
        let ids = ids(&ms);
        let unique: std::collections::BTreeSet<&str> = ids.iter().copied().collect();
        assert_eq!(unique.len(), ids.len(), "ids are unique");
    }

    #[test]
    fn the_lease_guard_loses_each_rejection_reason_and_the_whole_guard() {
        let ms = generate();
        let t: Vec<&SqlMutant> = ms.iter().filter(|m| m.function == "fp_run_transition").collect();
        let guard =
            "IF v_owner IS DISTINCT FROM p_owner OR v_epoch IS DISTINCT FROM p_epoch OR v_live IS NOT TRUE THEN";
        let drops: Vec<&str> = t
            .iter()
            .filter(|m| m.operator == Operator::DropConjunct && m.before == guard)
            .map(|m| m.after.as_str())
            .collect();
        assert_eq!(
            drops,
            vec![
                "IF v_epoch IS DISTINCT FROM p_epoch OR v_live IS NOT TRUE THEN",
                "IF v_owner IS DISTINCT FROM p_owner OR v_live IS NOT TRUE THEN",
                "IF v_owner IS DISTINCT FROM p_owner OR v_epoch IS DISTINCT FROM p_epoch THEN"
            ]
        );
        assert!(t.iter().any(|m| m.operator == Operator::DropGuard && m.after == "IF false THEN"));
        let lock: Vec<&str> = t.iter().filter(|m| m.operator == Operator::DropLock).map(|m| m.after.as_str()).collect();
        assert!(lock.contains(&"FROM worker_leases l WHERE l.run_id = p_run;"), "{lock:?}");
    }

    #[test]
    fn the_claim_loses_its_join_with_the_run_filter_and_its_skip_locked() {
        let ms = generate();
        let c: Vec<&SqlMutant> = ms.iter().filter(|m| m.function == "fp_claim").collect();
        let join = c.iter().find(|m| m.operator == Operator::DropJoin).expect("a join mutant");
        assert!(!join.sql.contains("JOIN agent_runs") && !join.sql.contains("r.status IN"), "{}", join.sql);
        assert!(join.sql.contains("WHERE c.status = 'prepared'"), "{}", join.sql);
        let skip = c.iter().find(|m| m.operator == Operator::DropSkipLocked).expect("skip locked");
        assert!(skip.sql.contains("FOR UPDATE OF c\n") || skip.sql.contains("FOR UPDATE OF c LIMIT"), "{}", skip.sql);
        assert!(c.iter().any(|m| m.operator == Operator::DropIncrement && m.after.contains("revision = o.revision,")));
    }

    #[test]
    fn clocks_are_replaced_only_in_comparisons_and_flips_skip_not_equal() {
        let ms = generate();
        for m in ms.iter().filter(|m| matches!(m.operator, Operator::ClockNow | Operator::ClockStatement)) {
            assert!(m.after.contains('<') || m.after.contains('>'), "{}: {}", m.id, m.after);
        }
        assert!(!ms.iter().any(|m| m.operator == Operator::FlipComparison && m.before.contains("<>")));
    }

    #[test]
    fn shards_partition_the_set() {
        let ms = generate();
        let mut all: Vec<String> = (1..=3).flat_map(|k| shard(&ms, k, 3)).map(|m| m.id).collect();
        all.sort();
        let mut want: Vec<String> = ms.iter().map(|m| m.id.clone()).collect();
        want.sort();
        assert_eq!(all, want);
    }
}
#[cfg(test)]
mod dump {
    #[test]
    #[ignore]
    fn dump() {
        for m in super::generate() {
            println!("{:<45} L{:<4} {}\n{:52}=> {}", m.id, m.line, m.before, "", m.after);
        }
    }
}
