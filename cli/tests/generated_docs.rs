//! The docs' tables and counts that describe the code are generated from it (`fenceproof docs`):
//! the committed README.md and docs/*.md must match what the code generates, and a block that
//! differs is named, one line each, until `fenceproof docs` rewrites it. A spec section the code
//! cites must be a heading of docs/protocol.md.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

/// The workspace root, which holds README.md and docs/.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the cli crate sits in the workspace").to_path_buf()
}

/// `fenceproof docs [--check] --root ROOT`: its exit code and its output.
fn docs(root: &Path, check: bool, dir: &Path) -> (Option<i32>, String) {
    let mut cmd = Command::new(FENCEPROOF);
    cmd.arg("docs").arg("--root").arg(root);
    if check {
        cmd.arg("--check");
    }
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, dir, Duration::from_secs(60));
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// A copy of README.md and docs/*.md under `to`.
fn copy_docs(to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to.join("docs")).unwrap();
    std::fs::copy(workspace().join("README.md"), to.join("README.md")).unwrap();
    for entry in std::fs::read_dir(workspace().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "md") {
            std::fs::copy(&path, to.join("docs").join(path.file_name().unwrap())).unwrap();
        }
    }
}

#[test]
fn the_committed_docs_match_what_the_code_generates() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("generated_docs/committed");
    let (code, out) = docs(&workspace(), true, &dir);
    assert_eq!(code, Some(0), "the docs differ from the code; run `fenceproof docs` (or `just docs`):\n{out}");
}

#[test]
fn a_changed_table_line_is_named_until_the_docs_are_rewritten() {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("generated_docs/changed");
    let copy = tmp.join("copy");
    copy_docs(&copy);
    let page = copy.join("docs/experiments.md");
    let original = std::fs::read_to_string(&page).unwrap();
    let row = original.lines().find(|l| l.starts_with("| A |")).expect("the experiment table has row A").to_string();
    let corrupted = original.replacen(&row, "| A | a title the code does not have | 99 | - | runs |", 1);
    std::fs::write(&page, &corrupted).unwrap();
    let (code, out) = docs(&copy, true, &tmp.join("check"));
    assert_eq!(code, Some(1), "a changed block fails the check: {out}");
    let stale: Vec<&str> = out.lines().filter(|l| l.contains("is stale")).collect();
    assert_eq!(stale.len(), 1, "exactly the changed block is named: {out}");
    assert!(stale[0].starts_with("docs/experiments.md:") && stale[0].contains("generated:experiments"), "{out}");
    assert_eq!(std::fs::read_to_string(&page).unwrap(), corrupted, "--check writes nothing");
    let (code, out) = docs(&copy, false, &tmp.join("rewrite"));
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(std::fs::read_to_string(&page).unwrap(), original, "the rewrite restores the generated table");
    let (code, out) = docs(&copy, true, &tmp.join("recheck"));
    assert_eq!(code, Some(0), "after the rewrite nothing is stale: {out}");
}

#[test]
fn an_unknown_block_name_is_a_usage_error_naming_its_line() {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("generated_docs/unknown");
    let copy = tmp.join("copy");
    copy_docs(&copy);
    let readme = copy.join("README.md");
    let text = std::fs::read_to_string(&readme).unwrap();
    std::fs::write(&readme, format!("{text}\n<!-- generated:no-such-table -->x<!-- /generated -->\n")).unwrap();
    let (code, out) = docs(&copy, true, &tmp.join("check"));
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("README.md") && out.contains("no generator is called `no-such-table`"), "{out}");
}

