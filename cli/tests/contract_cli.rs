//! The deployment contract through the command line: a malformed or contradictory contract is a
//! one-line error naming the field, and a contract that claims "no acknowledged loss" over an
//! asynchronous pair fails experiment H with a message naming the setting.

use std::path::Path;
use std::process::Command;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let reports = Path::new(env!("CARGO_TARGET_TMPDIR")).join("contract_cli_reports");
    let out = Command::new(FENCEPROOF).arg("verify").arg("--reports-dir").arg(&reports).args(args).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples").join(name).display().to_string()
}

#[test]
fn bad_contracts_are_one_line_errors_naming_the_field() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let cases = [
        ("bad_mode.toml", "[replication]\nmode = \"asyn\"\nacknowledged_epochs_survive_failover = true\n", "line 2"),
        ("sync_local.toml", "[replication]\nmode = \"sync\"\nsynchronous_commit = \"local\"\nacknowledged_epochs_survive_failover = true\n", "replication.synchronous_commit"),
        ("hb.toml", "[replication]\nmode = \"async\"\nacknowledged_epochs_survive_failover = false\n[lease]\nttl_ms = 1000\nheartbeat_ms = 1000\n", "lease.heartbeat_ms"),
    ];
    for (name, text, field) in cases {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        let (code, _, err) = run(&["--contract", p.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{name}: {err}");
        assert!(err.contains(field), "{name}: the error does not name {field}: {err}");
        assert_eq!(
            fenceproof_harness::testkit::own_lines(&err).trim().lines().count(),
            1,
            "{name}: not one line: {err}"
        );
    }
    let (code, _, err) = run(&["--contract", "/nonexistent/contract.toml"]);
    assert_eq!(code, Some(2), "{err}");
}

#[test]
fn claiming_no_loss_over_async_replication_fails_and_names_the_setting() {
    let (code, out, err) = run(&["--contract", &example("async-claims-no-loss.toml"), "--only", "H-async"]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.contains("H-async") && out.contains("FAIL"), "{out}");
    assert!(out.contains("synchronous_standby_names = ''"), "the failure does not name the setting: {out}");
    let (code, out, err) = run(&["--contract", &example("async-loss-allowed.toml"), "--only", "H-async"]);
    assert_eq!(code, Some(0), "an honest async contract passes: {out}{err}");
    assert!(out.contains("lost epoch"), "the loss is reported: {out}");
}

#[test]
fn lease_parameters_that_leave_no_margin_fail_with_the_numbers() {
    let p = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tight_lease.toml");
    let text = "[replication]\nmode = \"async\"\nacknowledged_epochs_survive_failover = false\n[lease]\nttl_ms = 1000\nheartbeat_ms = 500\nrenewal_timeout_ms = 1\n";
    std::fs::write(&p, text).unwrap();
    let (code, out, err) = run(&["--contract", p.to_str().unwrap(), "--only", "H-lease"]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.contains("renewal_timeout_ms 1 vs renewal latency"), "the row shows the numbers: {out}");
    let (code, out, _) = run(&["--contract", &example("sync-no-loss.toml"), "--only", "H-lease"]);
    assert_eq!(code, Some(0), "{out}");
}
