//! The published audit pages (`docs/audit/<library>.md`) checked against the published results
//! (`docs/audit/results.json`): every audited library has a page, the page names the version the
//! cells ran on and at least one file of the library's own source, quotes the source of the
//! mechanism at that version (a paragraph opening with [`MECHANISM`], naming the version and a
//! file), and its table of cells is the generated block that `fenceproof docs` writes from the
//! results.

use std::path::Path;

use crate::report::summary_library_markdown;

/// The control row of the results: the harness's own protocol, described in `docs/audit.md`.
pub const CONTROL: &str = "reference";

/// The audited libraries of a summary, in its order, each with the version its cells name (the
/// first word of `version`: "1.11.1 (ORM broker, …)" is version 1.11.1). The control is left out.
pub fn libraries(summary: &serde_json::Value) -> Vec<(String, String)> {
    let mut libs: Vec<(String, String)> = Vec::new();
    for c in summary.as_array().into_iter().flatten() {
        let name = c["library"].as_str().unwrap_or("").to_string();
        let version = c["version"].as_str().unwrap_or("").split_whitespace().next().unwrap_or("").to_string();
        if name != CONTROL && !libs.iter().any(|(n, _)| *n == name) {
            libs.push((name, version));
        }
    }
    libs
}

/// The source file paths a page quotes: backquoted spans with a folder and a `.py`, `.rs` or
/// `.sql` name, outside the audit's own adapters (`audit/…`) and docs.
pub fn source_paths(page: &str) -> Vec<&str> {
    page.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| !s.contains(char::is_whitespace) && s.contains('/'))
        .filter(|s| [".py", ".rs", ".sql"].iter().any(|x| s.ends_with(x)))
        .filter(|s| !s.starts_with("audit/") && !s.starts_with("docs/"))
        .collect()
}

/// How the paragraph that quotes a library's source for its mechanism opens.
pub const MECHANISM: &str = "**The mechanism in the source (";

/// The paragraph of `page` quoting the library's source for its mechanism, when it has one.
pub fn mechanism(page: &str) -> Option<&str> {
    let start = page.find(MECHANISM)?;
    let len = page[start..].find("\n\n").unwrap_or(page.len() - start);
    Some(&page[start..start + len])
}

/// The text of a page's generated block `name`, or `None` when the page has no such block.
fn block<'a>(page: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<!-- generated:{name} -->\n");
    let start = page.find(&open)? + open.len();
    let len = page[start..].find("<!-- /generated -->")?;
    Some(&page[start..start + len])
}

/// What is wrong with the pages under `dir` for `summary`, one line each; empty when nothing is.
pub fn problems(summary: &serde_json::Value, dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for (lib, version) in libraries(summary) {
        let file = format!("{lib}.md");
        let Ok(page) = std::fs::read_to_string(dir.join(&file)) else {
            found.push(format!("{file}: no page for {lib}, which the results audit"));
            continue;
        };
        if version.is_empty() || !page.contains(&version) {
            found.push(format!("{file}: does not name the audited version {version:?}"));
        }
        if source_paths(&page).is_empty() {
            found.push(format!("{file}: names no file of the library's source"));
        }
        match mechanism(&page) {
            Some(p) if p.contains(&version) && !source_paths(p).is_empty() => {}
            _ => found.push(format!(
                "{file}: quotes no source of its mechanism at {version} (a paragraph opening {MECHANISM:?} naming the version and a file)"
            )),
        }
        if block(&page, &format!("audit-settings-{lib}")).is_none() {
            found.push(format!("{file}: has no generated:audit-settings-{lib} block (its settings and warnings)"));
        }
        let name = format!("audit-{lib}");
        match block(&page, &name) {
            None => found.push(format!("{file}: has no generated:{name} block of its cells")),
            Some(t) if t != summary_library_markdown(summary, &lib) => {
                found.push(format!("{file}: generated:{name} differs from results.json; run `fenceproof docs`"))
            }
            Some(_) => {}
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn published() -> (serde_json::Value, std::path::PathBuf) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/audit");
        let text = std::fs::read_to_string(dir.join("results.json")).expect("docs/audit/results.json");
        (serde_json::from_str(&text).expect("results.json is JSON"), dir)
    }

    #[test]
    fn every_audited_library_has_a_page_naming_its_version_and_its_source() {
        let (summary, dir) = published();
        assert!(libraries(&summary).len() >= 13, "the results audit the libraries: {:?}", libraries(&summary));
        let found = problems(&summary, &dir);
        assert!(found.is_empty(), "the audit pages disagree with results.json:\n{}", found.join("\n"));
    }

    #[test]
    fn a_missing_page_version_source_or_table_is_named() {
        let dir = std::env::temp_dir().join(format!("fenceproof-audit-pages-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let summary = json!([
            {"library": "reference", "version": "protocol", "experiment": "e", "verdict": "PASS"},
            {"library": "q", "version": "1.2.3 (broker)", "experiment": "e", "verdict": "FAIL"},
            {"library": "r", "version": "4.5", "experiment": "e", "verdict": "PASS"}
        ]);
        let table = summary_library_markdown(&summary, "q");
        let good = format!(
            "# q 1.2.3\n`q/worker.py`\n\n{MECHANISM}q 1.2.3).** `q/worker.py` Worker.run: `x`\n\n<!-- generated:audit-settings-q -->\n<!-- /generated -->\n<!-- generated:audit-q -->\n{table}<!-- /generated -->\n"
        );
        std::fs::write(dir.join("q.md"), &good).unwrap();
        assert_eq!(problems(&summary, &dir), ["r.md: no page for r, which the results audit"]);
        std::fs::write(dir.join("r.md"), "# r 4.6\n`audit/adapters/lib_r.py`\n").unwrap();
        let found = problems(&summary, &dir);
        assert_eq!(found.len(), 5, "{found:?}");
        assert!(found[0].contains("\"4.5\"") && found[1].contains("no file") && found[4].contains("audit-r"));
        assert!(found[3].contains("audit-settings-r"), "{found:?}");
        assert!(found[2].contains("quotes no source of its mechanism at 4.5"), "{found:?}");
        let unpinned = format!("# r 4.5\n`r/a.py`\n\n{MECHANISM}r 4.4).** `r/a.py` f: `x`\n");
        std::fs::write(dir.join("r.md"), unpinned).unwrap();
        assert!(
            problems(&summary, &dir).iter().any(|p| p.contains("r.md: quotes no source")),
            "a quote of another version"
        );
        std::fs::write(dir.join("q.md"), good.replace("| FAIL |", "| PASS |")).unwrap();
        assert!(problems(&summary, &dir)[0].starts_with("q.md: generated:audit-q differs"));
    }

    #[test]
    fn source_paths_are_backquoted_library_files() {
        let page = "`procrastinate/sql/schema.sql` and `Worker._shutdown`, `audit/adapters/lib_x.py`, `a b/c.py`";
        assert_eq!(source_paths(page), ["procrastinate/sql/schema.sql"]);
    }
}
