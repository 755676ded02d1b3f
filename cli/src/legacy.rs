//! The commands' spellings from before the CLI was grouped (`mutants-sql`, `schedules-mutants`,
//! the three `*-merge`, and `mutants`/`schedules` with flags and no command of the group). Each
//! still runs as its new spelling, after one line on stderr naming it, so a script keeps working
//! and says what to change; stdout (a `--json` document) is the new command's alone.

use std::ffi::OsString;

/// Old top-level commands and the words that replace them.
const RENAMED: &[(&str, &[&str])] = &[
    ("mutants-sql", &["mutants", "sql"]),
    ("schedules-mutants", &["schedules", "against-mutants"]),
    ("mutants-sql-merge", &["merge"]),
    ("schedules-merge", &["merge"]),
    ("audit-merge", &["merge"]),
];

/// Groups whose name alone once ran a command, and that command's name in the group.
const GROUPED: &[(&str, &str)] = &[("mutants", "named"), ("schedules", "run")];

/// `args` (the program's name first) in the new spelling, and the line that names it when they
/// were an old one.
pub fn respell(args: Vec<OsString>) -> (Vec<OsString>, Option<String>) {
    let word = |i: usize| args.get(i).and_then(|a| a.to_str()).unwrap_or_default().to_string();
    let (first, second) = (word(1), word(2));
    let new: Vec<&str> = if let Some((_, to)) = RENAMED.iter().find(|(from, _)| *from == first) {
        to.to_vec()
    } else if let Some((group, cmd)) = GROUPED.iter().find(|(g, _)| *g == first) {
        // `mutants --first-kill` was the named mutants; `mutants --help` is the group's help.
        if !second.starts_with('-') || matches!(second.as_str(), "-h" | "--help") {
            return (args, None);
        }
        vec![group, cmd]
    } else {
        return (args, None);
    };
    let line = format!(
        "fenceproof: `fenceproof {first}` is now `fenceproof {}`; running that (the old spelling will go)",
        new.join(" ")
    );
    let mut out: Vec<OsString> = args[..1].to_vec();
    out.extend(new.iter().map(OsString::from));
    out.extend(args.into_iter().skip(2));
    (out, Some(line))
}

#[cfg(test)]
mod tests {
    use super::respell;

    fn spelled(args: &[&str]) -> (Vec<String>, Option<String>) {
        let (a, line) = respell(args.iter().map(Into::into).collect());
        (a.into_iter().map(|s| s.into_string().expect("utf-8")).collect(), line)
    }

    #[test]
    fn old_spellings_become_the_new_with_one_line() {
        let (a, line) = spelled(&["fenceproof", "mutants-sql", "--first-kill"]);
        assert_eq!(a, ["fenceproof", "mutants", "sql", "--first-kill"]);
        assert!(line.expect("a line").contains("`fenceproof mutants sql`"));
        let (a, _) = spelled(&["fenceproof", "schedules-merge", "r1", "r2"]);
        assert_eq!(a, ["fenceproof", "merge", "r1", "r2"]);
        let (a, line) = spelled(&["fenceproof", "schedules", "--cases", "3"]);
        assert_eq!(a, ["fenceproof", "schedules", "run", "--cases", "3"]);
        assert!(line.expect("a line").contains("`fenceproof schedules run`"));
    }

    #[test]
    fn new_spellings_and_group_help_are_left_alone() {
        for args in [
            &["fenceproof", "mutants", "named", "--first-kill"][..],
            &["fenceproof", "mutants", "--help"],
            &["fenceproof", "schedules"],
            &["fenceproof", "verify", "--only", "A"],
            &["fenceproof"],
        ] {
            let (a, line) = spelled(args);
            assert_eq!(a, args, "{args:?}");
            assert_eq!(line, None, "{args:?}");
        }
    }
}
