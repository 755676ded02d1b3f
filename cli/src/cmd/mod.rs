//! The subcommands, one file each, each with its `Args` (its flags) and its `run`; `main.rs`
//! only parses and dispatches.

pub mod audit;
pub mod bench;
pub mod bench_plan;
pub mod cleanup;
pub mod conformance;
pub mod docs;
pub mod fp_functions;
pub mod input;
pub mod list;
pub mod merge;
pub mod model;
pub mod mutants;
pub mod mutants_sql;
pub mod rules;
pub mod schedules;
pub mod schedules_mutants;
pub mod verify;
pub mod verify_versions;
pub mod writers;

/// A command's result as the one document `--json` prints: the saved report's fields, and
/// `report`, the run folder.
pub fn with_report(result: &impl serde::Serialize, folder: &std::path::Path) -> serde_json::Value {
    let mut v = serde_json::to_value(result).expect("a report serializes");
    v["report"] = serde_json::json!(folder);
    v
}

/// Print `result` as that document (`--json`), or `text` and the run folder.
pub fn print_result(result: &impl serde::Serialize, text: &str, folder: &std::path::Path, json: bool) {
    if json {
        println!("{}", serde_json::to_string_pretty(&with_report(result, folder)).expect("json"));
    } else {
        print!("{text}");
        println!("report: {}", folder.display());
    }
}
