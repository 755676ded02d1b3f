//! `fenceproof mutants --sql [--shard K/N] [--list]`: the generated SQL mutant kill matrix.

use fenceproof_harness::report::exit;
use fenceproof_mutants::sql::{self, Selection};
use fenceproof_scenarios::runner::VerifyOptions;
use fenceproof_scenarios::Experiment;

/// List the generated mutants (id, line, change) without running anything.
pub fn list(sel: &Selection) -> u8 {
    match sql::pick(sel) {
        Ok(ms) => {
            let w = ms.iter().map(|m| m.id.len()).max().unwrap_or(0);
            for m in &ms {
                println!("{:<w$}  L{:<4} {}  =>  {}", m.id, m.line, m.before, m.after);
            }
            println!("{} mutants", ms.len());
            exit::OK
        }
        Err(msg) => {
            eprintln!("fenceproof: {msg}");
            exit::USAGE
        }
    }
}

/// Run the selection; exit 0 when every non-equivalent mutant is killed by a FAIL.
pub async fn run(opts: VerifyOptions, experiments: Vec<Experiment>, sel: Selection) -> u8 {
    if let Err(msg) = sql::pick(&sel) {
        eprintln!("fenceproof: {msg}");
        return exit::USAGE;
    }
    crate::interruptible(async {
        match sql::run(&opts, experiments, &sel).await {
            Ok((km, dir)) => {
                print!("{}", km.table());
                println!("report: {}", dir.display());
                if km.ok() {
                    exit::OK
                } else {
                    exit::FAILED
                }
            }
            Err(e) => crate::harness_failed(e),
        }
    })
    .await
}
