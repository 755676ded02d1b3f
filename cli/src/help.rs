//! The exit codes every subcommand's `--help` lists (the truth is `fenceproof_harness::report::exit`).

/// Shown after the options of `fenceproof --help` and of every subcommand's `--help`.
pub const EXIT_CODES: &str = "\
Exit codes:
  0    everything passed
  1    a FAIL (a check failed, a mutant survived, a finding)
  2    usage: bad flags or input files
  3    harness error, or an experiment that ended in ERROR
  4    the worker deviates from the worker contract (conformance; verify stops before the matrix)
  5    no FAIL or ERROR, but an experiment was STARVED (the machine too busy for a verdict)
  130  interrupted by SIGINT (143: SIGTERM); every process it started is stopped";

#[cfg(test)]
mod tests {
    use fenceproof_harness::report::exit;

    #[test]
    fn the_listed_codes_are_the_harness_constants() {
        for (code, what) in [
            (exit::OK, "passed"),
            (exit::FAILED, "FAIL"),
            (exit::USAGE, "usage"),
            (exit::HARNESS, "ERROR"),
            (exit::CONFORMANCE, "deviates"),
            (exit::STARVED, "STARVED"),
        ] {
            let line = super::EXIT_CODES.lines().find(|l| l.trim_start().starts_with(&format!("{code} "))).unwrap();
            assert!(line.contains(what), "{line}");
        }
    }
}
