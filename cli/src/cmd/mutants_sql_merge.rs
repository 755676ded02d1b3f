//! `fenceproof merge DIR...` of `mutants sql --shard K/N` run folders (each holding a
//! `mutants-sql.json`): their kill matrices joined into one (refusing a mutant judged in two
//! shards), written to `--out`.

use std::path::{Path, PathBuf};

use fenceproof_harness::report::exit;
use fenceproof_mutants::sql::{self, SqlKillMatrix};

fn read(dir: &Path) -> Result<SqlKillMatrix, String> {
    let f = dir.join("mutants-sql.json");
    let text = std::fs::read_to_string(&f).map_err(|e| format!("cannot read {}: {e}", f.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not a kill matrix: {e}", f.display()))
}

/// The file that marks a folder as one of these runs.
pub const MARK: &str = "mutants-sql.json";

/// Where the merged matrix goes when `--out` is not given.
pub const DEFAULT_OUT: &str = "reports/merged";

pub fn run(dirs: &[PathBuf], out: &Path, print: crate::cmd::Print) -> u8 {
    let parts: Result<Vec<SqlKillMatrix>, String> = dirs.iter().map(|d| read(d)).collect();
    let merged = match parts.and_then(SqlKillMatrix::merge) {
        Ok(m) => m,
        Err(msg) => {
            eprintln!("fenceproof: {msg}");
            return exit::USAGE;
        }
    };
    if let Err(e) = std::fs::create_dir_all(out)
        .and_then(|_| sql::save(&merged, out).map_err(|e| std::io::Error::other(e.to_string())))
    {
        eprintln!("fenceproof: cannot write the merged matrix to {}: {e}", out.display());
        return exit::HARNESS;
    }
    let missing = merged.generated.saturating_sub(merged.rows.len());
    if print.json {
        outln!("{}", serde_json::to_string_pretty(&crate::cmd::with_report(&merged, out)).expect("json"));
        if missing > 0 {
            eprintln!("fenceproof: {missing} generated mutants are in none of the merged shards");
        }
    } else {
        out!("{}", print.text(&merged.table()));
        if missing > 0 {
            outln!("{missing} generated mutants are in none of the merged shards: FAIL");
        }
        outln!("report: {}", out.display());
    }
    if merged.ok() && missing == 0 {
        exit::OK
    } else {
        exit::FAILED
    }
}
