//! `fenceproof mutants-sql-merge DIR...`: join the kill matrices of shard run folders (each holding a
//! `mutants-sql.json`) into one, written to a new folder under `--out`.

use std::path::{Path, PathBuf};

use fenceproof_harness::report::exit;
use fenceproof_mutants::sql::{self, SqlKillMatrix};

fn read(dir: &Path) -> Result<SqlKillMatrix, String> {
    let f = dir.join("mutants-sql.json");
    let text = std::fs::read_to_string(&f).map_err(|e| format!("cannot read {}: {e}", f.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not a kill matrix: {e}", f.display()))
}

/// Join the run folders of `mutants-sql --shard K/N` runs into one kill matrix (refusing a
/// mutant judged in two shards).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Run folders, each holding a mutants-sql.json.
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// Where the merged mutants-sql.json / .md go.
    #[arg(long, default_value = "reports/merged")]
    out: PathBuf,
    /// Print the merged matrix as one JSON document on stdout: the merged mutants-sql.json's
    /// fields plus "report", the --out folder.
    #[arg(long)]
    json: bool,
    /// Print only what failed and the closing line, and no progress on stderr (for CI logs).
    #[arg(long, conflicts_with = "json")]
    quiet: bool,
}

pub fn run(a: Args) -> u8 {
    let (dirs, out) = (&a.dirs, a.out.as_path());
    let print = crate::cmd::Print::new(a.json, a.quiet);
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
