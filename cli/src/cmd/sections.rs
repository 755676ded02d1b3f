//! The specification's sections that the code and its output cite (`§05.2` in a comment or a
//! message of the Rust or SQL sources, `section: "11 E; 08, 09"` on a row, `section: "05.2"` on a rule), each checked against
//! the headings of docs/protocol.md, which says in this project's words what every cited section
//! is. `fenceproof docs` and `docs --check` fail on a section that no heading of the page names.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The page whose headings define the sections, under the docs' root.
pub const PAGE: &str = "docs/protocol.md";

/// One citation that no heading of docs/protocol.md defines.
#[derive(Debug, PartialEq, Eq, serde::Serialize)]
pub struct Undefined {
    /// Where it is cited: `file:line`, or the row or rule that declares it.
    pub at: String,
    /// The section as cited: `§` and its number as written.
    pub section: String,
}

/// The sections the headings of `page` define: every `§NN` or `§NN.N` on a line that starts
/// with `#`.
pub fn defined(page: &str) -> BTreeSet<String> {
    page.lines().filter(|l| l.starts_with('#')).flat_map(cited).collect()
}

/// The sections `text` cites: `§` followed by digits and dotted parts, as written (a number
/// without its leading zero is not the page's, which spells two digits, so it is reported). A `§`
/// without a digit after it (`spec §`, `§{}` in a format string) cites nothing.
pub fn cited(text: &str) -> Vec<String> {
    text.match_indices('§')
        .filter_map(|(i, s)| {
            let rest = &text[i + s.len()..];
            let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
            let number = rest[..end].trim_end_matches('.');
            number.starts_with(|c: char| c.is_ascii_digit()).then(|| format!("§{number}"))
        })
        .collect()
}

/// The sections a declaration's `section` field names (`11 E; 08, 09`, `05-09`, `05.2, 07`): the
/// number that starts each part, the parts split at `;`, `,` and a range's dash.
pub fn declared(field: &str) -> Vec<String> {
    field
        .split([';', ',', '-', '–'])
        .filter_map(|part| {
            let part = part.trim();
            let end = part.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(part.len());
            (end > 0).then(|| format!("§{}", &part[..end]))
        })
        .collect()
}

/// The citations of `text` (a file shown as `name`) that `defined` lacks, each with its line.
pub fn undefined_in(name: &str, text: &str, defined: &BTreeSet<String>) -> Vec<Undefined> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for section in cited(line).into_iter().filter(|s| !defined.contains(s)) {
            out.push(Undefined { at: format!("{name}:{}", n + 1), section });
        }
    }
    out
}

/// The sections the rows and the rules declare (and print) that `defined` lacks.
pub fn undefined_declared(defined: &BTreeSet<String>) -> Vec<Undefined> {
    let rows = fenceproof_scenarios::all().into_iter().map(|e| (format!("row {}", e.id), e.section));
    let rules = fenceproof_scenarios::catalogue::RULES.iter().map(|r| (format!("rule {}", r.id), r.section));
    let mut out = Vec::new();
    for (at, field) in rows.chain(rules) {
        for section in declared(field).into_iter().filter(|s| !defined.contains(s)) {
            out.push(Undefined { at: at.clone(), section });
        }
    }
    out
}

/// Every section cited under `root` (its Rust and SQL sources) or declared by a row or a rule that
/// `root`'s docs/protocol.md does not define; an error when the page cannot be read.
pub fn undefined(root: &Path) -> Result<Vec<Undefined>, String> {
    let page = std::fs::read_to_string(root.join(PAGE)).map_err(|e| format!("cannot read {PAGE}: {e}"))?;
    let defined = defined(&page);
    let mut files = Vec::new();
    sources(root, &mut files).map_err(|e| format!("cannot read the sources under {}: {e}", root.display()))?;
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let shown = f.strip_prefix(root).unwrap_or(&f).display().to_string();
        let text = std::fs::read_to_string(&f).map_err(|e| format!("cannot read {shown}: {e}"))?;
        out.extend(undefined_in(&shown, &text, &defined));
    }
    out.extend(undefined_declared(&defined));
    Ok(out)
}

/// The `.rs` and `.sql` files under `dir`, leaving out build output (`target`), run folders (`reports`) and
/// hidden folders (`.git`).
fn sources(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if path.is_dir() {
            if !(name == "target" || name == "reports" || name.starts_with('.')) {
                sources(&path, out)?;
            }
        } else if name.ends_with(".rs") || name.ends_with(".sql") {
            out.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `§` spelled so that this file cites nothing itself.
    const S: char = '\u{a7}';

    #[test]
    fn headings_define_sections_and_prose_does_not() {
        let page =
            format!("# P\n\n## Leases ({S}05)\n\n### Renew ({S}05.2)\n\n## Outbox ({S}08, {S}09)\n\nsee {S}10\n");
        let want: BTreeSet<String> = ["05", "05.2", "08", "09"].iter().map(|n| format!("{S}{n}")).collect();
        assert_eq!(defined(&page), want);
    }

    #[test]
    fn citations_are_read_as_written() {
        let text = format!("spec {S}01–{S}13, {S}9.2 and {S}09.3. Not {S}{{}} nor spec {S}.");
        let want: Vec<String> = ["01", "13", "9.2", "09.3"].iter().map(|n| format!("{S}{n}")).collect();
        assert_eq!(cited(&text), want);
        let fields: Vec<String> =
            ["11", "08", "09", "05", "09", "07", "11"].iter().map(|n| format!("{S}{n}")).collect();
        let parsed: Vec<String> = ["11 E; 08, 09", "05-09", "07; 11 H"].iter().flat_map(|f| declared(f)).collect();
        assert_eq!(parsed, fields);
    }

    #[test]
    fn an_undefined_section_is_named_with_its_line() {
        let defined = defined(&format!("## Leases ({S}05)\n### Renew ({S}05.2)\n"));
        let code = format!("// {S}05 and {S}05.2 are defined\n/// but {S}5.2 and {S}06 are not\n");
        assert_eq!(
            undefined_in("x.rs", &code, &defined),
            vec![
                Undefined { at: "x.rs:2".into(), section: format!("{S}5.2") },
                Undefined { at: "x.rs:2".into(), section: format!("{S}06") },
            ]
        );
        assert!(undefined_in("x.rs", &format!("{S}05.2 {S}05"), &defined).is_empty());
    }

    #[test]
    fn every_declared_section_is_a_heading_of_the_page() {
        let page = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(PAGE)).unwrap();
        let missing = undefined_declared(&defined(&page));
        assert!(missing.is_empty(), "rows or rules declare sections {PAGE} does not define: {missing:?}");
        assert!(!undefined_declared(&BTreeSet::new()).is_empty(), "the rows and rules declare sections");
    }
}
