//! `fenceproof model merge DIR...`: join the folders of `model check --shard K/N --out DIR` runs
//! (each holding a `model-check.json`) into the result one unsharded `model check` with the same
//! flags prints: the bounds in `--bound all`'s order, the situations no bound reached, the states
//! summed; written to `--out` as model-check.json.

use std::path::{Path, PathBuf};

use crate::cmd::model_report::{finish, Bound, Print, Report, BOUND_ORDER};

/// The folders of `model check --shard K/N --out DIR` runs, joined into one result.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Folders, each holding a model-check.json (every shard of one N, each once).
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// Where the merged model-check.json goes.
    #[arg(long, default_value = "reports/model-merged")]
    out: PathBuf,
}

fn read(dir: &Path) -> Result<Report, String> {
    let f = dir.join("model-check.json");
    let text = std::fs::read_to_string(&f).map_err(|e| format!("cannot read {}: {e}", f.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not a model check's result: {e}", f.display()))
}

/// The shards' reports as one, or why they are not one check (other flags, a shard missing or
/// given twice, a bound in two shards).
pub fn merge(parts: Vec<Report>) -> Result<Report, String> {
    let Some(first) = parts.first() else { return Err("nothing to merge".into()) };
    let flags = first.flags.clone();
    let (mut shards, mut bounds): (Vec<String>, Vec<Bound>) = (Vec::new(), Vec::new());
    for p in parts {
        if p.flags != flags {
            return Err(format!("the shards ran with other flags ({} and {flags})", p.flags));
        }
        shards.extend(p.shards);
        bounds.extend(p.bounds);
    }
    fenceproof_mutants::shard::complete(&shards)?;
    bounds.sort_by_key(|b| BOUND_ORDER.iter().position(|n| *n == b.bound).unwrap_or(usize::MAX));
    if let Some(w) = bounds.windows(2).find(|w| w[0].bound == w[1].bound) {
        return Err(format!("the {} bound is in two shards", w[0].bound));
    }
    Ok(Report::of(bounds, shards, flags))
}

/// The file that marks a folder as one of these runs.
pub const MARK: &str = "model-check.json";

pub fn run(a: Args, json: bool, quiet: bool) -> u8 {
    run_dirs(&a.dirs, &a.out, json, quiet)
}

/// `dirs` merged into `out` (`fenceproof merge` and `model merge` both come here).
pub fn run_dirs(dirs: &[PathBuf], out: &Path, json: bool, quiet: bool) -> u8 {
    let parts: Result<Vec<Report>, String> = dirs.iter().map(|d| read(d)).collect();
    let merged = match parts.and_then(merge) {
        Ok(m) => m,
        Err(msg) => return crate::fail::usage(msg),
    };
    let path = out.join(MARK);
    if let Err(e) = std::fs::create_dir_all(out)
        .and_then(|_| std::fs::write(&path, serde_json::to_string_pretty(&merged).expect("json")))
    {
        return crate::fail::harness_failed(format!("cannot write {}: {e}", path.display()));
    }
    let code = finish(&merged, Print { json, quiet }, true);
    if !json {
        outln!("report: {}", path.display());
    }
    code
}
