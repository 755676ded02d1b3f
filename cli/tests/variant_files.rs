//! No test source holds Python or Go code to patch an example worker by string (issue 62): the
//! broken and legal variants of the examples the tests run are files beside them, in
//! tests/variants (Python modules that override the example's functions by name, checked by
//! variant_kit.py as they load; Go files that replace whole files of the example, given to
//! `go build -overlay`). A change of an example then either still works or fails loudly, at a
//! named function, never silently by a string that no longer matches.
//!
//! This file holds the rule: a string literal of a test source that is Python or Go code fails it,
//! and so does a `.replace(` on code-like text; each Python variant must load against the example
//! as it is; each Go variant's file must replace a file the example has.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Text that is Python or Go code, not a message, a flag or SQL.
const CODE: &[&str] = &[
    "self.",
    "def ",
    "__import__",
    "conn.execute",
    "raise ",
    "elif ",
    "os._exit",
    "sys.exit",
    "except ",
    "lambda ",
    ":= ",
    "func ",
    "err != nil",
    "fmt.",
    "\treturn",
    "    return ",
    "import ",
];

/// Text given to a `.replace(` that is code of some language (an indented line, a format
/// placeholder, an assignment), besides [`CODE`].
const CODE_LIKE: &[&str] = &["%s", "%d", "\n    ", "\n\t", " = ", "return "];

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

/// The `.rs` files under `dir`, at any depth.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// A string literal of a Rust source: where it starts (byte offset), its text (escapes read), and
/// whether it is the first argument of a `.replace(`, `.replacen(` or `.matches(`.
struct Literal {
    at: usize,
    text: String,
    replaced: bool,
}

/// The string literals of `src` (comments and char literals skipped; raw strings read as written).
fn literals(src: &str) -> Vec<Literal> {
    let b = src.as_bytes();
    let (mut out, mut i) = (Vec::new(), 0);
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            i += src[i..].find('\n').unwrap_or(src.len() - i);
        } else if b[i] == b'\'' {
            i += char_literal_len(&src[i..]);
        } else if b[i] == b'"' || (b[i] == b'r' && raw_start(&src[i..]).is_some() && !ident_before(b, i)) {
            let (text, len) = read_literal(&src[i..]);
            let before = src[..i].trim_end();
            let replaced = [".replace(", ".replacen(", ".matches("].iter().any(|c| before.ends_with(c));
            out.push(Literal { at: i, text, replaced });
            i += len;
        } else {
            i += src[i..].chars().next().map_or(1, char::len_utf8);
        }
    }
    out
}

fn ident_before(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// `r"`, `r#"`, ...: the number of `#`.
fn raw_start(s: &str) -> Option<usize> {
    let hashes = s[1..].bytes().take_while(|&c| c == b'#').count();
    (s.as_bytes().get(1 + hashes) == Some(&b'"')).then_some(hashes)
}

/// How far a `'` goes: a char literal (`'x'`, `'\n'`, `'"'`) or a lifetime's tick.
fn char_literal_len(s: &str) -> usize {
    let mut cs = s.char_indices().skip(1);
    match cs.next() {
        Some((_, '\\')) => s[2..].find('\'').map_or(1, |n| n + 3),
        Some((_, c)) if s[1 + c.len_utf8()..].starts_with('\'') => 2 + c.len_utf8(),
        _ => 1,
    }
}

/// A literal at the start of `s`: its text and its length in `s`.
fn read_literal(s: &str) -> (String, usize) {
    if let Some(hashes) = raw_start(s).filter(|_| s.starts_with('r')) {
        let close = format!("\"{}", "#".repeat(hashes));
        let body = 2 + hashes;
        let end = s[body..].find(&close).map_or(s.len(), |n| body + n);
        return (s[body..end].to_string(), end + close.len());
    }
    let (mut text, mut chars) = (String::new(), s.char_indices().skip(1));
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return (text, at + 1),
            '\\' => match chars.next().map(|(_, e)| e) {
                Some('n') => text.push('\n'),
                Some('t') => text.push('\t'),
                Some('\n') => {}
                Some(e) => text.push(e),
                None => {}
            },
            c => text.push(c),
        }
    }
    (text, s.len())
}

/// What is wrong with a literal: the code it holds, if it is code. A whole program (a literal that
/// starts with `#!`, a fake worker a test writes as a file of its own) patches nothing.
fn verdict(l: &Literal) -> Option<&'static str> {
    if l.text.starts_with("#!") {
        return None;
    }
    let code = CODE.iter().find(|m| l.text.contains(**m)).copied();
    let like = || CODE_LIKE.iter().find(|m| l.text.contains(**m)).copied();
    code.or_else(|| if l.replaced { like() } else { None })
}

