//! Randomized schedules against the reference worker, as part of `cargo test`: six cases of a fixed
//! seed, and a few (FENCEPROOF_CASES, default 4) from a fresh seed each run (FENCEPROOF_SEED to pin
//! one). The seed is printed; a failure prints the shrunk schedule and the command that replays it.

use fenceproof_mutants::schedules;
use fenceproof_scenarios::runner::{self, Session, VerifyOptions};

fn options(dir: &str) -> VerifyOptions {
    VerifyOptions {
        backend: fenceproof_scenarios::runner::BackendChoice::Native,
        pg_image: String::new(),
        pg_bin: None,
        contract: None,
        contract_path: None,
        database_url: None,
        reports_dir: std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(dir),
        worker_bin: runner::default_worker_bin(),
        worker_dir: None,
        tools_bin: runner::default_tools_bin(),
        skip_conformance: false,
        conformance_report: None,
        jobs: 1,
        write_path: fenceproof_protocol::write_path::WritePath::Api,
        judging: fenceproof_scenarios::trace_check::Judging::Both,
        starved_reruns: 1,
        program: "fenceproof verify".into(),
    }
}

async fn search(dir: &str, seed: u64, cases: u32) {
    println!("seed {seed:#x} ({cases} cases; FENCEPROOF_SEED={seed:#x} reproduces)");
    let mut session = Session::start(&options(dir)).await.expect("harness starts");
    let summary = schedules::run(&mut session, schedules::Budget::cases(cases), seed, &[], "", true, "")
        .await
        .expect("schedules run");
    if let Some(f) = &summary.failure {
        panic!(
            "seed {}: schedule {} failed a check.\nshrunk schedule: {}\nfailed: {:?}\nlog:\n{}\nreplay: {}",
            f.seed,
            f.case,
            serde_json::to_string(&f.schedule).unwrap(),
            f.failed_checks,
            f.log.join("\n"),
            f.replay
        );
    }
    println!("{}", summary.coverage.report());
    assert_eq!(summary.cases, cases);
    assert!(summary.played.iter().all(|r| !r.transitions.is_empty()), "every case's history exercised a transition");
    assert!(summary.model.exercised > 0 && summary.model.reachable > summary.model.exercised);
    assert!(summary.operations >= cases as usize * schedules::gen::MIN_OPS, "every schedule has its operations");
    assert!(
        summary.coverage.situations.values().sum::<u32>() > 0,
        "the schedules reached no interesting situation at all"
    );
}

/// A fixed seed: the same schedules every run, so a regression shows up as a change here.
#[tokio::test]
async fn fixed_seed_schedules_keep_every_check() {
    search("schedules_fixed", 0x5eed, 6).await;
}

/// A fresh seed each run (FENCEPROOF_SEED pins one, FENCEPROOF_CASES sets how many).
#[tokio::test]
async fn fresh_seed_schedules_keep_every_check() {
    let cases: u32 = std::env::var("FENCEPROOF_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(4);
    let seed: u64 = std::env::var("FENCEPROOF_SEED")
        .ok()
        .and_then(|s| s.strip_prefix("0x").map(|h| u64::from_str_radix(h, 16).ok()).unwrap_or_else(|| s.parse().ok()))
        .unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
        });
    search("schedules_fresh", seed, cases).await;
}
