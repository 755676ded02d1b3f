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
        worker_dir: None,
        tools_bin: runner::default_tools_bin(),
        skip_conformance: false,
        conformance_report: None,
        jobs: runner::default_jobs(false),
        write_path: fenceproof_protocol::write_path::WritePath::Api,
        judging: fenceproof_scenarios::trace_check::Judging::Both,
        starved_reruns: 1,
        program: "fenceproof verify".into(),
    };
    let (matrix, flakes, dir) =
        runner::verify(&opts, fenceproof_scenarios::select(None).unwrap(), 1).await.expect("harness runs");
    assert!(flakes.is_empty());
    print!("{}", matrix.table());
    // Every registered experiment but the opt-in ones ran, in the registration's order.
    let ids: Vec<&str> = matrix.results.iter().map(|r| r.id.as_str()).collect();
    let registered: Vec<&str> = fenceproof_scenarios::all().iter().filter(|e| !e.opt_in()).map(|e| e.id).collect();
    assert_eq!(ids, registered);
    // Every rule of the catalogue was judged by at least one of its checkers in this run, in at
    // least one experiment the catalogue says exercises it.
    use fenceproof_harness::check::rule::judged_by;
    use fenceproof_scenarios::catalogue::{exercised_by, RULES};
    for rule in RULES {
        let rows: Vec<&str> = exercised_by(rule).iter().map(|e| e.id).collect();
        let judged = matrix
            .results
            .iter()
            .any(|r| rows.contains(&r.id.as_str()) && r.checks.iter().any(|c| judged_by(rule, &c.name)));
        assert!(judged, "rule {} was judged by none of its checkers {:?} in its experiments", rule.id, rule.checkers);
    }
    for r in &matrix.results {
        assert_eq!(r.outcome, Outcome::Pass, "{} failed: {:?} {:?}", r.id, r.error, r.checks);
        // Every experiment rests on several checks; a measurement (no invariants) has its margins.
        let declared = fenceproof_scenarios::all().into_iter().find(|e| e.id == r.id).expect("registered");
        let min = if declared.checks.invariants { 5 } else { 2 };
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
    let n = fenceproof_scenarios::all().iter().filter(|e| !e.opt_in()).count();
    assert!(junit.contains(&format!("tests=\"{n}\" failures=\"0\" errors=\"0\"")), "{junit}");
    assert_eq!(registry::live_count(), 0, "children still registered after the run");
}
