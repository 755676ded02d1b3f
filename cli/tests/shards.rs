//! The long searches split into shards and merged: for `schedules`, `audit` and `model check`,
//! two shards (`--shard 1/2`, `--shard 2/2`) joined by their merge give the same cases, cells or
//! bounds, with the same verdicts, as one unsharded run of the same flags; a merge missing a shard
//! is bad input (exit 2).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn scratch(name: &str) -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&tmp);
    tmp
}

/// `fenceproof ARGS`, bounded; its output files go under `dir/log-<label>`.
fn fenceproof(args: &[&str], dir: &Path, label: &str, bound_s: u64) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fenceproof"));
    cmd.args(args).current_dir(root());
    let (out, _) = fenceproof_harness::testkit::run_bounded(
        &mut cmd,
        &dir.join(format!("log-{label}")),
        Duration::from_secs(bound_s),
    );
    out
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn json_file(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

/// The run folder `reports/latest` points at.
fn latest(reports: &Path) -> PathBuf {
    reports.join(std::fs::read_link(reports.join("latest")).expect("latest"))
}

/// Run `args` unsharded and as shards 1/2 and 2/2 (each with its own reports folder), exit 0 each;
/// the unsharded run's folder and the shards' folders.
fn three_runs(args: &[&str], tmp: &Path, bound_s: u64, folder: impl Fn(&Path) -> PathBuf) -> (PathBuf, Vec<PathBuf>) {
    let mut dirs = Vec::new();
    for shard in ["", "1/2", "2/2"] {
        let label = if shard.is_empty() { "all".to_string() } else { shard.replace('/', "of") };
        let place = tmp.join(&label);
        let place_s = place.display().to_string();
        let mut a: Vec<&str> = args.to_vec();
        if !shard.is_empty() {
            a.extend(["--shard", shard]);
        }
        let a: Vec<String> = a.into_iter().map(|x| x.replace("{place}", &place_s)).collect();
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let out = fenceproof(&a, tmp, &label, bound_s);
        assert_eq!(out.status.code(), Some(0), "{a:?}\n{}", text(&out));
        dirs.push(folder(&place));
    }
    let all = dirs.remove(0);
    (all, dirs)
}

/// Merge `shards` into `tmp/merged` with `merge` (its words), exit `code`.
fn merge(merge: &[&str], shards: &[PathBuf], tmp: &Path, code: i32) -> (PathBuf, String) {
    let out_dir = tmp.join(format!("merged-{}", shards.len()));
    let mut a: Vec<String> = merge.iter().map(|s| s.to_string()).collect();
    a.extend(shards.iter().map(|d| d.display().to_string()));
    a.extend(["--out".to_string(), out_dir.display().to_string()]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let out = fenceproof(&a, tmp, &format!("merge-{}", shards.len()), 60);
    assert_eq!(out.status.code(), Some(code), "{a:?}\n{}", text(&out));
    (out_dir, text(&out))
}

/// (case, operations, every check held) of each played schedule.
fn cases(summary: &Value) -> Vec<(u64, u64, bool)> {
    let played = summary["played"].as_array().expect("played");
    played.iter().map(|c| (c["case"].as_u64().unwrap(), c["operations"].as_u64().unwrap(), c["held"] == true)).collect()
}

#[test]
fn two_schedule_shards_merge_into_the_unsharded_cases_and_verdicts() {
    let tmp = scratch("shards_schedules");
    let args = ["schedules", "run", "--cases", "4", "--seed", "0x2a", "--quiet", "--reports-dir", "{place}"];
    let (all, shards) = three_runs(&args, &tmp, 240, latest);
    let one = json_file(&all.join("schedules.json"));
    assert_eq!(cases(&one).iter().map(|c| c.0).collect::<Vec<_>>(), vec![1, 2, 3, 4], "{one:#}");
    let s1 = json_file(&shards[0].join("schedules.json"));
    assert_eq!(cases(&s1).iter().map(|c| c.0).collect::<Vec<_>>(), vec![1, 3], "shard 1/2 plays cases 1 and 3");
    let (out, said) = merge(&["merge"], &shards, &tmp, 0);
    let merged = json_file(&out.join("schedules.json"));
    assert_eq!(cases(&merged), cases(&one), "the same cases, operations and verdicts\n{said}");
    for k in ["seed", "cases", "operations"] {
        assert_eq!(merged[k], one[k], "{k}");
    }
    assert_eq!(merged["failure"].is_null(), one["failure"].is_null(), "the same verdict");
    assert_eq!(merged["shards"], serde_json::json!(["1/2", "2/2"]));
    assert_eq!(merged["coverage"]["schedules"], 4);
    // The model coverage is the union of the cases' transitions, whichever shard played them.
    let exercised = |v: &Value| v["model"]["exercised"].as_u64().expect("model coverage");
    let most = shards.iter().map(|d| exercised(&json_file(&d.join("schedules.json")))).max().unwrap_or(0);
    assert!(exercised(&merged) >= most.max(1), "{merged:#}");
    assert!(out.join("coverage.md").is_file(), "the merged run lists the unreached transitions");
    let (_, said) = merge(&["merge"], &shards[1..], &tmp, 2);
    assert!(said.contains("shard 1/2 is missing"), "{said}");
}

#[test]
fn two_audit_shards_merge_into_the_unsharded_cells_and_verdicts() {
    let tmp = scratch("shards_audit");
    let python = root().join(".audit/venv/bin/python");
    assert!(python.is_file(), "{} is missing: run `bash scripts/setup.sh`", python.display());
    let python = python.display().to_string();
    let args = [
        "audit",
        "--library",
        "reference",
        "--only",
        "pause-early-success,kill-control",
        "--python",
        &python,
        "--quiet",
        "--reports-dir",
        "{place}",
    ];
    let (all, shards) = three_runs(&args, &tmp, 240, latest);
    let verdicts = |cells: &Value| -> Vec<(String, String, Vec<String>)> {
        let cells = cells.as_array().expect("cells");
        let checks = |c: &Value| c["checks"].as_array().unwrap().iter().map(|k| k["verdict"].to_string()).collect();
        cells
            .iter()
            .map(|c| (format!("{}/{}", c["library"], c["experiment"]), c["verdict"].to_string(), checks(c)))
            .collect()
    };
    let one = verdicts(&json_file(&all.join("audit.json")));
    assert_eq!(one.len(), 2, "{one:?}");
    assert_eq!(verdicts(&json_file(&shards[0].join("audit.json"))).len(), 1, "one cell per shard");
    let (out, said) = merge(&["merge"], &shards, &tmp, 0);
    assert_eq!(verdicts(&json_file(&out.join("audit.json"))), one, "the same cells and verdicts\n{said}");
    for f in ["audit.md", "summary.json", "index.html", "reference-kill-control/cell.json"] {
        assert!(out.join(f).is_file(), "{f} in the merged folder");
    }
    let (_, said) = merge(&["merge"], &[shards[0].clone(), shards[0].clone()], &tmp, 2);
    assert!(said.contains("twice"), "{said}");
}

#[test]
fn two_model_check_shards_merge_into_the_unsharded_bounds_and_verdicts() {
    let tmp = scratch("shards_model");
    // Without a standby: the smaller bounds (still both of them).
    let args = ["model", "check", "--replication", "off", "--threads", "2", "--json", "--out", "{place}"];
    let (all, shards) = three_runs(&args, &tmp, 600, Path::to_path_buf);
    let bounds = |r: &Value| -> Vec<(String, u64, Value, Value, Value)> {
        r["bounds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                let o = &b["outcome"];
                let name = b["bound"].as_str().unwrap().to_string();
                (
                    name,
                    o["unique_states"].as_u64().unwrap(),
                    o["held"].clone(),
                    o["broken"].clone(),
                    o["unreached"].clone(),
                )
            })
            .collect()
    };
    let one = json_file(&all.join("model-check.json"));
    assert_eq!(bounds(&one).len(), 2);
    let (out, said) = merge(&["model", "merge"], &shards, &tmp, 0);
    let merged = json_file(&out.join("model-check.json"));
    assert_eq!(bounds(&merged), bounds(&one), "the same bounds, states and verdicts\n{said}");
    for k in ["unreached", "unique_states", "flags"] {
        assert_eq!(merged[k], one[k], "{k}");
    }
    assert!(said.contains("shards 1/2, 2/2"), "{said}");
}
