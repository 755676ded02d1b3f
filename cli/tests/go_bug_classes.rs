//! Realistic one-line bugs in the Go example worker (examples/go-worker), each caught by the rule it
//! breaks: a copy of the worker's source with one edit, built offline like the original
//! (`GO111MODULE=off`, Debian's pgx), run through the rows or the contract probe that judge it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

/// A copy of the Go worker with `old` replaced by `new` (exactly once) in `file` (relative to its
/// `src/`), built; the binary's path.
fn broken(name: &str, file: &str, old: &str, new: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("go_bug_classes").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("go-worker");
    let status = Command::new("cp").arg("-r").arg(root.join("examples/go-worker")).arg(&copy).status().unwrap();
    assert!(status.success(), "copy the Go worker");
    let path = copy.join("src").join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.matches(old).count(), 1, "{name}: {old:?} must occur once in {file}");
    std::fs::write(&path, text.replace(old, new)).unwrap();
    let bin = dir.join("worker");
    let mut build = Command::new("go");
    build
        .args(["build", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir(copy.join("src/fenceproof-go-worker"))
        .env("GO111MODULE", "off")
        .env("GOPATH", format!("{}:/usr/share/gocode", copy.display()))
        .env("GOCACHE", root.join("target/go-worker/cache"))
        .env("GOFLAGS", "");
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut build, &dir.join("build"), Duration::from_secs(300));
    assert!(out.status.success(), "{name}: go build failed:\n{}", String::from_utf8_lossy(&out.stderr));
    bin
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
    let w = broken(
        "op-id-epoch",
        "fenceproof-go-worker/main.go",
        r#"operationID := fmt.Sprintf("%s/%s/%s/v%d", tenant, l.RunID, step, version)"#,
        r#"operationID := fmt.Sprintf("%s/%s/%s/v%d/e%d", tenant, l.RunID, step, version, l.Epoch)"#,
    );
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
    let w = broken(
        "digest-text",
        "protocol/digest.go",
        "func DigestInput(body []byte) (string, error) {\n\treturn Canonical(body)\n}",
        "func DigestInput(body []byte) (string, error) {\n\treturn string(body), nil\n}",
    );
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
    let w = broken(
        "secrets-after-intent",
        "fenceproof-go-worker/main.go",
        "\tfor name, value := range found {\n\t\tif err := w.secrets.Put(operationID, name, value); err != nil {\n\t\t\treturn nil, fmt.Errorf(\"secret store: %v\", err)\n\t\t}\n\t}\n\trequest, err := json.Marshal(masked)\n\tif err != nil {\n\t\treturn nil, err\n\t}\n\tdigest, err := protocol.Digest(request)\n\tif err != nil {\n\t\treturn nil, fpkit.Refuse(\"invalid_intent\", \"request: %v\", err)\n\t}\n\tinput, _ := protocol.DigestInput(request)\n\tintent := &protocol.Intent{OperationID: operationID, StepID: step, EffectVersion: version, Tool: tool,\n\t\tDigest: digest, Request: request}\n\tcheckpoint, _ := json.Marshal(map[string]string{\"planned\": step, \"operation_id\": operationID})\n\trev, registration, err := w.transition(ctx, \"plan\", \"running\", \"running\", checkpoint, c.ExpectedRevision, c.Faults, \"\", intent)\n\tif err != nil {\n\t\treturn nil, err\n\t}\n",
        "\trequest, err := json.Marshal(masked)\n\tif err != nil {\n\t\treturn nil, err\n\t}\n\tdigest, err := protocol.Digest(request)\n\tif err != nil {\n\t\treturn nil, fpkit.Refuse(\"invalid_intent\", \"request: %v\", err)\n\t}\n\tinput, _ := protocol.DigestInput(request)\n\tintent := &protocol.Intent{OperationID: operationID, StepID: step, EffectVersion: version, Tool: tool,\n\t\tDigest: digest, Request: request}\n\tcheckpoint, _ := json.Marshal(map[string]string{\"planned\": step, \"operation_id\": operationID})\n\trev, registration, err := w.transition(ctx, \"plan\", \"running\", \"running\", checkpoint, c.ExpectedRevision, c.Faults, \"\", intent)\n\tif err != nil {\n\t\treturn nil, err\n\t}\n\tfor name, value := range found {\n\t\tif err := w.secrets.Put(operationID, name, value); err != nil {\n\t\t\treturn nil, fmt.Errorf(\"secret store: %v\", err)\n\t\t}\n\t}\n",
    );
    let (code, text) = fenceproof(&w, &["verify", "--quiet", "--skip-conformance", "--only", "E-crash-commit"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.lines().any(|l| l.contains("FAILED") && l.contains("crash.references-durable-first")), "{text}");
}
