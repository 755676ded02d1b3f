//! The exit codes each subcommand's `--help` lists: one meaning per code across every subcommand
//! (the values are `fenceproof_harness::report::exit`), and per subcommand only the codes it can
//! return. docs/results.md explains them.

use fenceproof_harness::report::exit;

/// SIGINT (SIGTERM gives 143, listed on the same line).
pub const INTERRUPTED: u8 = 130;

/// What each code means, the same for every subcommand.
pub fn meaning(code: u8) -> &'static str {
    match code {
        exit::OK => "success: everything ran and nothing failed",
        exit::FAILED => "a FAIL: a check failed, a mutant survived, a finding",
        exit::USAGE => "usage: bad flags or input (a file, a URL, a folder that cannot be read or written)",
        exit::HARNESS => "no verdict: the harness failed, or a row ended in ERROR",
        exit::CONFORMANCE => "the worker deviates from the worker contract (its own output shows it)",
        exit::STARVED => "no FAIL and no ERROR, but a row was STARVED: the machine was too busy for a verdict",
        INTERRUPTED => "interrupted by SIGINT (143: SIGTERM); every process it started is stopped",
        _ => "?",
    }
}

const ALL: &[u8] = &[0, 1, 2, 3, 4, 5, 130];
const MATRIX: &[u8] = &[0, 1, 2, 3, 4, 5, 130];
const SEARCH: &[u8] = &[0, 1, 2, 3, 130];
const JUDGE: &[u8] = &[0, 1, 2, 3];
const MEASURE: &[u8] = &[0, 2, 3, 130];
const WRITE: &[u8] = &[0, 2, 3];
const LISTING: &[u8] = &[0, 2];

/// The codes the subcommand at `path` ("verify", "bench plan"; "" for `fenceproof` itself) can
/// return.
pub fn codes(path: &str) -> &'static [u8] {
    match path {
        "verify" => MATRIX,
        "conformance" => &[0, 2, 3, 4, 130],
        "verify-versions" => &[0, 1, 2, 3, 5, 130],
        "mutants"
        | "mutants named"
        | "mutants sql"
        | "schedules"
        | "schedules run"
        | "schedules against-mutants"
        | "audit"
        | "writers" => SEARCH,
        "model" | "model check" => JUDGE,
        "model weak-spots" => &[0, 1, 2],
        "merge" | "model merge" | "docs" => JUDGE,
        "bench" => MEASURE,
        "bench plan" | "bench merge" | "cleanup" => WRITE,
        "list" | "rules" => LISTING,
        _ => ALL,
    }
}

/// The "Exit codes:" block of the subcommand at `path`.
pub fn exit_codes(path: &str) -> String {
    let mut s = String::from("Exit codes:");
    for c in codes(path) {
        s.push_str(&format!("\n  {c:<4} {}", meaning(*c)));
    }
    s
}

/// `command` with its exit codes after its options, and those of its subcommands (recursively).
pub fn with_exit_codes(command: clap::Command, path: &str) -> clap::Command {
    let command = command.after_help(exit_codes(path));
    let path = path.to_string();
    command.mut_subcommands(move |s| {
        let name = s.get_name().to_string();
        let sub = if path.is_empty() { name } else { format!("{path} {name}") };
        with_exit_codes(s, &sub)
    })
}

#[cfg(test)]
mod tests {
    use fenceproof_harness::report::exit;

    #[test]
    fn each_code_means_what_the_harness_constants_say() {
        for (code, what) in [
            (exit::OK, "nothing failed"),
            (exit::FAILED, "FAIL"),
            (exit::USAGE, "usage"),
            (exit::HARNESS, "ERROR"),
            (exit::CONFORMANCE, "deviates"),
            (exit::STARVED, "STARVED"),
            (super::INTERRUPTED, "SIGINT"),
        ] {
            assert!(super::meaning(code).contains(what), "{code}: {}", super::meaning(code));
        }
        assert!(super::exit_codes("list").lines().count() == 3, "{}", super::exit_codes("list"));
    }
}
