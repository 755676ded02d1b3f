//! The worker contract's flags (docs/worker-protocol.md, Flags), held once: which flags the harness
//! passes a worker, in which mode of start, and what each means. Everything else reads this table:
//! the docs' Flags table is generated from it (`fenceproof docs`), a scripted or dispatcher start
//! takes its mode's flags from it ([`Launch::args`]), and [`command_line`] refuses, before anything
//! starts, a worker command line that omits a flag its mode lists or carries another mode's flag.
//! A worker may stop with status 2 on a missing flag, so a harness that omitted one would blame
//! the worker for its own mistake.

/// How the harness starts a worker process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// It reads commands on stdin: a worker, or a control plane.
    Commands,
    /// It reads commands and reaches the fake tools: a dispatcher or a reconciler.
    Dispatcher,
    /// It runs one whole task alone (`--script`), reading no commands.
    Scripted,
}

impl Mode {
    /// Every mode, for tests that walk them.
    pub const ALL: [Mode; 3] = [Mode::Commands, Mode::Dispatcher, Mode::Scripted];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Commands => "commands",
            Mode::Dispatcher => "dispatcher",
            Mode::Scripted => "scripted",
        }
    }
}

/// When the harness passes a row's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Passed {
    /// On every start of every mode: a worker may insist on them.
    Always,
    /// On every start in these modes, and in no other: a worker started in one may insist on them.
    In(&'static [Mode]),
    /// Only where a row needs it: a worker must not insist on it (it has a default).
    Sometimes,
    /// Alone, on a start that runs nothing (`--list-mutants`); never on a start of [`Mode`].
    Alone,
}

/// One row of the Flags table.
pub struct FlagRow {
    /// Each flag with its value's placeholder (`None`: the flag takes no value).
    pub flags: &'static [(&'static str, Option<&'static str>)],
    /// Whether the docs show the flags as one group (passed together) or as alternatives.
    pub together: bool,
    pub passed: Passed,
    /// The "passed" cell: where the harness passes them, in words.
    pub cell: &'static str,
    pub meaning: &'static str,
}

/// The scripted mode's flags, in the order the docs show them.
const SCRIPT: &[(&str, Option<&str>)] = &[
    ("--script", None),
    ("--run-id", Some("UUID")),
    ("--steps", Some("N")),
    ("--pace-ms", Some("MS")),
    ("--ttl-ms", Some("MS")),
    ("--heartbeat-ms", Some("MS")),
    ("--renew-timeout-ms", Some("MS")),
];

