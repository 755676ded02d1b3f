//! `--json` on every subcommand that prints a result: stdout is exactly one JSON document carrying
//! what the text would say (and the run folder as `"report"` where there is one). Only the cheap
//! modes run here (list, a one-probe conformance, the SQL mutants' listing, `merge` of constructed
//! shards); every subcommand's `--help` is checked to offer the flag. Beside them, the one cheap
//! refusal of `verify-versions` (a selection that leaves no version).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fenceproof(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fenceproof")).args(args).output().expect("fenceproof runs")
}

/// Stdout as one JSON document (the whole of it, nothing before or after).
fn json(out: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!("stdout is not one JSON document ({e}):\n{text}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr))
    })
}

fn scratch(name: &str) -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    tmp
}

#[test]
fn list_json_has_one_entry_per_experiment() {
    let text = fenceproof(&["list"]);
    assert_eq!(text.status.code(), Some(0));
    let ids: Vec<String> = String::from_utf8_lossy(&text.stdout)
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    let out = fenceproof(&["list", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out);
    let rows = v.as_array().expect("an array");
    let json_ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(json_ids, ids);
    assert!(rows.iter().all(|r| r["title"].is_string() && r["section"].is_string()));
}

#[test]
fn conformance_json_holds_the_points_and_the_run_folder() {
    let dir = scratch("json_conformance");
    let reports = dir.to_str().unwrap();
    let out = fenceproof(&["conformance", "--json", "--only", "flags", "--reports-dir", reports]);
    let v = json(&out);
    assert_eq!(out.status.code(), Some(0), "{v}");
    let points = v["points"].as_array().expect("points");
    assert!(!points.is_empty() && points.iter().all(|p| p["probe"] == "flags"), "{v}");
    let run = PathBuf::from(v["report"].as_str().expect("report"));
    assert!(run.join("conformance.json").is_file(), "{}", run.display());
}

#[test]
fn mutants_sql_list_json_matches_the_text_listing() {
    let text = fenceproof(&["mutants", "sql", "--list", "--mutants", "fp_claim/"]);
    assert_eq!(text.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&text.stdout);
    let count: usize = stdout.lines().last().unwrap().strip_suffix(" mutants").unwrap().parse().unwrap();
    let out = fenceproof(&["mutants", "sql", "--list", "--json", "--mutants", "fp_claim/"]);
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out);
    let rows = v.as_array().expect("an array");
    assert_eq!(rows.len(), count);
    assert!(count > 0 && rows.iter().all(|r| r["id"].as_str().unwrap().starts_with("fp_claim/")));
    assert!(rows.iter().all(|r| r["line"].is_u64() && r["before"].is_string() && r["after"].is_string()));
}

/// A shard's `mutants-sql.json`: one killed mutant of two generated.
fn shard(dir: &Path, run: &str, k: u32, id: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let m = serde_json::json!({
        "run_ids": [run], "shards": [format!("{k}/2")], "generated": 2, "reference_passed": true,
        "reference_failures": [], "experiments": ["A"], "duration_ms": 10,
        "rows": [{"id": id, "function": "fp_claim", "operator": "drop-guard", "line": 1, "before": "x",
            "after": "y", "verdicts": [["A", "FAIL"]], "killed_by": ["A"], "fate": "killed"}],
    });
    std::fs::write(dir.join("mutants-sql.json"), serde_json::to_string(&m).unwrap()).unwrap();
}

#[test]
fn merge_json_is_the_merged_matrix_with_its_folder() {
    let dir = scratch("json_merge");
    let (a, b, merged) = (dir.join("a"), dir.join("b"), dir.join("merged"));
    shard(&a, "r1", 1, "fp_claim/one");
    shard(&b, "r2", 2, "fp_claim/two");
    let args = [a.to_str().unwrap(), b.to_str().unwrap(), "--out", merged.to_str().unwrap()];
    let out = fenceproof(&[&["merge", "--json"][..], &args].concat());
    let v = json(&out);
    assert_eq!(out.status.code(), Some(0), "{v}");
    assert_eq!(v["rows"].as_array().unwrap().len(), 2);
    assert_eq!(v["shards"], serde_json::json!(["1/2", "2/2"]));
    assert_eq!(v["report"], merged.to_str().unwrap());
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(merged.join("mutants-sql.json")).unwrap()).unwrap();
    assert_eq!(saved["rows"], v["rows"]);
    // Exit codes as without --json: a shard missing leaves a generated mutant in none (exit 1).
    let out = fenceproof(&["merge", "--json", a.to_str().unwrap(), "--out", merged.to_str().unwrap()]);
    assert_eq!(json(&out)["rows"].as_array().unwrap().len(), 1);
    let text = fenceproof(&["merge", a.to_str().unwrap(), "--out", merged.to_str().unwrap()]);
    assert_eq!((out.status.code(), text.status.code()), (Some(1), Some(1)));
}

