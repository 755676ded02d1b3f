//! `fenceproof merge DIR...` of `schedules run --shard K/N` run folders (each holding a
//! `schedules.json`, one --seed, one --cases): joined into the report one unsharded run of the same seed and cases makes,
//! written to a new folder under `--out` (with the failing schedule, when one failed).

use std::path::{Path, PathBuf};

use fenceproof_harness::report::exit;
use fenceproof_mutants::schedules::{merge, Summary};

fn read(dir: &Path) -> Result<Summary, String> {
    let f = dir.join("schedules.json");
    let text = std::fs::read_to_string(&f).map_err(|e| format!("cannot read {}: {e}", f.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not a schedules report: {e}", f.display()))
}

/// The file that marks a folder as one of these runs.
pub const MARK: &str = "schedules.json";

/// Where the merged report goes when `--out` is not given.
pub const DEFAULT_OUT: &str = "reports/schedules-merged";

pub fn run(dirs: &[PathBuf], out: &Path, print: crate::cmd::Print) -> u8 {
    let parts: Result<Vec<Summary>, String> = dirs.iter().map(|d| read(d)).collect();
    let mut merged = match parts.and_then(merge::merge) {
        Ok(m) => m,
        Err(msg) => return crate::fail::usage(msg),
    };
    if let Err(e) = write(&mut merged, out) {
        return crate::fail::harness_failed(format!("cannot write the merged report to {}: {e}", out.display()));
    }
    let seen = merged.played.iter().flat_map(|r| r.transitions.iter().cloned()).collect();
    let coverage = fenceproof_scenarios::coverage::of_transitions(out, &seen);
    let text = format!(
        "{}{}\n",
        crate::cmd::schedules::summary_text(&merged),
        fenceproof_scenarios::coverage::line(&coverage)
    );
    crate::cmd::print_result(&merged, &text, out, print);
    if merged.failure.is_none() {
        exit::OK
    } else {
        exit::FAILED
    }
}

/// `schedules.json` into `out`, and the failing schedule beside it (its replay line pointing there,
/// so the merged folder stands alone).
fn write(merged: &mut Summary, out: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(out)?;
    if let Some(f) = &mut merged.failure {
        let to = out.join("schedule-failure.json");
        std::fs::write(&to, serde_json::to_string_pretty(&f.schedule).expect("json"))?;
        f.replay = f.replay.replacen(&f.saved_to.display().to_string(), &to.display().to_string(), 1);
        f.saved_to = to;
    }
    std::fs::write(out.join("schedules.json"), serde_json::to_string_pretty(merged).expect("json"))
}