/// The Flags table of the worker contract.
pub const FLAGS: &[FlagRow] = &[
    FlagRow {
        flags: &[("--database-url", Some("URL"))],
        together: true,
        passed: Passed::Always,
        cell: "always",
        meaning: "a libpq URI (`postgres://user@127.0.0.1:PORT/db`) **without a password**: when the server needs one it is in the `PGPASSWORD` environment variable, or in the passfile `PGPASSFILE` (or `~/.pgpass`) names when a team gave the harness one (libpq, pgx, psycopg and sqlx read both by themselves); in rows I and J the host and port are the harness's fault proxy",
    },
    FlagRow {
        flags: &[("--owner", Some("OWNER"))],
        together: true,
        passed: Passed::Always,
        cell: "always",
        meaning: "this process's owner id; also its `application_name`",
    },
    FlagRow {
        flags: &[("--events", Some("FILE"))],
        together: true,
        passed: Passed::Always,
        cell: "always",
        meaning: "append every event here as well as to stdout",
    },
    FlagRow {
        flags: &[("--secrets-dir", Some("DIR"))],
        together: true,
        passed: Passed::Always,
        cell: "always",
        meaning: "the secret store shared by the experiment's processes; **the worker creates it** when it does not exist",
    },
    FlagRow {
        flags: &[("--trace-id", Some("ID"))],
        together: true,
        passed: Passed::Always,
        cell: "always",
        meaning: "put on every log line (one per experiment)",
    },
    FlagRow {
        flags: &[("--write-path", Some("api|direct"))],
        together: true,
        passed: Passed::Always,
        cell: "always",
        meaning: "`api`: every protocol write is a call of a fenced `fp_*` function; `direct`: statements on the tables (see Write paths)",
    },
    FlagRow {
        flags: &[("--tools-addr", Some("HOST:PORT"))],
        together: true,
        passed: Passed::In(&[Mode::Dispatcher]),
        cell: "dispatcher mode: dispatchers and reconcilers",
        meaning: "where the fake tools listen (`docs/fake-tools.md`)",
    },
    FlagRow {
        flags: &[("--tenant", Some("T"))],
        together: true,
        passed: Passed::Sometimes,
        cell: "rarely",
        meaning: "a tenant for operation_ids whose format has one (default `tenant1`; the examples use it)",
    },
    FlagRow {
        flags: &[("--acquire-timeout-ms", Some("MS"))],
        together: true,
        passed: Passed::Sometimes,
        cell: "H and N rows",
        meaning: "how long to wait for a database connection (default 10,000)",
    },
    FlagRow {
        flags: SCRIPT,
        together: true,
        passed: Passed::In(&[Mode::Scripted]),
        cell: "scripted mode: rows A, B-dbfreeze, B-running",
        meaning: "scripted mode (below): every one of these flags on every scripted start",
    },
    FlagRow {
        flags: &[("--list-mutants", None)],
        together: true,
        passed: Passed::Alone,
        cell: "alone, by `mutants`, `schedules`, `conformance`",
        meaning: "print one `name<TAB>rule` line per built-in broken variant and exit 0, or exit non-zero when the build has none; must end within 5 s",
    },
    FlagRow {
        flags: &[("--mutant", Some("NAME")), ("--sql-mutant", Some("FILE"))],
        together: false,
        passed: Passed::Sometimes,
        cell: "`mutants` only",
        meaning: "run a broken variant; only the reference's mutants build needs them",
    },
];

/// The flag that asks a worker for its mutants, the only flag of that start (its row is
/// [`Passed::Alone`]; `mutants`, `schedules` and conformance pass it).
pub const LIST_MUTANTS: &str = "--list-mutants";

/// Every flag the table lists for `mode`: the ones passed always, then the mode's own, in table
/// order.
pub fn required(mode: Mode) -> Vec<&'static str> {
    FLAGS
        .iter()
        .filter(|r| match r.passed {
            Passed::Always => true,
            Passed::In(modes) => modes.contains(&mode),
            Passed::Sometimes | Passed::Alone => false,
        })
        .flat_map(|r| r.flags.iter().map(|f| f.0))
        .collect()
}

/// The row of `flag`, when the table has it.
fn row_of(flag: &str) -> Option<&'static FlagRow> {
    FLAGS.iter().find(|r| r.flags.iter().any(|f| f.0 == flag))
}

/// A scripted worker's task (the contract's `--script` mode): the values of its flags.
#[derive(Debug, Clone)]
pub struct Script {
    pub run_id: uuid::Uuid,
    pub steps: u32,
    pub pace_ms: u64,
    pub ttl_ms: i64,
    pub heartbeat_ms: u64,
    pub renew_timeout_ms: u64,
}

/// How a worker is started: its mode, with the values of that mode's own flags.
#[derive(Debug, Clone)]
pub enum Launch {
    Commands,
    Dispatcher { tools_addr: String },
    Scripted(Script),
}

impl Launch {
    pub fn mode(&self) -> Mode {
        match self {
            Launch::Commands => Mode::Commands,
            Launch::Dispatcher { .. } => Mode::Dispatcher,
            Launch::Scripted(_) => Mode::Scripted,
        }
    }

    /// A dispatcher reaching the fake tools at `addr`.
    pub fn dispatcher(addr: impl ToString) -> Launch {
        Launch::Dispatcher { tools_addr: addr.to_string() }
    }

