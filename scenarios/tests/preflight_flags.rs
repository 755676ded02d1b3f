//! The preflight starts the worker with every flag the contract marks "always" passed: a strict
//! worker, which stops with status 2 when one of them is missing (as the contract tells it to), must
//! answer the preflight. The flags are read from the contract's own table (docs/worker-protocol.md),
//! so a flag added there and not passed fails this test.

use std::os::unix::fs::PermissionsExt;

/// The flags of the contract's Flags table whose "passed" cell is `always`.
fn always_flags() -> Vec<String> {
    let doc = include_str!("../../docs/worker-protocol.md");
    doc.lines()
        .filter(|l| l.starts_with("| `--"))
        .map(|l| l.replace("\\|", "/"))
        .filter(|l| l.split('|').nth(2).is_some_and(|c| c.trim() == "always"))
        .filter_map(|l| l.split('`').nth(1)?.split_whitespace().next().map(String::from))
        .collect()
}

/// A worker that exits 2 unless every flag of `required` is on its command line, then answers
/// each command line with an `ok` event of the same name.
fn strict_worker(dir: &std::path::Path, required: &[String]) -> std::path::PathBuf {
    let p = dir.join("strict-worker.py");
    let body = format!(
        r#"#!/usr/bin/env python3
import json, sys
missing = [f for f in {required:?} if f not in sys.argv[1:]]
if missing:
    print("strict worker: missing flag(s) " + " ".join(missing), file=sys.stderr)
    sys.exit(2)
print(json.dumps({{"event": "ready", "outcome": "ok", "id": None}}), flush=True)
for line in sys.stdin:
    c = json.loads(line)
    print(json.dumps({{"event": c["cmd"], "outcome": "ok", "id": c["id"], "data": {{"text": ""}}}}), flush=True)
"#
    );
    std::fs::write(&p, body).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

#[tokio::test]
async fn the_preflight_passes_every_flag_the_contract_marks_always() {
    let required = always_flags();
    for f in ["--database-url", "--owner", "--events", "--secrets-dir", "--trace-id", "--write-path"] {
        assert!(required.iter().any(|r| r == f), "{f} is not read as an always-passed flag: {required:?}");
    }
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("preflight_flags");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let worker = strict_worker(&dir, &required);
    let url = "postgres://nobody@127.0.0.1:1/postgres";
    let r = fenceproof_scenarios::preflight::check_worker(&worker, url, &dir.join("run")).await;
    assert!(r.is_ok(), "a worker that insists on the always-passed flags fails the preflight: {r:?}");
    // The same worker, insisting on one flag more, is stopped by the preflight with its stderr.
    let stricter = strict_worker(&dir, &[required.clone(), vec!["--not-a-flag".into()]].concat());
    let r = fenceproof_scenarios::preflight::check_worker(&stricter, url, &dir.join("run2")).await;
    let e = r.expect_err("a worker missing a flag must fail the preflight").to_string();
    assert!(e.contains("missing flag(s) --not-a-flag"), "{e}");
}
