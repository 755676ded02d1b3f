//! Every published verdict proven from the library's own source: each page
//! (`docs/audit/<library>.md`) holds a table, between `<!-- citations -->` and
//! `<!-- /citations -->`, whose rows name cells, their verdict and the file and function of the
//! library at the audited version that decides it (`` `path` `Function` ``, several joined by
//! `; `). The tests check that every published cell has its row, with the verdict published, and
//! that every cited file and function exists in the installed version of the library (the Python
//! queues in `.audit/venv`, the Rust crates in cargo's registry).

use std::path::{Path, PathBuf};

/// Where a library's source is installed, relative to its kind of installation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A Python package: paths are relative to the audit environment's site-packages.
    Python,
    /// Crates: paths start with the crate's folder (`name-version`) in cargo's registry, this one
    /// the audited crate (a library split in crates cites its other crates' folders too).
    Crate(&'static str),
}

/// The installation each audited library's citations are read from.
pub const SOURCES: &[(&str, Source)] = &[
    ("procrastinate", Source::Python),
    ("pgqueuer", Source::Python),
    ("chancy", Source::Python),
    ("dbos", Source::Python),
    ("absurd", Source::Python),
    ("saq", Source::Python),
    ("saq_sweeper", Source::Python),
    ("django_q2", Source::Python),
    ("django_tasks", Source::Python),
    ("dramatiq_pg", Source::Python),
    ("huey", Source::Python),
    ("sqlxmq", Source::Crate("sqlxmq-0.6.0")),
    ("underway", Source::Crate("underway-0.2.0")),
    ("apalis", Source::Crate("apalis-postgres-1.0.0")),
    ("graphile_worker", Source::Crate("graphile_worker-0.14.1")),
    ("pgmq", Source::Crate("pgmq-0.33.7")),
    ("fang", Source::Crate("fang-0.11.0")),
    ("rexecutor", Source::Crate("rexecutor-sqlx-0.1.1")),
    ("background_jobs", Source::Crate("background-jobs-postgres-0.20.0")),
    ("backie", Source::Crate("backie-0.9.0")),
    ("hammerwork", Source::Crate("hammerwork-3.0.0")),
];

/// One row of a page's citation table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Citation {
    /// The experiments (cells) the row covers.
    pub cells: Vec<String>,
    /// Their published verdict.
    pub verdict: String,
    /// (file, function) pairs deciding it.
    pub decided_by: Vec<(String, String)>,
}

/// The citation rows of `page` (empty when it has no citation table).
pub fn parse(page: &str) -> Vec<Citation> {
    let Some(start) = page.find("<!-- citations -->") else { return Vec::new() };
    let Some(len) = page[start..].find("<!-- /citations -->") else { return Vec::new() };
    let rows = page[start..start + len].lines().filter(|l| l.starts_with('|') && !l.starts_with("|---"));
    rows.skip(1).filter_map(row).collect()
}

