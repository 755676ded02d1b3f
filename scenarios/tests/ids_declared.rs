//! No experiment is named by its id outside its own file: the runner, the external-database
//! mode, the mutant runs, the catalogue and the command line read what experiments declare. An id
//! written elsewhere as a string (`e.id == "N-restore"`, `starts_with("H-")`) is a switch that
//! fails silently when the experiment changes, so this test fails on it.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The string literals of `text` (plain `"..."`; escapes kept as written).
fn literals(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                // A line comment: prose may name experiments.
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '\'' => {
                // A char literal or a lifetime: skip an escaped or plain char literal.
                let rest: String = chars.clone().take(3).collect();
                if rest.starts_with('\\') {
                    chars.nth(2);
                } else if rest.chars().nth(1) == Some('\'') {
                    chars.nth(1);
                }
            }
            '"' => {
                let mut lit = String::new();
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => {
                            lit.push(c);
                            if let Some(n) = chars.next() {
                                lit.push(n);
                            }
                        }
                        '"' => break,
                        _ => lit.push(c),
                    }
                }
                out.push(lit);
            }
            _ => {}
        }
    }
    out
}

/// The literals of `text` that name an experiment: an id with a variant suffix, or a family
/// prefix such as `H-` or `P-api` used to pick rows.
fn named_ids(text: &str, ids: &[&str]) -> Vec<String> {
    literals(text)
        .into_iter()
        .filter(|l| {
            ids.iter().any(|id| {
                (id.contains('-') && l == id)
                    || (l.len() >= 2 && l.len() < id.len() && id.starts_with(l.as_str()) && l.contains('-'))
            })
        })
        .collect()
}

#[test]
fn the_finder_sees_ids_and_family_prefixes_but_not_prose() {
    let ids = ["H-lease", "P-api-clock", "A"];
    let code = r#"if e.id == "H-lease" || e.id.starts_with("P-api") { x("A") } // "H-lease" in prose"#;
    assert_eq!(named_ids(code, &ids), vec!["H-lease".to_string(), "P-api".to_string()]);
    assert!(named_ids(r#"let c = '"'; let s = "H-leases";"#, &ids).is_empty());
}

#[test]
fn no_experiment_id_is_written_outside_its_own_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let all = fenceproof_scenarios::all();
    let ids: Vec<&str> = all.iter().map(|e| e.id).collect();
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&root).unwrap().flatten() {
        sources(&entry.path().join("src"), &mut files);
    }
    assert!(files.len() > 50, "found only {} source files under {}", files.len(), root.display());
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        // An experiment's own file declares its ids (`id: "B-sigstop"`) and may use them.
        let own: Vec<&str> = ids.iter().copied().filter(|id| text.contains(&format!("id: \"{id}\""))).collect();
        for lit in named_ids(&text, &ids) {
            let of_own = own.iter().any(|id| *id == lit || id.starts_with(&lit));
            if !of_own {
                found.push(format!("{}: \"{lit}\"", f.strip_prefix(&root).unwrap_or(f).display()));
            }
        }
    }
    assert!(found.is_empty(), "experiment ids written outside their own files:\n{}", found.join("\n"));
}
