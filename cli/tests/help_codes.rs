//! One set of flags and codes: every subcommand's `--help` (found by walking `fenceproof --help`
//! and each subcommand's own list) names the exit codes that subcommand can return, and no other,
//! each with the one meaning it has everywhere; every command has `--json` and `--quiet`; the top
//! level lists at most 14 commands, and an old spelling runs as its new one after one line naming
//! it. A closed stdout (`fenceproof list | head -1`) is not a panic.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

/// What each subcommand can return, and whether it has the output flags (--json and --quiet: every
/// command; a group such as `mutants` has none of its own). Written from each command's code
/// paths, independently of `help.rs`.
const TABLE: &[(&str, &[u8], bool)] = &[
    ("verify", &[0, 1, 2, 3, 4, 5, 130], true),
    ("conformance", &[0, 2, 3, 4, 130], true),
    ("mutants", &[0, 1, 2, 3, 130], false),
    ("mutants named", &[0, 1, 2, 3, 130], true),
    ("mutants sql", &[0, 1, 2, 3, 130], true),
    ("merge", &[0, 1, 2, 3], true),
    ("schedules", &[0, 1, 2, 3, 130], false),
    ("schedules run", &[0, 1, 2, 3, 130], true),
    ("schedules against-mutants", &[0, 1, 2, 3, 130], true),
    ("verify-versions", &[0, 1, 2, 3, 5, 130], true),
    ("bench", &[0, 2, 3, 130], true),
    ("bench plan", &[0, 2, 3], true),
    ("bench merge", &[0, 2, 3], true),
    ("cleanup", &[0, 2, 3], true),
    ("list", &[0, 2], true),
    ("rules", &[0, 2], true),
    ("writers", &[0, 1, 2, 3, 130], true),
    ("audit", &[0, 1, 2, 3, 130], true),
    ("docs", &[0, 1, 2, 3], true),
    ("model", &[0, 1, 2, 3], true),
    ("model check", &[0, 1, 2, 3], true),
    ("model weak-spots", &[0, 1, 2], true),
    ("model merge", &[0, 1, 2, 3], true),
];

fn help(path: &str) -> String {
    let mut args: Vec<&str> = path.split_whitespace().collect();
    args.push("--help");
    let out = Command::new(FENCEPROOF).args(&args).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{path} --help");
    String::from_utf8(out.stdout).unwrap()
}

/// The lines of the block that starts with `title` (up to the next blank line).
fn block<'a>(text: &'a str, title: &str) -> Vec<&'a str> {
    text.lines().skip_while(|l| *l != title).skip(1).take_while(|l| !l.trim().is_empty()).collect()
}

/// The subcommands a help text lists (clap's own `help` left out).
fn commands(text: &str) -> Vec<String> {
    block(text, "Commands:")
        .iter()
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(String::from)
        .collect()
}

/// The exit codes a help text lists, with their meanings.
fn codes(text: &str) -> BTreeMap<u8, String> {
    block(text, "Exit codes:")
        .iter()
        .map(|l| {
            let (code, meaning) = l.trim().split_once(' ').unwrap();
            (code.parse().unwrap(), meaning.trim().to_string())
        })
        .collect()
}

/// Every subcommand path, walking the helps from `fenceproof --help` down.
fn walk(path: &str, found: &mut BTreeMap<String, String>) {
    let text = help(path);
    for c in commands(&text) {
        let sub = if path.is_empty() { c } else { format!("{path} {c}") };
        walk(&sub, found);
    }
    if !path.is_empty() {
        found.insert(path.to_string(), text);
    }
}

#[test]
fn every_help_lists_the_codes_its_command_can_return_with_one_meaning_each() {
    let mut found = BTreeMap::new();
    walk("", &mut found);
    let table: BTreeMap<&str, (&[u8], bool)> = TABLE.iter().map(|(p, c, r)| (*p, (*c, *r))).collect();
    let names: Vec<&String> = found.keys().collect();
    let expected: Vec<&str> = table.keys().copied().collect();
    assert_eq!(names, expected, "the subcommands the helps list are the table's");
    let mut meanings: BTreeMap<u8, String> = BTreeMap::new();
    for (path, text) in &found {
        let (want, prints) = table[path.as_str()];
        let listed = codes(text);
        assert_eq!(listed.keys().copied().collect::<Vec<_>>(), want, "{path}: exit codes listed\n{text}");
        for (code, meaning) in listed {
            let first = meanings.entry(code).or_insert_with(|| meaning.clone());
            assert_eq!(*first, meaning, "{path}: exit code {code} means one thing everywhere");
        }
        // Every command has the output flags, declared once (cmd/output.rs); a group has none.
        assert_eq!(text.contains("      --json "), prints, "{path}: --json (a command: {prints})");
        assert_eq!(text.contains("      --quiet "), prints, "{path}: --quiet (a command: {prints})");
        // A usage error is exit 2 on every subcommand, and every help lists it.
        let mut args: Vec<&str> = path.split_whitespace().collect();
        args.push("--no-such-flag");
        let out = Command::new(FENCEPROOF).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{path} --no-such-flag");
    }
    assert!(meanings[&4].contains("deviates") && meanings[&130].contains("SIGINT"), "{meanings:?}");
}

