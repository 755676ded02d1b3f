//! `fenceproof merge DIR...` of `audit --shard K/N` run folders (each holding
//! `audit.json` and `audit-shard.json`) into the report one unsharded audit of the same libraries
//! and experiments writes: the cells in the audit's order, each cell's evidence folder copied in,
//! audit.md, audit.json, summary.json and index.html in `--out`.

use std::path::{Path, PathBuf};

use fenceproof_audit::cell::CellResult;

/// One shard's folder: its cells' results, its `K/N`, and every cell of the whole audit.
struct Part {
    dir: PathBuf,
    results: Vec<CellResult>,
    shard: String,
    cells: Vec<String>,
}

fn read(dir: &Path) -> Result<Part, String> {
    let load = |name: &str| -> Result<serde_json::Value, String> {
        let f = dir.join(name);
        let text = std::fs::read_to_string(&f).map_err(|e| format!("cannot read {}: {e}", f.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", f.display()))
    };
    let results = serde_json::from_value(load("audit.json")?)
        .map_err(|e| format!("{} is not an audit's cells: {e}", dir.join("audit.json").display()))?;
    let plan = load("audit-shard.json")?;
    let shard = plan["shard"].as_str().unwrap_or_default().to_string();
    let cells = serde_json::from_value(plan["cells"].clone()).unwrap_or_default();
    Ok(Part { dir: dir.to_path_buf(), results, shard, cells })
}

/// The shards' cells in the audit's order, each with the folder it came from; or why the folders
/// are not one audit.
fn merge(parts: Vec<Part>) -> Result<Vec<(PathBuf, CellResult)>, String> {
    let Some(first) = parts.first() else { return Err("nothing to merge".into()) };
    let cells = first.cells.clone();
    let shards: Vec<String> = parts.iter().map(|p| p.shard.clone()).collect();
    if parts.iter().any(|p| p.cells != cells) {
        return Err("the shards audited different libraries or experiments".into());
    }
    fenceproof_mutants::shard::complete(&shards)?;
    let mut found: Vec<Option<(PathBuf, CellResult)>> = cells.iter().map(|_| None).collect();
    for p in parts {
        for r in p.results {
            let name = format!("{}/{}", r.library, r.experiment);
            let i = cells.iter().position(|c| *c == name).ok_or_else(|| format!("cell {name} is not in the audit"))?;
            if found[i].replace((p.dir.clone(), r)).is_some() {
                return Err(format!("cell {name} is in two shards"));
            }
        }
    }
    cells.iter().zip(found).map(|(c, f)| f.ok_or_else(|| format!("cell {c} is in no shard"))).collect()
}

/// The file that marks a folder as one of these runs.
pub const MARK: &str = "audit-shard.json";

/// Where the merged report goes when `--out` is not given.
pub const DEFAULT_OUT: &str = "reports/audit-merged";

/// `strict`: exit 1 when any library fails a check, not only the control.
pub fn run(dirs: &[PathBuf], out: &Path, print: crate::cmd::Print, strict: bool) -> u8 {
    let parts: Result<Vec<Part>, String> = dirs.iter().map(|d| read(d)).collect();
    let merged = match parts.and_then(merge) {
        Ok(m) => m,
        Err(msg) => return crate::fail::usage(msg),
    };
    if let Err(e) = write(&merged, out) {
        return crate::fail::harness_failed(format!("cannot write the merged audit to {}: {e}", out.display()));
    }
    let results: Vec<CellResult> = merged.into_iter().map(|(_, r)| r).collect();
    let seconds = results.iter().map(|r| r.duration_ms).sum::<u128>() as f64 / 1000.0;
    crate::cmd::audit::print_results(&results, out, seconds, print);
    crate::cmd::audit::verdict(&results, strict)
}

/// The report files into `out`, and each cell's evidence folder beside them (so the links of
/// index.html stay inside the merged folder).
fn write(merged: &[(PathBuf, CellResult)], out: &Path) -> Result<(), fenceproof_harness::HarnessError> {
    std::fs::create_dir_all(out)?;
    let mut names: Vec<&str> = Vec::new();
    for (dir, r) in merged {
        if !r.evidence.is_empty() && dir.join(&r.evidence).is_dir() {
            copy_dir(&dir.join(&r.evidence), &out.join(&r.evidence))?;
        }
        if !names.contains(&r.library.as_str()) {
            names.push(&r.library);
        }
    }
    let results: Vec<CellResult> = merged.iter().map(|(_, r)| r.clone()).collect();
    crate::cmd::audit::write(out, &results, &names, "fenceproof audit (merged shards)")
}

/// Copy the folder `from` to `to` (files and folders; symbolic links are skipped).
fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let t = e.file_type()?;
        if t.is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()))?;
        } else if t.is_file() {
            std::fs::copy(e.path(), to.join(e.file_name()))?;
        }
    }
    Ok(())
}
