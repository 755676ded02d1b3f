//! The whole matrix against a native cluster the harness starts itself: every experiment
//! passes, the report files are written, and nothing is left running.

use fenceproof_harness::procs::registry;
use fenceproof_harness::report::{exit, Outcome};
use fenceproof_scenarios::runner::{self, VerifyOptions};

#[tokio::test]
async fn every_experiment_passes_and_leaves_a_report() {
    let reports = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("verify_matrix_reports");
    let opts = VerifyOptions {
        backend: fenceproof_scenarios::runner::BackendChoice::Native,
        pg_image: String::new(),
        pg_bin: None,
        contract: None,
        contract_path: None,
        database_url: None,
        reports_dir: reports.clone(),
        worker_bin: runner::default_worker_bin(),
        tools_bin: runner::default_tools_bin(),
    };
    let (matrix, flakes, dir) =
        runner::verify(&opts, fenceproof_scenarios::select(None).unwrap(), 1).await.expect("harness runs");
    assert!(flakes.is_empty());
    print!("{}", matrix.table());
    let ids: Vec<&str> = matrix.results.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        ids,
        vec![
            "A",
            "B-sigstop",
            "B-freeze",
            "B-dbfreeze",
            "B-same-owner",
            "C",
            "D",
            "E-idem",
            "E-detid",
            "E-opquery",
            "E-plain",
            "E-idem-pause",
            "E-no-answer",
            "E-conflict",
            "E-replan",
            "F-prepared",
            "F-dispatching",
            "F-unknown",
            "G",
            "H-async",
            "H-sync",
            "H-lease",
            "I-save",
            "I-terminal",
            "I-renew",
            "J-partition",
            "K-forward",
            "K-backward",
            "L-rollout",
            "M-redis-expiry",
            "M-redis-restart",
            "N-restore",
            "P-role",
            "P-secret",
            "P-api-lease",
            "P-api-commit",
            "P-api-ledger",
            "P-api-clock",
            "W-lease",
            "W-commit",
            "W-ledger",
            "W-clock",
            "W-control",
        ]
    );
    // Every rule of the catalogue was judged by at least one of its checkers in this run, in at
    // least one experiment the catalogue says exercises it.
    use fenceproof_harness::check::catalogue::{self, RULES};
    for rule in RULES {
        let judged = matrix.results.iter().any(|r| {
            rule.experiments.contains(&r.id.as_str())
                && r.checks.iter().any(|c| rule.checkers.iter().any(|p| catalogue::matches(p, &c.name)))
        });
        assert!(judged, "rule {} was judged by none of its checkers {:?} in its experiments", rule.id, rule.checkers);
    }
    for r in &matrix.results {
        assert_eq!(r.outcome, Outcome::Pass, "{} failed: {:?} {:?}", r.id, r.error, r.checks);
        // Every experiment rests on several checks; H-lease is a measurement with its two margins.
        let min = if r.id == "H-lease" { 2 } else { 5 };
        // (Every row also carries the state-machine checkers and the legal-step check.)
        assert!(r.checks.len() >= min, "{} judged on too few checks", r.id);
    }
    assert_eq!(matrix.exit_code(), exit::OK);
    for f in [
        "matrix.json",
        "matrix.md",
        "junit.xml",
        "postgres.log",
        "B-sigstop/oracle.json",
        "B-sigstop/timeline.jsonl",
        "B-sigstop/worker-a.events.jsonl",
    ] {
        let p = dir.join(f);
        assert!(p.metadata().map(|m| m.len() > 0).unwrap_or(false), "{} missing or empty", p.display());
    }
    let latest = std::fs::read_link(reports.join("latest")).unwrap();
    assert_eq!(reports.join(latest), dir);
    let junit = std::fs::read_to_string(dir.join("junit.xml")).unwrap();
    let n = fenceproof_scenarios::all().len();
    assert!(junit.contains(&format!("tests=\"{n}\" failures=\"0\" errors=\"0\"")), "{junit}");
    assert_eq!(registry::live_count(), 0, "children still registered after the run");
}