/// The grouped CLI: `fenceproof --help` lists at most 14 commands (18 before `mutants`,
/// `schedules` and `merge` gathered seven of them; clap's own `help` not counted).
#[test]
fn the_top_level_lists_at_most_14_commands() {
    let listed = commands(&help(""));
    assert!(listed.len() <= 14, "{} commands: {listed:?}", listed.len());
    for gone in ["mutants-sql", "schedules-mutants", "mutants-sql-merge", "schedules-merge", "audit-merge"] {
        assert!(!listed.iter().any(|c| c == gone), "{gone} is listed");
    }
}

/// An old spelling prints one line on stderr naming the new one, then runs it: the same stdout and
/// exit code as the new spelling.
#[test]
fn an_old_spelling_prints_one_line_naming_the_new_one() {
    let run = |args: &[&str]| Command::new(FENCEPROOF).args(args).output().unwrap();
    let old = run(&["mutants-sql", "--list", "--mutants", "fp_claim/"]);
    let new = run(&["mutants", "sql", "--list", "--mutants", "fp_claim/"]);
    let said = String::from_utf8_lossy(&old.stderr);
    assert_eq!(said.lines().count(), 1, "one line: {said}");
    assert!(said.contains("`fenceproof mutants sql`"), "{said}");
    assert!(new.stderr.is_empty(), "{}", String::from_utf8_lossy(&new.stderr));
    assert_eq!((old.status.code(), &old.stdout), (new.status.code(), &new.stdout));
    assert_eq!(new.status.code(), Some(0));
    for (args, spelled) in [
        (&["schedules-merge", "no-such-folder"][..], "`fenceproof merge`"),
        (&["schedules", "--no-such-flag"], "`fenceproof schedules run`"),
    ] {
        let out = run(args);
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.lines().next().unwrap_or_default().contains(spelled), "{args:?}: {said}");
        assert_eq!(out.status.code(), Some(2), "{args:?}: the new spelling's usage error");
    }
}

#[test]
fn a_reader_that_stops_early_is_not_a_panic() {
    // The reader is gone before the first write (deterministic, unlike `| head -1`, whose reader
    // may still be there when a short output fits the pipe): every write meets a closed pipe.
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    for args in
        [&["list"][..], &["rules"], &["list", "--json"], &["rules", "--markdown"], &["docs", "--check", "--root", root]]
    {
        let mut child =
            Command::new(FENCEPROOF).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // And through a shell with pipefail, as the issue ran it.
    let out = Command::new("bash")
        .args(["-o", "pipefail", "-c", &format!("'{FENCEPROOF}' list | head -1")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `just --list` shows the comment line directly above each recipe: it must be a whole sentence,
/// not the tail of a longer comment (a line above it that does not end its sentence).
#[test]
fn every_recipe_has_a_one_line_description() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Justfile")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut recipes = 0;
    for (i, l) in lines.iter().enumerate() {
        let is_recipe =
            l.chars().next().is_some_and(|c| c.is_ascii_lowercase()) && l.contains(':') && !l.contains(":=");
        if !is_recipe || i == 0 {
            continue;
        }
        recipes += 1;
        let shown = lines[i - 1];
        assert!(shown.starts_with("# ") && shown.ends_with('.'), "{l}: no one-line description ({shown:?})");
        let above = if i >= 2 { lines[i - 2] } else { "" };
        assert!(
            !above.starts_with('#') || above.ends_with('.') || above.ends_with(')'),
            "{l}: {shown:?} ends a longer comment"
        );
    }
    assert!(recipes > 20, "{recipes} recipes found");
}
