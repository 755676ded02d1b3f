//! `fenceproof list`: the experiments, one line each (`--markdown`: the table the docs show).

use fenceproof_harness::report::exit;

/// List the experiments.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print the experiment table as Markdown, as docs/experiments.md shows it.
    #[arg(long)]
    markdown: bool,
}

pub fn run(a: Args) -> u8 {
    if a.markdown {
        print!("{}", crate::cmd::docs::experiments_markdown());
        return exit::OK;
    }
    let all = fenceproof_scenarios::all();
    let width = all.iter().map(|e| e.id.len()).max().unwrap_or(0);
    for e in all {
        println!("{:<width$}  {}", e.id, e.title);
    }
    exit::OK
}
