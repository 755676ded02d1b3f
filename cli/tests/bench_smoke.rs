//! `fenceproof bench` end to end with tiny settings: every workload runs without errors on a real
//! cluster, side by side with its raw equivalent and pgbench, and the report files say so. The
//! numbers themselves are not judged here (timing stays out of pass/fail tests).

use std::process::Command;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

#[test]
fn bench_runs_every_workload_and_writes_its_report() {
    let reports = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench_smoke");
    let out = Command::new(FENCEPROOF)
        .args(["bench", "--duration", "0.4", "--size", "1000", "--growth", "500,2000", "--load-clients", "2"])
        .args(["--runs", "2000", "--heartbeat-ms", "400", "--reports-dir"])
        .arg(&reports)
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let dir = std::fs::read_link(reports.join("latest")).map(|l| reports.join(l)).unwrap();
    let bench: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("bench.json")).unwrap()).unwrap();
    let phases = bench["phases"].as_array().unwrap();
    let groups: std::collections::BTreeSet<&str> = phases.iter().filter_map(|p| p["group"].as_str()).collect();
    for g in [
        "driver",
        "driver-pool",
        "renewal",
        "renewal-batched",
        "fillfactor",
        "commit",
        "claim",
        "load-renewal",
        "load-commit",
        "growth-renewal",
        "growth-claim",
        "growth-claim-spec-index",
        "sustain-contract",
        "sustain-30k",
    ] {
        assert!(groups.contains(g), "no {g} phase in {groups:?}");
    }
    for p in phases {
        assert_eq!(p["errors"], 0, "{} / {} had errors: {}", p["group"], p["name"], p["first_error"]);
        assert!(p["units"].as_u64().unwrap() > 0, "{} / {} did no work", p["group"], p["name"]);
        assert!(p["p99_ms"].as_f64().unwrap() > 0.0 && p["wal_bytes_per_unit"].as_f64().unwrap() > 0.0);
    }
    // Writes through the fp_* functions really happened: the lease table saw updates.
    let renewal = phases.iter().find(|p| p["group"] == "renewal").unwrap();
    assert!(renewal["tables"]["worker_leases"]["n_tup_upd"].as_i64().unwrap() > 0, "{renewal}");
    assert_pgbench_beside(&bench);
    assert_eq!(bench["goals"].as_array().unwrap().len(), 7, "{}", bench["goals"]);
    assert!(bench["sizing"].as_str().unwrap().contains("2000 active runs at a 400 ms heartbeat need 5000 renewals/s"));
    for f in ["bench.md", "throughput-vs-clients.svg", "p99-vs-clients.svg", "growth.svg"] {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        assert!(text.len() > 500, "{f} too small");
    }
    assert!(stdout.contains("sizing:") && (stdout.contains("HOLDS") || stdout.contains("MISS")), "{stdout}");
    // The protected commit's overhead is taken apart: the role boundary's call, then the checks.
    let md = std::fs::read_to_string(dir.join("bench.md")).unwrap();
    for part in ["the role boundary's call", "the protocol's checks alone"] {
        assert!(md.contains(part), "bench.md lacks {part:?}");
    }
}

/// pgbench ran beside our driver (a round each) and on every fp_* call's script, each of which
/// really wrote its rows.
fn assert_pgbench_beside(bench: &serde_json::Value) {
    let phases = bench["phases"].as_array().unwrap();
    let pgbench = bench["pgbench"].as_array().unwrap();
    // The driver goal pairs round i of ours with round i of pgbench: as many of each.
    let rounds = fenceproof_bench::DRIVER_ROUNDS;
    assert_eq!(
        pgbench.iter().filter(|p| p["group"] == "driver").count(),
        rounds,
        "pgbench ran beside our driver, a round each"
    );
    assert_eq!(phases.iter().filter(|p| p["group"] == "driver").count(), rounds, "our driver's rounds");
    // Driver-neutral capacity: every fp_* call and its references as pgbench scripts, and each one
    // really wrote its rows (table statistics, not pgbench's word).
    let neutral: Vec<&serde_json::Value> = pgbench.iter().filter(|p| p["group"] != "driver").collect();
    assert_eq!(neutral.len(), 10, "{neutral:?}");
    for p in neutral {
        let tx = p["result"]["transactions"].as_i64().unwrap();
        let want = tx * p["units_per_tx"].as_i64().unwrap();
        assert!(tx > 0, "{} / {} ran no transaction", p["group"], p["name"]);
        assert!(
            p["rows_updated"].as_i64().unwrap() >= want,
            "{} / {} wrote fewer rows than {want}: {p}",
            p["group"],
            p["name"]
        );
    }
}
