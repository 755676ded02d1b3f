//! A contract that claims no acknowledged loss over asynchronous Patroni FAILs H-patroni-async,
//! naming the setting that breaks the claim (against the real Patroni and etcd setup installs).

use std::process::Command;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

#[test]
fn a_no_loss_claim_over_asynchronous_patroni_fails_naming_the_setting() {
    let reports = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("patroni_rows");
    let _ = std::fs::remove_dir_all(&reports);
    let contract =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/patroni-async-claims-no-loss.toml");
    let out = Command::new(FENCEPROOF)
        .args(["verify", "--only", "H-patroni-async", "--contract"])
        .arg(&contract)
        .arg("--reports-dir")
        .arg(&reports)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{text}");
    text.lines().find(|l| l.contains("FAILED") && l.contains(" contract: ")).unwrap_or_else(|| panic!("{text}"));
    // The check's whole evidence is in the report (the terminal's sentence is cut to fit a line).
    let md: String = std::fs::read_dir(&reports)
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("matrix.md")).ok())
        .collect();
    let failed = md.lines().find(|l| l.starts_with("- [FAIL] contract: ")).unwrap_or_else(|| panic!("{md}"));
    assert!(failed.contains("synchronous_mode = false") && failed.contains("lost epoch"), "{failed}");
    // Patroni's own bound holds: the loss is within maximum_lag_on_failover.
    assert!(!md.contains("[FAIL] Patroni's bound"), "{md}");
}
