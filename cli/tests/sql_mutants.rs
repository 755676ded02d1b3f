//! `fenceproof mutants sql` end to end: generated mutants of the fenced functions are installed
//! per experiment database and killed by a FAIL naming the rule (a refused legal step is a FAIL,
//! not an ERROR); shards run deterministic shares and `merge` joins them into one matrix.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn fenceproof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fenceproof"))
}

fn matrix(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("mutants-sql.json")).expect("mutants-sql.json written");
    serde_json::from_str(&text).unwrap()
}

fn report_dir(stdout: &str) -> PathBuf {
    let line = stdout.lines().find_map(|l| l.strip_prefix("report: ")).expect("a report line");
    PathBuf::from(line.trim())
}

fn scratch(name: &str) -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&tmp);
    tmp
}

#[test]
fn generated_mutants_are_listed_without_running_anything() {
    let tmp = scratch("sql_mutants_list");
    let (out, _) = fenceproof_harness::testkit::run_bounded(
        fenceproof().args(["mutants", "sql", "--list"]),
        &tmp.join("list"),
        Duration::from_secs(30),
    );
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{listed}");
    assert!(
        listed.contains("fp_run_transition/drop-guard/1") && listed.contains("fp_claim/drop-skip-locked/1"),
        "{listed}"
    );
}

/// The two mutants the shard test runs.
const PAIR: [&str; 2] = ["fp_run_transition/drop-guard/10", "fp_run_transition/drop-increment/1"];

/// Two shards `K/N` that hold one mutant of [`PAIR`] each: a shard is every N-th mutant of the
/// generated list, so N and K follow from where the two stand in it (an edit of the functions moves
/// them).
fn shards_apart(tmp: &Path) -> [String; 2] {
    let (out, _) = fenceproof_harness::testkit::run_bounded(
        fenceproof().args(["mutants", "sql", "--list", "--json"]),
        &tmp.join("list-json"),
        Duration::from_secs(30),
    );
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("the list as JSON");
    let at = |id: &str| listed.iter().position(|m| m["id"] == id).unwrap_or_else(|| panic!("{id} is not generated"));
    let (a, b) = (at(PAIR[0]), at(PAIR[1]));
    let n = (2..).find(|n| a % n != b % n).unwrap();
    [format!("{}/{n}", a % n + 1), format!("{}/{n}", b % n + 1)]
}

/// Two shards of a two-mutant selection through B-sigstop, each in its own run folder.
fn run_two_shards(tmp: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for shard in shards_apart(tmp).iter().map(String::as_str) {
        let (out, _) = fenceproof_harness::testkit::run_bounded(
            fenceproof()
                .args(["mutants", "sql", "--only", "B-sigstop", "--shard", shard, "--mutants"])
                .arg(PAIR.join(","))
                .arg("--reports-dir")
                .arg(tmp.join("reports")),
            &tmp.join(shard.replace('/', "-")),
            Duration::from_secs(240),
        );
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "shard {shard}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        dirs.push(report_dir(&stdout));
    }
    let shard_rows: Vec<usize> =
        dirs.iter().map(|d| matrix(d)["rows"].as_array().map(|r| r.len()).unwrap_or(0)).collect();
    assert_eq!(shard_rows.iter().sum::<usize>(), 2, "each mutant in exactly one shard: {shard_rows:?}");
    dirs
}

#[test]
fn generated_mutants_are_killed_by_a_named_rule_and_merged_from_shards() {
    let tmp = scratch("sql_mutants");
    // A mutant whose every save fails (the intent branch always inserts a NULL operation_id): B
    // cannot set up its first checkpoint, and that is a FAIL of the rule that a legal step succeeds, not an ERROR.
    let dirs = run_two_shards(&tmp);

    let merged = tmp.join("merged");
    let (out, _) = fenceproof_harness::testkit::run_bounded(
        fenceproof().arg("merge").args(&dirs).arg("--out").arg(&merged),
        &tmp.join("merge"),
        Duration::from_secs(30),
    );
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    // Only 2 of the generated set were run: the merged matrix says the rest is missing, exit 1.
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("are in none of the merged shards"), "{stdout}");
    let m = matrix(&merged);
    let rows = m["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows {
        assert_eq!(r["fate"], "killed", "{r}");
        assert_eq!(r["verdicts"][0][1], "FAIL", "killed by a FAIL, not an ERROR: {r}");
    }
    let guard = rows.iter().find(|r| r["id"] == "fp_run_transition/drop-guard/10").unwrap();
    assert!(
        guard["killed_by"][0].as_str().unwrap().contains("a step the protocol must allow succeeds"),
        "the refused legal step names its rule: {guard}"
    );
    let inc = rows.iter().find(|r| r["id"] == "fp_run_transition/drop-increment/1").unwrap();
    assert!(inc["killed_by"][0].as_str().unwrap().contains("revision"), "{inc}");
    assert!(std::fs::read_to_string(merged.join("mutants-sql.md"))
        .unwrap()
        .contains("| `fp_run_transition/drop-guard/10` |"));

    // Merging a shard with itself is refused.
    let (out, _) = fenceproof_harness::testkit::run_bounded(
        fenceproof().arg("merge").arg(&dirs[0]).arg(&dirs[0]).arg("--out").arg(tmp.join("twice")),
        &tmp.join("twice-run"),
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("in two shards"));
}

#[test]
fn bad_shards_and_selections_are_one_line_and_the_usage_code() {
    let tmp = scratch("sql_mutants_bad");
    for bad in [
        vec!["mutants", "sql", "--shard", "3/2"],
        vec!["mutants", "sql", "--mutants", "fp_nothing", "--list"],
        vec!["schedules", "against-mutants", "--sql", "--shard", "3/2"],
    ] {
        let (out, _) = fenceproof_harness::testkit::run_bounded(
            fenceproof().args(&bad),
            &tmp.join("bad"),
            Duration::from_secs(30),
        );
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert_eq!(
            fenceproof_harness::testkit::own_lines(&String::from_utf8_lossy(&out.stderr)).trim().lines().count(),
            1,
            "{bad:?}"
        );
    }
}

/// `schedules against-mutants --cases N`: each mutant's search stops after exactly N cases, however long
/// they take (a reviewed equivalent survives every case, so it plays all of them), and the matrix
/// says the budget was cases, not seconds.
#[test]
fn a_case_budget_plays_exactly_that_many_cases() {
    let tmp = scratch("schedules_mutants_cases");
    let (out, _) = fenceproof_harness::testkit::run_bounded(
        fenceproof()
            .args(["schedules", "against-mutants", "--sql", "--mutants", "fp_run_transition/drop-guard/8"])
            .args(["--cases", "2", "--seed", "0x2a", "--json", "--reports-dir"])
            .arg(tmp.join("reports")),
        &tmp.join("run"),
        Duration::from_secs(240),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let km: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON document");
    assert_eq!(km["budget_cases"], 2, "{km}");
    assert!(km["budget_s"].is_null(), "{km}");
    let rows = km["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{km}");
    assert_eq!(rows[0]["cases_played"], 2, "{km}");
    assert_eq!(rows[0]["killed"], false, "{km}");
    assert!(rows[0]["error"].is_null(), "{km}");
    // Seconds and cases together are refused in one line, with the usage code.
    let (out, _) = fenceproof_harness::testkit::run_bounded(
        fenceproof().args(["schedules", "against-mutants", "--cases", "2", "--budget-s", "5"]),
        &tmp.join("both"),
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(2));
}
