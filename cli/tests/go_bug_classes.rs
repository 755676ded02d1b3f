//! Realistic one-line bugs in the Go example worker (examples/go-worker), each caught by the rule it
//! breaks: the worker built offline like the original (`GO111MODULE=off`, Debian's pgx) with one
//! of its files replaced by a variant's (tests/variants/go/NAME, a whole file at the example's
//! path, given to `go build -overlay`), run through the rows or the contract probe that judge it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

/// The Go worker with the files of tests/variants/go/NAME (each a whole file of the example's
/// `src/`, at the same path) built in place of the example's own (`go build -overlay`); the
/// binary's path. A variant's file the example no longer has fails here, naming it; a variant
/// that no longer fits the files around it fails to build, naming what it misses.
fn broken(name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let src = root.join("examples/go-worker/src");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("go_bug_classes").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let variant = fenceproof_harness::testkit::variants_dir().join("go").join(name);
    let mut replace = serde_json::Map::new();
    for file in go_files(&variant) {
        let theirs = src.join(file.strip_prefix(&variant).unwrap());
        assert!(theirs.is_file(), "{name}: the example has no {} for {} to replace", theirs.display(), file.display());
        replace.insert(theirs.display().to_string(), file.display().to_string().into());
    }
    assert!(!replace.is_empty(), "{name}: no files in {}", variant.display());
    let overlay = dir.join("overlay.json");
    std::fs::write(&overlay, serde_json::json!({ "Replace": replace }).to_string()).unwrap();
    let bin = dir.join("worker");
    let mut build = Command::new("go");
    build
        .arg("build")
        .arg(format!("-overlay={}", overlay.display()))
        .arg("-o")
        .arg(&bin)
        .arg(".")
        .current_dir(src.join("fenceproof-go-worker"))
        .env("GO111MODULE", "off")
        .env("GOPATH", format!("{}:/usr/share/gocode", root.join("examples/go-worker").display()))
        .env("GOCACHE", root.join("target/go-worker/cache"))
        .env("GOFLAGS", "");
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut build, &dir.join("build"), Duration::from_secs(300));
    assert!(out.status.success(), "{name}: go build failed:\n{}", String::from_utf8_lossy(&out.stderr));
    bin
}

/// The `.go` files under `dir`, at any depth.
fn go_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(go_files(&p));
        } else if p.extension().is_some_and(|x| x == "go") {
            out.push(p);
        }
    }
    out
}

/// `fenceproof ARGS --worker-bin W`: exit code and output.
fn fenceproof(w: &Path, args: &[&str]) -> (Option<i32>, String) {
    let dir = w.parent().unwrap().join(args[0]);
    let mut cmd = Command::new(FENCEPROOF);
    cmd.args(args).arg("--worker-bin").arg(w).arg("--reports-dir").arg(dir.join("reports"));
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, &dir, Duration::from_secs(240));
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// An operation_id that carries the epoch (in its own shape, which contract v2 allows) changes when
/// a new term plans the same step: a FAIL of spec §08, not an ERROR on the id's format.
#[test]
fn a_go_worker_with_its_epoch_in_the_operation_id_fails_section_08() {
    let w = broken("op-id-epoch");
    let (code, text) = fenceproof(&w, &["verify", "--quiet", "--skip-conformance", "--only", "E-replan"]);
    assert_eq!(code, Some(1), "a FAIL, not an ERROR:\n{text}");
    let line = text.lines().find(|l| l.contains("FAILED") && l.contains("§02, 08 ids.operation-id-per-intent"));
    assert!(line.is_some(), "a FAILED check naming §08:\n{text}");
}

/// A digest over Go's own JSON text (json.Marshal sorts keys by bytes, not by UTF-16 units): the
/// contract probe shows where the text it hashed first differs from RFC 8785, and the matrix FAILs
/// the canonical-digest rule.
#[test]
fn a_go_worker_hashing_its_own_json_text_fails_with_the_first_difference() {
    let w = broken("digest-text");
    let (code, text) = fenceproof(&w, &["conformance", "--only", "outbox"]);
    assert_eq!(code, Some(4), "the worker deviates:\n{text}");
    assert!(
        text.lines().any(|l| l.contains("DEVIATES") && l.contains("first differ at byte") && l.contains("reported `")),
        "the first difference of the reported text:\n{text}"
    );
    let (code, text) = fenceproof(&w, &["verify", "--quiet", "--skip-conformance", "--only", "E-replan"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.lines().any(|l| l.contains("FAILED") && l.contains("intent.canonical-digest")),
        "the matrix FAILs the canonical-digest rule:\n{text}"
    );
}

/// A plan that writes the secret store after the intent that references it commits: the proxy of
/// E-crash-commit kills the worker between the two, and the recovered dispatcher cannot send it.
#[test]
fn a_go_worker_storing_secrets_after_the_intent_commits_fails_the_crash_row() {
    let w = broken("secrets-after-intent");
    let (code, text) = fenceproof(&w, &["verify", "--quiet", "--skip-conformance", "--only", "E-crash-commit"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.lines().any(|l| l.contains("FAILED") && l.contains("crash.references-durable-first")), "{text}");
}