/// Every finding of the rule in `src` (named `name`): `name:line: what`.
fn findings(name: &str, src: &str) -> Vec<String> {
    literals(src)
        .iter()
        .filter_map(|l| {
            let m = verdict(l)?;
            let line = src[..l.at].matches('\n').count() + 1;
            let first = l.text.lines().next().unwrap_or_default();
            let how = if l.replaced { "a .replace( of code" } else { "code in a string" };
            Some(format!("{name}:{line}: {how} ({m:?}): {first:?}"))
        })
        .collect()
}

#[test]
fn no_test_source_holds_python_or_go_code_to_patch() {
    let me = Path::new(file!()).file_name().unwrap();
    let mut found = Vec::new();
    for f in rust_files(&tests_dir()).iter().filter(|f| f.file_name() != Some(me)) {
        let name = f.strip_prefix(tests_dir()).unwrap().display().to_string();
        found.extend(findings(&name, &std::fs::read_to_string(f).unwrap()));
    }
    assert!(found.is_empty(), "keep variants as files in tests/variants, not as code in tests:\n{}", found.join("\n"));
    // Nor does the shared test kit offer a copy of an example with edits.
    let kit = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../harness/src/testkit.rs")).unwrap();
    assert!(!kit.contains("&[(&str, &str)]"), "harness/src/testkit.rs takes edits of an example again");
}

/// The rule finds what the tests held before it: snippets as they were, each found.
#[test]
fn the_rule_finds_the_patches_it_replaced() {
    let old = [
        r#"example_copy(name, &w, &[("if row is None or row[0] != self.owner:", "if row is None:")]);"#,
        r#"std::fs::write(&path, text.replace("return Canonical(body)", "return string(body), nil"));"#,
        r#"let t = text.replace("    w = worker_class(args)\n", "");"#,
        r#"let t = sql.replace("WHERE run_id = %s AND status = 'prepared'", "WHERE false");"#,
        "let e = (\"\\tfor name, value := range found {\", \"\");",
    ];
    for src in old {
        assert!(!findings("old", src).is_empty(), "not found: {src}");
    }
    let fine = [
        r#"let s = cmd.replace('\0', " ");"#,
        r#"let sql = sql.replace("{r}", &r);"#,
        r#"assert!(text.contains("unrecognized arguments: --trace-id"), "{text}");"#,
        r#"let label = shard.replace('/', "of");"#,
    ];
    for src in fine {
        assert!(findings("fine", src).is_empty(), "a false finding in {src}: {:?}", findings("fine", src));
    }
}

/// Each Python variant module of tests/variants loads against the example as it is (a function
/// it overrides that the example no longer has, or has with other parameters, fails the import,
/// named), each of its variants' patches apply, and a variant starts under its name (`--help`).
#[test]
fn every_python_variant_fits_the_example() {
    let dir = fenceproof_harness::testkit::variants_dir();
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("variant_files");
    let _ = std::fs::remove_dir_all(&tmp);
    let modules: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.path().file_name()?.to_str()?.strip_suffix(".py").map(String::from))
        .filter(|m| m != "variant_kit")
        .collect();
    assert!(modules.len() >= 5, "{modules:?}");
    for m in &modules {
        // Import the module, then apply every variant's patches (each checks the names it patches).
        let load = format!(
            "import sys; sys.path.insert(0, sys.argv[1]); import {m}\n\
             for v in getattr({m}, 'VARIANTS', {{}}).values(): getattr(v, 'prepare', lambda: None)()\n\
             print(*getattr({m}, 'VARIANTS', {{}}))"
        );
        let out = Command::new("python3").args(["-c", &load]).arg(&dir).output().unwrap();
        assert!(out.status.success(), "{m}.py does not fit the example:\n{}", String::from_utf8_lossy(&out.stderr));
        if let Some(name) = String::from_utf8_lossy(&out.stdout).split_whitespace().next() {
            let w = fenceproof_harness::testkit::variant_worker(m, name, &tmp.join(m));
            let out = Command::new(&w).arg("--help").output().unwrap();
            assert!(out.status.success(), "{m}.py {name}: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
}

/// Each Go variant's file (tests/variants/go/NAME/PATH) replaces a file the example has
/// (examples/go-worker/src/PATH); go_bug_classes builds them.
#[test]
fn every_go_variant_replaces_a_file_of_the_example() {
    let go = fenceproof_harness::testkit::variants_dir().join("go");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/go-worker/src");
    let mut n = 0;
    for variant in std::fs::read_dir(&go).unwrap().flatten().map(|e| e.path()) {
        let files: Vec<PathBuf> = walk(&variant);
        assert!(!files.is_empty(), "{} has no files", variant.display());
        for f in files {
            let rel = f.strip_prefix(&variant).unwrap();
            assert!(src.join(rel).is_file(), "{}: the example has no {}", variant.display(), rel.display());
            n += 1;
        }
    }
    assert!(n >= 3, "{n} Go variant files");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for p in std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()) {
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