/// The backquoted spans of `text`.
fn quoted(text: &str) -> Vec<String> {
    text.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

fn row(line: &str) -> Option<Citation> {
    let cols: Vec<&str> = line.trim().trim_matches('|').split('|').map(str::trim).collect();
    let [cells, verdict, by, ..] = cols.as_slice() else { return None };
    let decided_by = by.split("; ").filter_map(|pair| match quoted(pair).as_slice() {
        [file, function, ..] => Some((file.clone(), function.clone())),
        _ => None,
    });
    Some(Citation { cells: quoted(cells), verdict: verdict.to_string(), decided_by: decided_by.collect() })
}

/// What is wrong with `page`'s citations against the published cells of `library` (experiment,
/// verdict), one line each: a cell without a row, a row whose verdict is not the published one,
/// a row citing nothing.
pub fn coverage(library: &str, page: &str, cells: &[(String, String)]) -> Vec<String> {
    let rows = parse(page);
    let mut found = Vec::new();
    for (exp, verdict) in cells {
        match rows.iter().find(|r| r.cells.contains(exp)) {
            None => found.push(format!("{library}: `{exp}` ({verdict}) has no citation row")),
            Some(r) if r.verdict != *verdict => {
                found.push(format!("{library}: `{exp}` is published {verdict}, its citation row says {}", r.verdict))
            }
            Some(r) if r.decided_by.is_empty() => found.push(format!("{library}: `{exp}`'s row cites no file")),
            Some(_) => {}
        }
    }
    found
}

/// The folder the paths of `source` are relative to, when it is installed: the audit environment's
/// site-packages under `root`, or the crate's folder in cargo's registry under `cargo_home`.
pub fn installed(source: Source, root: &Path, cargo_home: &Path) -> Option<PathBuf> {
    match source {
        Source::Python => {
            let lib = root.join(".audit/venv/lib");
            let py = std::fs::read_dir(&lib)
                .ok()?
                .flatten()
                .find(|e| e.file_name().to_string_lossy().starts_with("python"))?;
            Some(py.path().join("site-packages")).filter(|p| p.is_dir())
        }
        Source::Crate(dir) => std::fs::read_dir(cargo_home.join("registry/src"))
            .ok()?
            .flatten()
            .map(|index| index.path())
            .find(|p| p.join(dir).is_dir()),
    }
}

/// Whether `file` defines `function`: a Python `def`/`class`, a Rust `fn`/`struct`/`enum`/`trait`,
/// an SQL `FUNCTION`, or a named query (a line `-- name --`), matched on its last dotted part (a
/// method `Class.method` also needs its class; a schema-qualified SQL name matches whole). A `*`
/// function cites the whole file (a query file).
pub fn defines(text: &str, function: &str) -> bool {
    if function == "*" {
        return true;
    }
    if function.contains('.') && defined(text, function) {
        // A schema-qualified SQL function (`pgmq.delete`) is defined under its whole name.
        return true;
    }
    let mut parts = function.split('.').rev();
    let name = parts.next().unwrap_or(function);
    parts.next().is_none_or(|owner| defines(text, owner)) && defined(text, name)
}

/// Whether `text` has a definition of `name` (no dots).
fn defined(text: &str, name: &str) -> bool {
    let n = name.to_lowercase();
    let kinds = ["def ", "class ", "fn ", "struct ", "enum ", "trait ", "function ", "table ", "mod ", "impl "];
    text.lines().map(|l| l.trim_start().to_lowercase()).any(|line| {
        // A named query of an SQL file is a line `-- name --`.
        (line.starts_with("-- ") && line[3..].split_whitespace().next() == Some(n.as_str()))
            || kinds.iter().any(|k| {
                line.match_indices(&format!("{k}{n}")).any(|(i, _)| {
                    let before = line[..i].chars().last();
                    let after = line[i + k.len() + n.len()..].chars().next();
                    !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                        && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
                })
            })
    })
}

/// What of `citations` is missing from the installed source under `base`, one line each.
pub fn missing(library: &str, base: &Path, citations: &[Citation]) -> Vec<String> {
    let mut found = Vec::new();
    for (file, function) in citations.iter().flat_map(|c| &c.decided_by) {
        match std::fs::read_to_string(base.join(file)) {
            Err(_) => found.push(format!("{library}: `{file}` is not in {}", base.display())),
            Ok(text) if !defines(&text, function) => {
                found.push(format!("{library}: `{file}` defines no `{function}` ({})", base.display()))
            }
            Ok(_) => {}
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    fn published() -> serde_json::Value {
        let text = std::fs::read_to_string(repo().join("docs/audit/results.json")).expect("docs/audit/results.json");
        serde_json::from_str(&text).expect("results.json is JSON")
    }

    fn cells(summary: &serde_json::Value, library: &str) -> Vec<(String, String)> {
        let all = summary.as_array().into_iter().flatten().filter(|c| c["library"] == library);
        all.map(|c| (c["experiment"].as_str().unwrap_or("").into(), c["verdict"].as_str().unwrap_or("").into()))
            .collect()
    }

    fn page(library: &str) -> String {
        std::fs::read_to_string(repo().join(format!("docs/audit/{library}.md"))).unwrap_or_default()
    }

    #[test]
    fn every_published_verdict_has_its_citation_row() {
        let summary = published();
        let libs = crate::pages::libraries(&summary);
        let mut found = Vec::new();
        for (lib, _) in &libs {
            assert!(SOURCES.iter().any(|(n, _)| n == lib), "{lib} has no source installation in SOURCES");
            found.extend(coverage(lib, &page(lib), &cells(&summary, lib)));
        }
        assert!(found.is_empty(), "citations missing or disagreeing with results.json:\n{}", found.join("\n"));
    }

    #[test]
    fn every_cited_file_and_function_exists_in_the_installed_version() {
        let home = std::env::var_os("CARGO_HOME").map(PathBuf::from);
        let home = home.or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo"))).unwrap_or_default();
        let (mut checked, mut absent, mut found) = (0, Vec::new(), Vec::new());
        for (lib, source) in SOURCES {
            let Some(base) = installed(*source, &repo(), &home) else {
                absent.push(format!("{lib} ({source:?})"));
                continue;
            };
            let rows = parse(&page(lib));
            checked += rows.iter().map(|r| r.decided_by.len()).sum::<usize>();
            found.extend(missing(lib, &base, &rows));
        }
        if !absent.is_empty() {
            // Only an absent installation is skipped: `bash scripts/setup.sh` installs the Python
            // queues; `cargo fetch --manifest-path audit/adapters/rust/Cargo.toml` the crates.
            eprintln!("SKIPPED the citations of {} (source not installed here)", absent.join(", "));
        }
        assert!(found.is_empty(), "cited but not in the installed source:\n{}", found.join("\n"));
        eprintln!("{checked} citation(s) checked against the installed source");
    }

    #[test]
    fn a_row_parses_and_a_missing_or_wrong_citation_is_named() {
        let page = "<!-- citations -->\n| cells | verdict | decided by |\n|---|---|---|\n\
                    | `a`, `b` | FAIL | `q/x.py` `Queue.finish`; `q/s.sql` `q_done` |\n<!-- /citations -->\n";
        let rows = parse(page);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].cells, ["a", "b"]);
        assert_eq!(rows[0].decided_by[1], ("q/s.sql".to_string(), "q_done".to_string()));
        let cells = [("a".to_string(), "FAIL".to_string()), ("b".into(), "PASS".into()), ("c".into(), "N/A".into())];
        let found = coverage("q", page, &cells);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("`b` is published PASS") && found[1].contains("`c` (N/A) has no citation row"));
        let py = "class Queue:\n    async def finish(self):\n        pass\n";
        assert!(defines(py, "Queue.finish") && !defines(py, "Queue.finished") && !defines(py, "Job.finish"));
        assert!(
            defines("CREATE FUNCTION pgmq.delete(q text)", "pgmq.delete") && !defines("pgmq.delete(1)", "pgmq.delete")
        );
        assert!(defines("CREATE FUNCTION q_done(id int)", "q_done") && defines("-- q_poll --\nselect", "q_poll"));
        assert!(defines("pub async fn run(&self)", "run") && !defines("// run later", "run"));
        assert!(
            !defines("-- runs later", "run") && !defines("-- run_all --", "run") && !defines("x = undef run", "run")
        );
    }
}
