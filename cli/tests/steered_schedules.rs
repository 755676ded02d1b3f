//! `schedules --steer`: each case's weights follow the transitions the earlier cases reached, and a
//! steered run records enough to regenerate every case: the boosts a case was drawn with are the
//! ones the steering computes from the earlier cases' recorded schedules and transitions, and each
//! case's saved schedule is the one the seed and its boosts give. Steering and shards exclude each
//! other (a shard does not see the other shards' cases).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fenceproof_mutants::schedules::ops::Op;
use fenceproof_mutants::schedules::{gen, steer::Steer};
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn fenceproof(args: &[&str], log: &Path) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fenceproof"));
    cmd.args(args).current_dir(root());
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, log, Duration::from_secs(240));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

fn strings(v: &Value) -> BTreeSet<String> {
    v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_string)).collect()
}

#[test]
fn a_steered_run_records_what_regenerates_each_case() {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("steered_schedules");
    let _ = std::fs::remove_dir_all(&tmp);
    let place = tmp.join("reports");
    let args =
        ["schedules", "run", "--cases", "3", "--seed", "0x2a", "--steer", "--reports-dir", place.to_str().unwrap()];
    let (code, said) = fenceproof(&args, &tmp.join("log"));
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("--steer") && said.contains("model coverage: "), "{said}");
    let run = place.join(std::fs::read_link(place.join("latest")).expect("latest"));
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(run.join("schedules.json")).unwrap()).unwrap();
    assert_eq!(summary["steered"], true);
    let mut steer = Steer::new(fenceproof_scenarios::coverage::targets());
    for case in summary["played"].as_array().expect("played") {
        let n = case["case"].as_u64().unwrap() as u32;
        let boosts: Vec<u32> = case["boosts"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap() as u32).collect();
        assert_eq!(boosts, steer.boosts(), "case {n}'s boosts are the steering's after the cases before it");
        let (schedule, _) = gen::steered(0x2a, n, &boosts);
        let saved = run.join(format!("case-{n}/schedule/schedule.json"));
        let saved: Vec<Op> = serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap();
        assert_eq!(saved, schedule, "case {n} is the seed's schedule under its boosts");
        steer.learn(&schedule.iter().map(Op::kind).collect(), &strings(&case["transitions"]));
    }
    assert!(summary["model"]["exercised"].as_u64().unwrap() > 0, "{summary:#}");
    assert!(run.join("coverage.md").is_file());

    let sharded = ["schedules", "run", "--cases", "2", "--seed", "0x2a", "--steer", "--shard", "1/2"];
    let (code, said) = fenceproof(&sharded, &tmp.join("log-shard"));
    assert_eq!(code, Some(2), "steering needs every case: {said}");
}