/// A spec section cited in the code must be a heading of docs/protocol.md: `docs --check` names a
/// citation the page does not define (and `docs`, which cannot rewrite it, fails too), and passes
/// once the page has the heading.
#[test]
fn a_section_the_protocol_page_does_not_define_fails_the_check() {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("generated_docs/section");
    let copy = tmp.join("copy");
    copy_docs(&copy);
    // Spelled with an escape so that this file cites nothing itself.
    let section = "\u{a7}42.7";
    std::fs::create_dir_all(copy.join("src")).unwrap();
    std::fs::write(copy.join("src/lib.rs"), format!("//! A module.\n\n/// As spec {section} says.\nfn f() {{}}\n"))
        .unwrap();
    let (code, out) = docs(&copy, true, &tmp.join("check"));
    assert_eq!(code, Some(1), "an undefined section fails the check: {out}");
    let named: Vec<&str> = out.lines().filter(|l| l.contains("is not a heading of docs/protocol.md")).collect();
    assert_eq!(named, vec![format!("src/lib.rs:3: {section} is not a heading of docs/protocol.md")], "{out}");
    let (code, out) = docs(&copy, false, &tmp.join("rewrite"));
    assert_eq!(code, Some(1), "no rewrite defines it: {out}");
    let page = copy.join("docs/protocol.md");
    let text = std::fs::read_to_string(&page).unwrap();
    std::fs::write(&page, format!("{text}\n### A part the page now names ({section})\n")).unwrap();
    let (code, out) = docs(&copy, true, &tmp.join("defined"));
    assert_eq!(code, Some(0), "a heading defines it: {out}");
}

/// `verify --help` says which rows run where with `--database-url`, from the rows' declarations:
/// the rows that set the database clock run on a local server, the others in the team's database.
#[test]
fn verify_help_says_where_the_external_rows_run() {
    let out = Command::new(FENCEPROOF).args(["verify", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.trim_start().starts_with("--database-url")).unwrap();
    use fenceproof_scenarios::experiment::{Need, TeamFailover};
    let all = fenceproof_scenarios::all();
    let runs = |e: &&fenceproof_scenarios::Experiment| e.external_skip(TeamFailover::None).is_none();
    let local: Vec<&str> = all.iter().filter(runs).filter(|e| e.needs(Need::ClockServer)).map(|e| e.id).collect();
    let inside = all.iter().filter(runs).count() - local.len();
    assert!(!local.is_empty() && line.contains(&local.join(", ")), "{line}");
    assert!(line.contains(&format!("({inside} rows;")), "{line}");
    assert!(!line.contains("A-G"), "{line}");
}

/// docs/architecture.md is the design, within 20,000 characters; reference detail lives in the
/// other docs it links to.
#[test]
fn the_architecture_page_stays_within_its_goal() {
    let text = std::fs::read_to_string(workspace().join("docs/architecture.md")).unwrap();
    let n = text.chars().count();
    assert!(n <= 20_000, "docs/architecture.md has {n} characters; move reference detail to the docs it links to");
}

/// README.md's reading list: the pages its table names (each once), which a newcomer reads for a
/// job, add up to at most 60,000 characters; the rest of docs/ is reference behind them.
#[test]
fn the_reading_list_stays_within_60k_characters() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let section: Vec<&str> = readme
        .lines()
        .skip_while(|l| *l != "## Reading list")
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .filter(|l| l.starts_with('|'))
        .collect();
    let mut pages: Vec<&str> = section
        .iter()
        .flat_map(|l| l.split("](").skip(1))
        .filter_map(|rest| rest.split(')').next())
        .map(|link| link.split('#').next().unwrap_or(link))
        .collect();
    pages.sort_unstable();
    pages.dedup();
    assert!(pages.len() >= 3, "README.md's reading list names {pages:?}");
    let sizes: Vec<(&str, usize)> = pages
        .iter()
        .map(|p| {
            (*p, std::fs::read_to_string(workspace().join(p)).unwrap_or_else(|e| panic!("{p}: {e}")).chars().count())
        })
        .collect();
    let total: usize = sizes.iter().map(|(_, n)| n).sum();
    assert!(
        total <= 60_000,
        "the reading list is {total} characters ({sizes:?}); move detail into the reference pages"
    );
}
