//! The team's own schema: a contract naming the team's migrations (`database.migrations`) runs the
//! matrix on them instead of fenceproof's — the example schema of examples/team-schema (a tenant
//! key, extra NOT NULL columns with defaults, triggers and a function of the team's own) passes
//! with the Python example on its own statements — and a schema missing a protocol column is one
//! line naming it, exit 2, with nothing left running. P-api-team probes the lease functions the
//! example's contract maps (`[database.functions]`) and FAILs a broken copy of each by its rule.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const FENCEPROOF: &str = env!("CARGO_BIN_EXE_fenceproof");

/// Set on each run this file starts, so that what it left running is told apart from other runs.
const MARK: &str = "FENCEPROOF_TEAM_SCHEMA_TEST_RUN";

fn tmp(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("team_schema").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// `verify --contract contract --write-path direct` with the Python example: exit code, output.
fn verify(contract: &Path, dir: &Path, extra: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(FENCEPROOF);
    cmd.args(["verify", "--quiet", "--write-path", "direct", "--contract"])
        .arg(contract)
        .args(extra)
        .arg("--worker-bin")
        .arg(examples().join("python-worker/worker.py"))
        .arg("--reports-dir")
        .arg(dir.join("reports"))
        .env(MARK, dir);
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, dir, Duration::from_secs(600));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// The live processes that inherited this test's mark for `dir`, as their command lines.
fn left_running(dir: &Path) -> Vec<String> {
    let want = format!("{MARK}={}", dir.display());
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(env) = std::fs::read(e.path().join("environ")) else { continue };
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        if stat.contains(") Z ") || !env.split(|b| *b == 0).any(|v| v == want.as_bytes()) {
            continue;
        }
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        found.push(String::from_utf8_lossy(&cmd).replace('\0', " "));
    }
    found
}

