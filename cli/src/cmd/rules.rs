//! `fenceproof rules`: the rule catalogue with, per rule, the checkers that judge it and the
//! experiments that exercise it.

use fenceproof_harness::check::catalogue;
use fenceproof_harness::report::exit;

pub fn run(json: bool) -> u8 {
    let rules = catalogue::RULES;
    if json {
        println!("{}", serde_json::to_string_pretty(rules).expect("json"));
        return exit::OK;
    }
    let w = rules.iter().map(|r| r.id.len()).max().unwrap_or(0);
    for r in rules {
        println!("{:<w$}  §{:<5} {}", r.id, r.section, r.statement);
        println!("{:<w$}         judged by: {}", "", r.checkers.join("; "));
        println!("{:<w$}         exercised by: {}", "", r.experiments.join(", "));
    }
    let checkers: std::collections::BTreeSet<&str> = rules.iter().flat_map(|r| r.checkers.iter().copied()).collect();
    println!("{} rules, judged by {} distinct checkers", rules.len(), checkers.len());
    exit::OK
}
