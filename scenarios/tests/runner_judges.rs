//! The runner applies every judge a row declares, and a row it cannot judge is an ERROR naming
//! the judge: here a row that declares the invariants (`Checks::ALL`) and leaves a history the
//! runner cannot read (an `oracle.json` of its own that is not one), on a native cluster the
//! harness starts itself.

use fenceproof_harness::procs::registry;
use fenceproof_harness::report::{exit, Outcome};
use fenceproof_scenarios::ctx::Ctx;
use fenceproof_scenarios::experiment::{Checks, Experiment, Judges};
use fenceproof_scenarios::runner::{self, VerifyOptions};

/// A story that ends well and saves, as its own database's history, something that is not one.
async fn unreadable_history(ctx: &mut Ctx) -> Result<(), fenceproof_harness::HarnessError> {
    std::fs::write(ctx.dir.join("oracle.json"), "not a history")?;
    Ok(())
}

const UNJUDGED: Experiment = Experiment {
    id: "X-unjudged",
    title: "a row the invariants judge cannot judge",
    section: "11 A",
    needs: &[],
    judges: Judges::Protocol,
    checks: Checks::ALL,
    operator_of: &[],
    run: |c| Box::pin(unreadable_history(c)),
};

#[tokio::test]
async fn a_row_that_declares_a_judge_and_is_not_judged_is_an_error_naming_it() {
    let reports = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("runner_judges_reports");
    let opts = VerifyOptions {
        backend: runner::BackendChoice::Native,
        pg_image: String::new(),
        pg_bin: None,
        contract: None,
        contract_path: None,
        database_url: None,
        reports_dir: reports,
        worker_bin: runner::default_worker_bin(),
        worker_dir: None,
        tools_bin: runner::default_tools_bin(),
        skip_conformance: true,
        conformance_report: None,
        jobs: 1,
        write_path: fenceproof_protocol::write_path::WritePath::Api,
        judging: fenceproof_scenarios::trace_check::Judging::Both,
        starved_reruns: 0,
        program: "fenceproof verify".into(),
    };
    let (matrix, _, _) = runner::verify(&opts, vec![UNJUDGED], 1).await.expect("harness runs");
    let row = &matrix.results[0];
    assert_eq!(row.outcome, Outcome::Error, "{row:?}");
    let error = row.error.clone().unwrap_or_default();
    assert!(error.contains("invariants judge") && error.contains("not a history"), "{error}");
    assert_eq!(matrix.exit_code(), exit::HARNESS);
    assert_eq!(registry::live_count(), 0, "children still registered after the run");
}