    /// The value this start gives `flag` (`Some("")` for a flag without a value), if any.
    fn value(&self, flag: &str) -> Option<String> {
        match (self, flag) {
            (Launch::Dispatcher { tools_addr }, "--tools-addr") => Some(tools_addr.clone()),
            (Launch::Scripted(_), "--script") => Some(String::new()),
            (Launch::Scripted(s), "--run-id") => Some(s.run_id.to_string()),
            (Launch::Scripted(s), "--steps") => Some(s.steps.to_string()),
            (Launch::Scripted(s), "--pace-ms") => Some(s.pace_ms.to_string()),
            (Launch::Scripted(s), "--ttl-ms") => Some(s.ttl_ms.to_string()),
            (Launch::Scripted(s), "--heartbeat-ms") => Some(s.heartbeat_ms.to_string()),
            (Launch::Scripted(s), "--renew-timeout-ms") => Some(s.renew_timeout_ms.to_string()),
            _ => None,
        }
    }

    /// The mode's own flags with their values, read from the table: every flag a row of the
    /// table passes in this mode only (a flag this start has no value for is left out, and
    /// [`command_line`] refuses the start).
    pub fn args(&self) -> Vec<String> {
        let mut out = Vec::new();
        for row in FLAGS.iter().filter(|r| matches!(r.passed, Passed::In(m) if m.contains(&self.mode()))) {
            for (flag, placeholder) in row.flags {
                let Some(v) = self.value(flag) else { continue };
                out.push(flag.to_string());
                if placeholder.is_some() {
                    out.push(v);
                }
            }
        }
        out
    }
}

impl From<Script> for Launch {
    fn from(s: Script) -> Launch {
        Launch::Scripted(s)
    }
}

/// What is wrong with a worker command line under the table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagError {
    #[error("the harness starts it in {mode} mode without {missing}, which the worker contract passes on every {mode} start (a harness bug: the worker is not to blame)", mode = .mode.name(), missing = .missing.join(", "))]
    Missing { mode: Mode, missing: Vec<String> },
    #[error("the harness starts it in {mode} mode with {flag}, which the worker contract passes elsewhere ({cell}) (a harness bug: the worker is not to blame)", mode = .mode.name())]
    Foreign { mode: Mode, flag: String, cell: &'static str },
}

/// Judge the command line `args` of a worker started in `mode`: every flag the table lists for
/// the mode is on it, and no flag the table passes only in other modes (or alone) is.
pub fn command_line(mode: Mode, args: &[String]) -> Result<(), FlagError> {
    let missing: Vec<String> =
        required(mode).into_iter().filter(|f| !args.iter().any(|a| a == f)).map(String::from).collect();
    if !missing.is_empty() {
        return Err(FlagError::Missing { mode, missing });
    }
    for a in args.iter().filter(|a| a.starts_with("--")) {
        let Some(row) = row_of(a) else { continue };
        let foreign = match row.passed {
            Passed::In(modes) => !modes.contains(&mode),
            Passed::Alone => true,
            Passed::Always | Passed::Sometimes => false,
        };
        if foreign {
            return Err(FlagError::Foreign { mode, flag: a.clone(), cell: row.cell });
        }
    }
    Ok(())
}

