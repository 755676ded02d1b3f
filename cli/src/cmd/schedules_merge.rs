//! `fenceproof schedules-merge DIR...`: join the run folders of `schedules --shard K/N` runs (each
//! holding a `schedules.json`) into the report one unsharded run of the same seed and cases makes,
//! written to a new folder under `--out` (with the failing schedule, when one failed).

use std::path::{Path, PathBuf};

use fenceproof_harness::report::exit;
use fenceproof_mutants::schedules::{merge, Summary};

/// Join the run folders of `schedules --shard K/N` runs (one --seed, one --cases) into one
/// report: the cases in order, the first failure (with its schedule, replayable), the coverage.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Run folders, each holding a schedules.json (every shard of one N, each once).
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// Where the merged schedules.json (and schedule-failure.json) go.
    #[arg(long, default_value = "reports/schedules-merged")]
    out: PathBuf,
    /// Print the merged report as one JSON document on stdout: schedules.json's fields plus
    /// "report", the --out folder.
    #[arg(long)]
    json: bool,
    /// Print only what failed and the closing line (for CI logs).
    #[arg(long, conflicts_with = "json")]
    quiet: bool,
}

fn read(dir: &Path) -> Result<Summary, String> {
    let f = dir.join("schedules.json");
    let text = std::fs::read_to_string(&f).map_err(|e| format!("cannot read {}: {e}", f.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not a schedules report: {e}", f.display()))
}

pub fn run(a: Args) -> u8 {
    let print = crate::cmd::Print::new(a.json, a.quiet);
    let parts: Result<Vec<Summary>, String> = a.dirs.iter().map(|d| read(d)).collect();
    let mut merged = match parts.and_then(merge::merge) {
        Ok(m) => m,
        Err(msg) => return crate::fail::usage(msg),
    };
    if let Err(e) = write(&mut merged, &a.out) {
        return crate::fail::harness_failed(format!("cannot write the merged report to {}: {e}", a.out.display()));
    }
    let seen = merged.played.iter().flat_map(|r| r.transitions.iter().cloned()).collect();
    let coverage = fenceproof_scenarios::coverage::of_transitions(&a.out, &seen);
    let text = format!(
        "{}{}\n",
        crate::cmd::schedules::summary_text(&merged),
        fenceproof_scenarios::coverage::line(&coverage)
    );
    crate::cmd::print_result(&merged, &text, &a.out, print);
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
