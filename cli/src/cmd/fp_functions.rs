//! The fenced `fp_*` functions as the migration has them (`migrations/0002_worker_role.sql`): one
//! table row per function with its arguments in order, what it returns, the outcome words it
//! answers and the SQLSTATEs it raises, and what its comment in the migration says. Generated into
//! docs/worker-protocol.md (`fp-functions`), so the contract cannot drift from the SQL.

use fenceproof_harness::db::databases::MIGRATIONS;

/// One function as read from the migration's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FpFunction {
    pub name: String,
    /// `p_run uuid, p_owner text, ...`, in call order.
    pub arguments: Vec<String>,
    /// `TABLE (epoch bigint, expires_at timestamptz)` or `bigint`.
    pub returns: String,
    /// The words the function answers in its `outcome` column, in first-seen order.
    pub outcomes: Vec<String>,
    /// The SQLSTATEs it raises itself.
    pub raises: Vec<String>,
    /// The first paragraph of the comment above it.
    pub comment: String,
}

/// The worker-role migration's text.
fn migration() -> &'static str {
    MIGRATIONS.iter().find(|(n, _)| *n == "0002_worker_role").map(|(_, s)| *s).unwrap_or_default()
}

/// Every `CREATE FUNCTION fp_*` of `sql`, in file order.
pub fn functions(sql: &str) -> Vec<FpFunction> {
    let lines: Vec<&str> = sql.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let Some(rest) = l.strip_prefix("CREATE FUNCTION fp_") else { continue };
        let name = format!("fp_{}", rest.split('(').next().unwrap_or_default().trim());
        let end = (i..lines.len()).find(|&j| lines[j].trim() == "$$;").unwrap_or(lines.len());
        let text = lines[i..end].join("\n");
        out.push(FpFunction {
            name,
            arguments: arguments(&text),
            returns: returns(&text),
            outcomes: quoted_after(&text, "RETURN QUERY SELECT '", "'::text"),
            raises: quoted_after(&text, "ERRCODE = '", "'"),
            comment: comment_above(&lines, i),
        });
    }
    out
}

/// The parameter list between the name's parenthesis and its match.
fn arguments(text: &str) -> Vec<String> {
    let Some(open) = text.find('(') else { return vec![] };
    let mut depth = 0;
    let mut close = text.len();
    for (k, c) in text[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    close = open + k;
                    break;
                }
            }
            _ => {}
        }
    }
    let flat = text[open + 1..close].split_whitespace().collect::<Vec<_>>().join(" ");
    flat.split(", ").map(|a| a.trim().to_string()).filter(|a| !a.is_empty()).collect()
}

/// What follows `RETURNS`, up to `LANGUAGE`, on one line.
fn returns(text: &str) -> String {
    let after = text.split_once("RETURNS ").map(|(_, r)| r).unwrap_or_default();
    let upto = after.split_once("LANGUAGE").map(|(r, _)| r).unwrap_or(after);
    upto.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Each distinct `X` of `<open>X<close>` in `text`, in order.
fn quoted_after(text: &str, open: &str, close: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (at, _) in text.match_indices(open) {
        let rest = &text[at + open.len()..];
        if let Some((word, _)) = rest.split_once(close) {
            if !out.iter().any(|w| w == word) {
                out.push(word.to_string());
            }
        }
    }
    out
}

/// The comment lines right above line `i`, up to the first bare `--` (later paragraphs are notes
/// on how the function is built, not on what it does), joined.
fn comment_above(lines: &[&str], i: usize) -> String {
    let mut start = i;
    while start > 0 && lines[start - 1].starts_with("--") {
        start -= 1;
    }
    let mut words = Vec::new();
    for l in &lines[start..i] {
        if l.trim() == "--" {
            break;
        }
        words.push(l.trim_start_matches("--").trim());
    }
    words.join(" ")
}

/// The Markdown table of the shipped functions.
pub fn markdown() -> String {
    let mut s = String::from(
        "| function | arguments, in call order | returns | outcomes (raises) | what it does and answers |\n|---|---|---|---|---|\n",
    );
    for f in functions(migration()) {
        let mut answers: Vec<String> = f.outcomes.iter().map(|o| format!("`{o}`")).collect();
        answers.extend(f.raises.iter().map(|r| format!("(SQLSTATE `{r}`)")));
        let answers = if answers.is_empty() { "-".to_string() } else { answers.join(", ") };
        s.push_str(&format!(
            "| `{}` | {} | `{}` | {answers} | {} |\n",
            f.name,
            f.arguments.iter().map(|a| format!("`{a}`")).collect::<Vec<_>>().join(", "),
            f.returns.replace('|', "\\|"),
            f.comment.replace('|', "\\|"),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_function_its_arguments_returns_and_outcome_words_from_the_migration() {
        let fs = functions(migration());
        assert_eq!(fs.len(), 10, "{fs:?}");
        let acquire = &fs[0];
        assert_eq!(acquire.name, "fp_lease_acquire");
        assert_eq!(acquire.arguments, vec!["p_run uuid", "p_owner text", "p_ttl_ms bigint"]);
        assert_eq!(acquire.returns, "TABLE (epoch bigint, expires_at timestamptz)");
        assert!(acquire.comment.contains("No row"), "{}", acquire.comment);
        let t = fs.iter().find(|f| f.name == "fp_run_transition").unwrap();
        assert_eq!(t.arguments.len(), 14);
        assert_eq!(t.arguments[4], "p_from text");
        for w in ["forbidden_transition", "lease_lost", "invalid_state", "conflict", "ok", "operation_not_settled"] {
            assert!(t.outcomes.iter().any(|o| o == w), "{w} missing from {:?}", t.outcomes);
        }
        assert_eq!(t.raises, vec!["FP001"]);
        let claim = fs.iter().find(|f| f.name == "fp_claim").unwrap();
        assert!(!claim.comment.contains("generic plan"), "the implementation notes stay out: {}", claim.comment);
        let release = fs.iter().find(|f| f.name == "fp_lease_release").unwrap();
        assert_eq!(release.returns, "bigint");
        assert!(release.comment.contains("Answers 1 when released"));
    }
}
