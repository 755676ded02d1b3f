//! `fenceproof list`: the experiments, one line each (`--markdown`: the table the docs show;
//! `--json`: an array of `{id, title, section}`).

use fenceproof_harness::report::exit;

/// List the experiments.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print the experiment table as Markdown, as docs/experiments.md shows it.
    #[arg(long, conflicts_with = "json")]
    markdown: bool,
    /// Print the experiments as one JSON array of {"id", "title", "section"} on stdout.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> u8 {
    if a.markdown {
        out!("{}", crate::cmd::docs::experiments_markdown());
        return exit::OK;
    }
    let all = fenceproof_scenarios::all();
    if a.json {
        let rows: Vec<serde_json::Value> =
            all.iter().map(|e| serde_json::json!({"id": e.id, "title": e.title, "section": e.section})).collect();
        outln!("{}", serde_json::to_string_pretty(&rows).expect("json"));
        return exit::OK;
    }
    let width = all.iter().map(|e| e.id.len()).max().unwrap_or(0);
    for e in all {
        outln!("{:<width$}  {}", e.id, e.title);
    }
    exit::OK
}
