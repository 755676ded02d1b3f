//! `fenceproof rules`: the rule catalogue with, per rule, the checkers that judge it and the
//! experiments that exercise it.

use fenceproof_harness::report::exit;
use fenceproof_scenarios::catalogue;

/// List the spec's rules, each with the checkers that judge it and the experiments that
/// exercise it.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    out: crate::cmd::output::Output,
    /// Print the catalogue as the Markdown table of docs/detection.md.
    #[arg(long, conflicts_with = "json")]
    markdown: bool,
}

pub fn run(Args { out, markdown }: Args) -> u8 {
    if markdown {
        out!("{}", crate::cmd::docs::rules_markdown());
        return exit::OK;
    }
    let rules = catalogue::RULES;
    if out.json {
        let with_rows: Vec<serde_json::Value> = rules
            .iter()
            .map(|r| {
                let rows: Vec<&str> = catalogue::exercised_by(r).iter().map(|e| e.id).collect();
                serde_json::json!({"id": r.id, "section": r.section, "statement": r.statement, "checkers": r.checkers, "experiments": rows})
            })
            .collect();
        outln!("{}", serde_json::to_string_pretty(&with_rows).expect("json"));
        return exit::OK;
    }
    let w = rules.iter().map(|r| r.id.len()).max().unwrap_or(0);
    for r in rules.iter().filter(|_| !out.quiet) {
        outln!("{:<w$}  §{:<5} {}", r.id, r.section, r.statement);
        outln!("{:<w$}         judged by: {}", "", r.checkers.join("; "));
        let rows: Vec<&str> = catalogue::exercised_by(r).iter().map(|e| e.id).collect();
        outln!("{:<w$}         exercised by: {}", "", rows.join(", "));
    }
    let checkers: std::collections::BTreeSet<&str> = rules.iter().flat_map(|r| r.checkers.iter().copied()).collect();
    outln!("{} rules, judged by {} distinct checkers", rules.len(), checkers.len());
    exit::OK
}
