//! `fenceproof list`: the experiments, one line each (`--markdown`: the table the docs show;
//! `--json`: an array of `{id, title, section}`; `--quiet`: their count).

use fenceproof_harness::report::exit;

/// List the experiments.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print the experiment table as Markdown, as docs/experiments.md shows it.
    #[arg(long, conflicts_with = "json")]
    markdown: bool,
    #[command(flatten)]
    out: crate::cmd::output::Output,
}

pub fn run(a: Args) -> u8 {
    if a.markdown {
        out!("{}", crate::cmd::docs::experiments_markdown());
        return exit::OK;
    }
    let all = fenceproof_scenarios::all();
    if a.out.json {
        let rows: Vec<serde_json::Value> =
            all.iter().map(|e| serde_json::json!({"id": e.id, "title": e.title, "section": e.section})).collect();
        outln!("{}", serde_json::to_string_pretty(&rows).expect("json"));
        return exit::OK;
    }
    let width = all.iter().map(|e| e.id.len()).max().unwrap_or(0);
    if a.out.quiet {
        outln!("{} experiments", all.len());
        return exit::OK;
    }
    for e in all {
        outln!("{:<width$}  {}", e.id, e.title);
    }
    exit::OK
}