/// The subcommands `fenceproof --help` lists.
/// The commands `fenceproof <path> --help` lists (clap's own `help` left out).
fn subcommands(path: &[&str]) -> Vec<String> {
    let out = fenceproof(&[path, &["--help"][..]].concat());
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let commands = text.split("Commands:").nth(1).expect("a Commands section");
    commands
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect()
}

#[test]
fn every_subcommand_with_a_result_offers_json() {
    let commands = subcommands(&[]);
    assert!(commands.len() >= 14 && commands.iter().any(|c| c == "docs"), "{commands:?}");
    // A group (`mutants`, `schedules`) has no flags of its own: each of its commands has them.
    let grouped = |c: &String| match c.as_str() {
        "mutants" | "schedules" => subcommands(&[c.as_str()]).into_iter().map(|s| format!("{c} {s}")).collect(),
        _ => vec![c.clone()],
    };
    let paths: Vec<String> = commands.iter().filter(|c| *c != "docs").flat_map(grouped).collect();
    assert!(paths.iter().any(|p| p == "mutants sql") && paths.iter().any(|p| p == "schedules run"), "{paths:?}");
    for c in &paths {
        let args: Vec<&str> = c.split_whitespace().chain(["--help"]).collect();
        let out = fenceproof(&args);
        assert_eq!(out.status.code(), Some(0), "{c} --help");
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.contains("--json"), "`fenceproof {c} --help` does not mention --json:\n{help}");
    }
}

/// `verify-versions --skip-major` that leaves out every version found is one line and the usage
/// code, and starts nothing.
#[test]
fn skipping_every_version_is_one_line() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("skip_every_major");
    let _ = std::fs::remove_dir_all(&dir);
    let every: Vec<String> = (9..=30).map(|m| m.to_string()).collect();
    let (out, _) = fenceproof_harness::testkit::run_bounded(
        std::process::Command::new(env!("CARGO_BIN_EXE_fenceproof"))
            .args(["verify-versions", "--skip-major", &every.join(","), "--reports-dir"])
            .arg(dir.join("reports")),
        &dir.join("out"),
        std::time::Duration::from_secs(30),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(fenceproof_harness::testkit::own_lines(&err).trim().lines().count(), 1, "{err}");
    assert!(err.contains("--skip-major"), "{err}");
    assert!(!dir.join("reports").exists(), "no run folder for a run that did not start");
}

/// `verify --json` has one shape whether or not the conformance gate stopped the run: the same
/// keys, `stopped` and `conformance` null or not, `results` empty when stopped; rows say `verdict`.
#[test]
fn verify_json_has_one_shape_whether_or_not_the_gate_stops_the_run() {
    let dir = scratch("json_verify_shape");
    let reports = dir.join("reports");
    let ran = fenceproof(&["verify", "--json", "--only", "A", "--reports-dir", reports.to_str().unwrap()]);
    assert_eq!(ran.status.code(), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));
    let ran = json(&ran);
    // The Python example whose operation_id carries its owner id (conformance stops it).
    let worker = fenceproof_harness::testkit::variant_worker("bug_classes", "op-id-owner", &dir);
    let args = ["verify", "--json", "--only", "A", "--reports-dir", reports.to_str().unwrap(), "--worker-bin"];
    let stopped = fenceproof(&[&args[..], &[worker.to_str().unwrap()]].concat());
    assert_eq!(stopped.status.code(), Some(4), "{}", String::from_utf8_lossy(&stopped.stderr));
    let stopped = json(&stopped);
    let keys = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&ran), keys(&stopped), "one shape");
    assert!(ran["stopped"].is_null() && ran["conformance"].is_null(), "the reference runs no gate: {ran}");
    assert_eq!(ran["results"][0]["verdict"], "PASS", "{ran}");
    assert!(ran["results"][0].get("outcome").is_none(), "one name for a verdict");
    assert!(stopped["stopped"].as_str().unwrap().contains("deviates"), "{stopped}");
    assert!(stopped["conformance"]["points"].as_array().is_some_and(|p| !p.is_empty()), "{stopped}");
    assert_eq!(stopped["results"], serde_json::json!([]));
    assert!(Path::new(stopped["report"].as_str().unwrap()).join("conformance.json").exists(), "{stopped}");
}
