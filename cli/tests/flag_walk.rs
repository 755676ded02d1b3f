//! The harness keeps its side of the worker contract (issue 60, item 3): every row starts every
//! worker with every flag the contract's Flags table lists for the mode of that start. The table
//! is read as a team reads it, from docs/worker-protocol.md; the rows are walked by running them:
//! the whole default matrix runs with a strict wrapper of the reference worker that exits 2, as
//! the contract lets a worker, on any listed flag missing, and each row's timeline records every
//! start with its mode and command line. Row A once started its scripted worker without
//! `--pace-ms`, and H and N their workers without `--write-path`: both fail this test.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

/// The flags the docs' Flags table lists for each start mode: `always` rows under "always", and
/// the rows whose passed cell begins with "<mode> mode" under that mode.
fn table() -> BTreeMap<String, Vec<String>> {
    let doc = include_str!("../../docs/worker-protocol.md");
    let mut modes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in doc.lines().filter(|l| l.starts_with("| `--")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        let passed = cells[1].trim();
        let mode = match passed.split_once(" mode") {
            _ if passed == "always" => "always",
            Some((m, _)) if !m.contains(' ') => m,
            _ => continue,
        };
        let flags = cells[0].split('`').skip(1).step_by(2).flat_map(|span| span.split_whitespace());
        modes.entry(mode.to_string()).or_default().extend(flags.filter(|f| f.starts_with("--")).map(String::from));
    }
    modes
}

/// The flags a start in `mode` must carry under the table.
fn required(table: &BTreeMap<String, Vec<String>>, mode: &str) -> Vec<String> {
    [table.get("always").cloned().unwrap_or_default(), table.get(mode).cloned().unwrap_or_default()].concat()
}

/// A wrapper of the reference worker: it logs each start (its mode told by the flags that only
/// that mode carries) and exits 2 with a line on stderr when a flag of its mode is missing.
fn strict_wrapper(dir: &Path, table: &BTreeMap<String, Vec<String>>, log: &Path) -> PathBuf {
    let reference = fenceproof_scenarios::binaries::default_worker_bin();
    assert!(reference.is_file(), "build the reference worker first: {}", reference.display());
    let need: BTreeMap<&str, Vec<String>> =
        ["commands", "dispatcher", "scripted"].into_iter().map(|m| (m, required(table, m))).collect();
    let body = format!(
        r#"#!/usr/bin/env python3
import json, os, sys
NEED = json.loads({need:?})
argv = sys.argv[1:]
if argv != ["--list-mutants"]:
    mode = "scripted" if "--script" in argv else "dispatcher" if "--tools-addr" in argv else "commands"
    missing = [f for f in NEED[mode] if f not in argv]
    with open({log:?}, "a") as f:
        f.write(json.dumps({{"mode": mode, "missing": missing, "argv": argv}}) + "\n")
    if missing:
        print("flag walk: a %s start without %s" % (mode, " ".join(missing)), file=sys.stderr)
        sys.exit(2)
os.execv({reference:?}, [{reference:?}] + argv)
"#,
        need = serde_json::to_string(&need).unwrap(),
        log = log.display().to_string(),
        reference = reference.display().to_string(),
    );
    // Named as the reference is, so Model-paths-db's reference driver starts through it too.
    let p = dir.join("fenceproof-worker-flagwalk");
    std::fs::write(&p, body).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// Every worker start a row's timeline records: (worker, mode, its command line after the
/// process's own `--database-url`, `--owner`, `--events`).
fn starts(row_dir: &Path) -> Vec<(String, String, Vec<String>)> {
    let text = std::fs::read_to_string(row_dir.join("timeline.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["action"] == "spawn" && e["detail"]["mode"].is_string())
        .map(|e| {
            let args = e["detail"]["args"].as_array().into_iter().flatten();
            (
                e["target"].as_str().unwrap_or("?").to_string(),
                e["detail"]["mode"].as_str().unwrap_or("?").to_string(),
                args.filter_map(|a| a.as_str().map(String::from)).collect(),
            )
        })
        .collect()
}

#[test]
fn the_table_read_from_the_docs_has_every_mode() {
    let t = table();
    for f in ["--database-url", "--owner", "--events", "--secrets-dir", "--trace-id", "--write-path"] {
        assert!(t["always"].iter().any(|a| a == f), "{f}: {t:?}");
    }
    assert_eq!(t["dispatcher"], ["--tools-addr"], "{t:?}");
    assert!(t["scripted"].iter().any(|a| a == "--pace-ms") && t["scripted"].len() == 7, "{t:?}");
    assert_eq!(t.len(), 3, "{t:?}");
}

#[test]
fn every_row_starts_every_worker_with_every_flag_its_mode_lists() {
    let table = table();
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("flag_walk");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let log = tmp.join("starts.jsonl");
    let worker = strict_wrapper(&tmp, &table, &log);
    let reports = tmp.join("reports");
    let mut cmd = Command::new(FENCEPROOF);
    cmd.args(["verify", "--quiet", "--skip-conformance", "--worker-bin"])
        .arg(&worker)
        .arg("--reports-dir")
        .arg(&reports);
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, &tmp.join("run"), Duration::from_secs(900));
    let text = String::from_utf8_lossy(&out.stdout).to_string();

    // The wrapper saw every start; none lacked a flag of its mode.
    let logged: Vec<Value> =
        std::fs::read_to_string(&log).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let short: Vec<&Value> = logged.iter().filter(|s| s["missing"].as_array().is_some_and(|m| !m.is_empty())).collect();
    assert!(short.is_empty(), "starts without a flag their mode lists: {short:?}\n{text}");
    for mode in ["commands", "dispatcher", "scripted"] {
        assert!(logged.iter().any(|s| s["mode"] == mode), "no {mode} start was walked");
    }

    // Each row's own record of its starts, judged against the table for the mode it declared.
    let run = std::fs::read_dir(&reports).unwrap().flatten().map(|e| e.path()).find(|p| p.join("matrix.json").exists());
    let run = run.unwrap_or_else(|| panic!("no run folder:\n{text}"));
    let matrix: Value = serde_json::from_str(&std::fs::read_to_string(run.join("matrix.json")).unwrap()).unwrap();
    let all = fenceproof_scenarios::all();
    let mut walked = 0;
    for r in matrix["results"].as_array().unwrap() {
        let id = r["id"].as_str().unwrap();
        let error = r["error"].as_str().unwrap_or_default();
        assert!(!error.contains("harness bug") && !error.contains("flag walk:"), "{id}: {error}");
        let rows = starts(&run.join(id));
        let exp = all.iter().find(|e| e.id == id).unwrap();
        if exp.judges == fenceproof_scenarios::experiment::Judges::Protocol {
            assert!(!rows.is_empty(), "{id} judges the worker but its timeline records no start of it ({error})");
        }
        for (name, mode, args) in rows {
            let line = [vec!["--database-url".into(), "--owner".into(), "--events".into()], args].concat();
            let missing: Vec<String> = required(&table, &mode).into_iter().filter(|f| !line.contains(f)).collect();
            assert!(missing.is_empty(), "{id}: worker {name} started in {mode} mode without {missing:?}");
            walked += 1;
        }
    }
    // The starts went through the wrapper (a row run again alone when starved starts more).
    assert!(logged.len() > walked, "the rows recorded {walked} starts, the wrapper saw only {}", logged.len());
    eprintln!("flag walk: {walked} starts in {} rows", matrix["results"].as_array().unwrap().len());
}
