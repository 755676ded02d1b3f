//! The subcommands, one file each, each with its `Args` (its flags) and its `run`; `main.rs`
//! only parses and dispatches.

pub mod audit;
pub mod audit_merge;
pub mod bench;
pub mod bench_plan;
pub mod cleanup;
pub mod conformance;
pub mod direct_path;
pub mod direct_sql;
pub mod docs;
pub mod fp_functions;
pub mod groups;
pub mod input;
pub mod list;
pub mod merge;
pub mod model;
pub mod model_merge;
pub mod model_report;
pub mod mutants;
pub mod mutants_sql;
pub mod mutants_sql_merge;
pub mod output;
pub mod rules;
pub mod schedules;
pub mod schedules_merge;
pub mod schedules_mutants;
pub mod sections;
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

/// How a command prints its result: `--json` (one document on stdout) or `--quiet` (only what
/// failed and the closing count line), else the whole text.
#[derive(Clone, Copy, Debug, Default)]
pub struct Print {
    pub json: bool,
    pub quiet: bool,
}

impl Print {
    /// The flags; either one also silences the progress lines on stderr.
    pub fn new(json: bool, quiet: bool) -> Self {
        if json || quiet {
            std::env::set_var("FENCEPROOF_QUIET", "1");
        }
        Print { json, quiet }
    }

    /// `text` as this mode prints it (all of it, or only what `--quiet` keeps).
    pub fn text(self, text: &str) -> String {
        if self.quiet {
            quiet_text(text)
        } else {
            text.to_string()
        }
    }
}

/// The words that mark a line saying something failed (a verdict, a survivor, a deviation).
const FAILURE_WORDS: &[&str] =
    &["FAIL", "FAILED", "ERROR", "SURVIVED", "DEVIATES", "LISTED-BUT-KILLED", "FLAKY", "GRANTED", "FINDING"];

/// What `--quiet` keeps of a command's text: the lines that say what failed, and the last line
/// (the count or verdict line every command ends with).
pub fn quiet_text(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let last = lines.len().saturating_sub(1);
    let failed =
        |l: &str| l.split(|c: char| !c.is_ascii_alphanumeric() && c != '-').any(|w| FAILURE_WORDS.contains(&w));
    let mut s = String::new();
    for (i, l) in lines.iter().enumerate() {
        if i == last || failed(l) {
            s.push_str(l);
            s.push('\n');
        }
    }
    s
}

/// Print `result` as that document (`--json`), or the text (all of it, or `--quiet`'s part) and
/// the run folder.
pub fn print_result(result: &impl serde::Serialize, text: &str, folder: &std::path::Path, p: Print) {
    if p.json {
        outln!("{}", serde_json::to_string_pretty(&with_report(result, folder)).expect("json"));
    } else {
        out!("{}", p.text(text));
        outln!("report: {}", folder.display());
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn quiet_keeps_what_failed_and_the_last_line() {
        let text = "fenceproof mutants run r\nreference: all experiments PASS\nm1 KILLED A\nm2 SURVIVED\n\n1/2 mutants killed\n";
        assert_eq!(super::quiet_text(text), "m2 SURVIVED\n1/2 mutants killed\n");
        assert_eq!(super::quiet_text("a FAILED-ish\nall ok\n"), "all ok\n", "only whole words");
    }
}