/// The Flags table as the docs show it (docs/worker-protocol.md, `generated:worker-flags`).
pub fn markdown() -> String {
    let mut s = String::from("| flag | passed | meaning |\n|---|---|---|\n");
    for row in FLAGS {
        let shown: Vec<String> = row
            .flags
            .iter()
            .map(|(f, v)| match v {
                Some(v) => format!("{f} {}", v.replace('|', "\\|")),
                None => f.to_string(),
            })
            .collect();
        let flags = if row.together {
            format!("`{}`", shown.join(" "))
        } else {
            shown.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ")
        };
        s.push_str(&format!("| {flags} | {} | {} |\n", row.cell, row.meaning));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags every mode is passed whatever the start (the worker process's own and the
    /// session's), with sample values.
    fn always() -> Vec<String> {
        let mut v = Vec::new();
        for f in required(Mode::Commands) {
            v.extend([f.to_string(), "x".to_string()]);
        }
        v
    }

    /// One start of each mode, built as the spawn code builds it.
    fn launch(mode: Mode) -> Launch {
        match mode {
            Mode::Commands => Launch::Commands,
            Mode::Dispatcher => Launch::dispatcher("127.0.0.1:1"),
            Mode::Scripted => Launch::Scripted(Script {
                run_id: uuid::Uuid::nil(),
                steps: 2,
                pace_ms: 0,
                ttl_ms: 5000,
                heartbeat_ms: 500,
                renew_timeout_ms: 1000,
            }),
        }
    }

    #[test]
    fn every_mode_is_started_with_every_flag_the_table_lists_for_it() {
        for mode in Mode::ALL {
            let l = launch(mode);
            assert_eq!(l.mode(), mode);
            let args = [always(), l.args()].concat();
            assert_eq!(command_line(mode, &args), Ok(()), "{mode:?}: {args:?}");
            for f in required(mode) {
                assert!(args.iter().any(|a| a == f), "{mode:?} starts without {f}");
            }
        }
        assert!(required(Mode::Scripted).contains(&"--pace-ms"));
        assert!(required(Mode::Dispatcher).contains(&"--tools-addr"));
        assert!(!required(Mode::Commands).contains(&"--tools-addr"));
    }

    #[test]
    fn a_start_that_omits_a_flag_or_borrows_another_modes_is_refused() {
        // Row A's old start: scripted without --pace-ms.
        let mut args = [always(), launch(Mode::Scripted).args()].concat();
        let i = args.iter().position(|a| a == "--pace-ms").unwrap();
        args.drain(i..i + 2);
        let e = command_line(Mode::Scripted, &args).unwrap_err();
        assert_eq!(e, FlagError::Missing { mode: Mode::Scripted, missing: vec!["--pace-ms".into()] });
        assert!(e.to_string().contains("scripted mode without --pace-ms"), "{e}");
        // Scripted flags by hand on a commands start.
        let args = [always(), launch(Mode::Scripted).args()].concat();
        assert!(
            matches!(command_line(Mode::Commands, &args), Err(FlagError::Foreign { flag, .. }) if flag == "--script")
        );
        let args = [always(), vec!["--list-mutants".into()]].concat();
        assert!(matches!(command_line(Mode::Commands, &args), Err(FlagError::Foreign { .. })));
        // Optional flags and flags outside the contract (a mutant build's own) pass.
        let args =
            [always(), vec!["--acquire-timeout-ms".into(), "1500".into(), "--report-statements".into()]].concat();
        assert_eq!(command_line(Mode::Commands, &args), Ok(()));
        assert!(matches!(command_line(Mode::Dispatcher, &always()), Err(FlagError::Missing { .. })));
    }

    #[test]
    fn the_list_mutants_start_is_the_tables_one_start_alone() {
        let alone: Vec<&str> =
            FLAGS.iter().filter(|r| r.passed == Passed::Alone).flat_map(|r| r.flags.iter().map(|f| f.0)).collect();
        assert_eq!(alone, [LIST_MUTANTS]);
    }

    #[test]
    fn the_table_renders_one_line_per_row_with_pipes_escaped() {
        let md = markdown();
        assert_eq!(md.lines().count(), FLAGS.len() + 2);
        assert!(md.contains("| `--write-path api\\|direct` | always |"), "{md}");
        assert!(md.contains("`--script --run-id UUID --steps N --pace-ms MS --ttl-ms MS"), "{md}");
        assert!(md.contains("| `--mutant NAME`, `--sql-mutant FILE` |"), "{md}");
    }
}