#[test]
fn the_example_team_schema_runs_the_whole_matrix() {
    let dir = tmp("example");
    let (code, stdout, stderr) = verify(&examples().join("team-schema.toml"), &dir, &[]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let summary = stdout.lines().find(|l| l.contains("experiments passed")).unwrap_or_default();
    let counts: Vec<usize> =
        summary.split_whitespace().next().unwrap_or_default().split('/').filter_map(|n| n.parse().ok()).collect();
    assert!(counts.len() == 2 && counts[0] == counts[1] && counts[0] >= 35, "every selected row passed: {summary}");
    // The rows ran on the team's schema: its run rows carry the team's own columns.
    let run = std::fs::read_dir(dir.join("reports"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("A/oracle.json").is_file())
        .max()
        .expect("a run folder with row A");
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(run.join("A/oracle.json")).unwrap()).unwrap();
    let run_row = rows.iter().find(|r| r["table_name"] == "agent_runs").expect("a run commit in A");
    assert!(
        run_row["new_row"]["tenant_id"] == "tenant1" && run_row["new_row"]["priority"] == 0,
        "the team's columns, filled by their defaults: {run_row}"
    );
}

#[test]
fn a_team_schema_missing_a_protocol_column_is_one_line_and_exit_2() {
    let dir = tmp("missing-column");
    let sql = std::fs::read_to_string(examples().join("team-schema/0001_team_schema.sql")).unwrap();
    let broken = sql.replace("  dispatch_until  timestamptz,\n", "");
    assert_ne!(broken, sql, "the example schema has the column this test removes");
    let broken =
        broken.replace("tool_operations(status, dispatch_until, updated_at)", "tool_operations(status, updated_at)");
    std::fs::write(dir.join("schema.sql"), broken).unwrap();
    let contract = std::fs::read_to_string(examples().join("team-schema.toml"))
        .unwrap()
        .replace("team-schema/0001_team_schema.sql", "schema.sql");
    std::fs::write(dir.join("contract.toml"), contract).unwrap();
    let (code, stdout, stderr) = verify(&dir.join("contract.toml"), &dir, &["--only", "A"]);
    assert_eq!(code, Some(2), "{stdout}\n{stderr}");
    let own = fenceproof_harness::testkit::own_lines(&stderr);
    let lines: Vec<&str> = own.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {own}");
    assert!(lines[0].contains("tool_operations.dispatch_until"), "names the missing column: {own}");
    assert!(left_running(&dir).is_empty(), "nothing left running: {:?}", left_running(&dir));
}

#[test]
fn a_team_schema_on_the_fp_path_is_refused_up_front() {
    let dir = tmp("api-path");
    let mut cmd = Command::new(FENCEPROOF);
    cmd.args(["verify", "--write-path", "api", "--contract"]).arg(examples().join("team-schema.toml"));
    let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, &dir, Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--write-path direct"), "{err}");
}

/// A copy of the example schema and contract in `dir`, with `edit` applied to the schema.
fn variant(dir: &Path, edit: (&str, &str)) -> PathBuf {
    let sql = std::fs::read_to_string(examples().join("team-schema/0001_team_schema.sql")).unwrap();
    let broken = sql.replace(edit.0, edit.1);
    assert_ne!(broken, sql, "the example schema has the text this variant edits: {}", edit.0);
    std::fs::write(dir.join("schema.sql"), broken).unwrap();
    let contract = std::fs::read_to_string(examples().join("team-schema.toml"))
        .unwrap()
        .replace("team-schema/0001_team_schema.sql", "schema.sql");
    std::fs::write(dir.join("contract.toml"), contract).unwrap();
    dir.join("contract.toml")
}

#[test]
fn p_api_team_probes_the_functions_the_contract_maps_and_fails_each_broken_one_by_its_rule() {
    let dir = tmp("p-api-team");
    let (code, stdout, stderr) =
        verify(&examples().join("team-schema.toml"), &dir, &["--only", "P-api-team", "--skip-conformance"]);
    assert_eq!(code, Some(0), "the example's own functions pass: {stdout}\n{stderr}");
    assert!(stdout.contains("1/1 experiments passed"), "{stdout}");
    for (name, edit, rule) in [
        (
            "renew-without-epoch",
            ("AND l.owner = p_owner AND l.epoch = p_epoch AND l.expires_at", "AND l.owner = p_owner AND l.expires_at"),
            "lease.renew-owner-epoch",
        ),
        (
            "release-zeroes-epoch",
            ("SET owner = NULL, expires_at", "SET owner = NULL, epoch = 0, expires_at"),
            "lease.release-keeps-epoch",
        ),
        (
            "acquire-ignores-run-status",
            ("r.status IN ('pending', 'running'))\n  RETURNING l.epoch", "true)\n  RETURNING l.epoch"),
            "runs.terminal-final",
        ),
    ] {
        let d = tmp(&format!("p-api-team-{name}"));
        let (code, stdout, stderr) = verify(&variant(&d, edit), &d, &["--only", "P-api-team", "--skip-conformance"]);
        assert_eq!(code, Some(1), "{name}: {stdout}\n{stderr}");
        let failed: Vec<&str> = stdout.lines().filter(|l| l.contains("FAILED")).collect();
        assert!(failed.iter().any(|l| l.contains(rule)), "{name} FAILs by {rule}: {failed:#?}");
    }
    // Without a mapping the row is bad input, and the direct path's note says why P-api is skipped.
    let d = tmp("p-api-team-unmapped");
    let contract = std::fs::read_to_string(examples().join("team-schema.toml")).unwrap();
    let cut = contract.find("[database.functions]").unwrap();
    // The mapping runs to the next table or to the end of the file.
    let end = contract[cut + 1..].find("\n[").map_or(contract.len(), |i| cut + 2 + i);
    let unmapped = format!("{}{}", &contract[..cut], &contract[end..])
        .replace("team-schema/", &format!("{}/team-schema/", examples().display()));
    std::fs::write(d.join("contract.toml"), unmapped).unwrap();
    let (code, _, stderr) = verify(&d.join("contract.toml"), &d, &["--only", "P-api-team", "--skip-conformance"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("[database.functions]"), "{stderr}");
    let (_, _, stderr) = verify(&d.join("contract.toml"), &d, &["--only", "P-api-lease,A", "--skip-conformance"]);
    let note = stderr.lines().find(|l| l.contains("skipped on the direct write path")).unwrap_or_default();
    assert!(note.contains("P-api-lease") && note.contains("has no fp_* functions"), "{stderr}");
}

/// `conformance` on the path and schema the worker runs: `--write-path direct --contract` starts
/// the Python example on its own statements (every spawn carries `--write-path direct`) on the
/// team's schema (a schema missing a protocol column is refused by name, exit 2, so the contract's
/// migrations are the ones applied), and the fp_* path with a team schema is refused up front.
#[test]
fn conformance_runs_on_the_direct_path_and_the_team_schema() {
    let dir = tmp("conformance");
    let run = |contract: &Path, path: &str| {
        let mut cmd = Command::new(FENCEPROOF);
        cmd.args(["conformance", "--quiet", "--write-path", path, "--contract"])
            .arg(contract)
            .arg("--worker-bin")
            .arg(examples().join("python-worker/worker.py"))
            .arg("--reports-dir")
            .arg(dir.join("reports"))
            .env(MARK, &dir);
        let (out, _) = fenceproof_harness::testkit::run_bounded(&mut cmd, &dir, Duration::from_secs(300));
        (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    };
    let (code, text) = run(&examples().join("team-schema.toml"), "direct");
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("contract points kept, 0 deviations"), "{text}");
    let report = text.lines().find_map(|l| l.strip_prefix("report: ")).expect("the run folder");
    let timeline = std::fs::read_to_string(Path::new(report.trim()).join("conformance/lease/timeline.jsonl")).unwrap();
    let spawns: Vec<&str> = timeline.lines().filter(|l| l.contains("\"action\":\"spawn\"")).collect();
    assert!(!spawns.is_empty() && spawns.iter().all(|l| l.contains("\"--write-path\",\"direct\"")), "{timeline}");

    let sql = std::fs::read_to_string(examples().join("team-schema/0001_team_schema.sql")).unwrap();
    let broken = sql
        .replace("  dispatch_until  timestamptz,\n", "")
        .replace("tool_operations(status, dispatch_until, updated_at)", "tool_operations(status, updated_at)");
    std::fs::write(dir.join("schema.sql"), broken).unwrap();
    let contract = std::fs::read_to_string(examples().join("team-schema.toml"))
        .unwrap()
        .replace("team-schema/0001_team_schema.sql", "schema.sql");
    std::fs::write(dir.join("contract.toml"), contract).unwrap();
    let (code, text) = run(&dir.join("contract.toml"), "direct");
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("tool_operations.dispatch_until"), "the team's schema was the one applied: {text}");

    let (code, text) = run(&examples().join("team-schema.toml"), "api");
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("--write-path direct"), "{text}");
    assert!(left_running(&dir).is_empty(), "nothing left running: {:?}", left_running(&dir));
}
