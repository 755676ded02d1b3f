//! Finding the fenced functions in a migration's text: each `CREATE FUNCTION fp_*` block, its header
//! and its PL/pgSQL body, with the line numbers they have in the file.

/// The search_path migration 0002 creates its functions with, for this transaction only.
pub const SEARCH_PATH_FOR_CREATE: &str =
    "SELECT set_config('search_path', format('%I, pg_temp', current_schema()), true);\n";

/// One `CREATE FUNCTION fp_*(...) ... AS $$ body $$;` block of a migration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// The function's name (`fp_lease_renew`).
    pub name: String,
    /// Everything from `CREATE FUNCTION` up to and including the opening `$$`.
    pub header: String,
    /// The body between the dollar quotes.
    pub body: String,
    /// The 1-based line of the file on which the body starts (the line after the opening `$$`).
    pub body_line: usize,
}

impl Function {
    /// The statements that replace the installed function by one with `body`. A header that keeps
    /// the creating session's search_path (`FROM CURRENT`) gets the one the migration gives it (the
    /// schema, then pg_temp last), set for this transaction only: a mutant differs in its body, not
    /// in what the privilege audit sees.
    pub fn replacement(&self, body: &str) -> String {
        let header = self.header.replacen("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1);
        let path = if header.contains("search_path FROM CURRENT") { SEARCH_PATH_FOR_CREATE } else { "" };
        format!("{path}{header}\n{body}$$;\n")
    }

    /// The file line of byte offset `at` of the body.
    pub fn line_of(&self, at: usize) -> usize {
        self.body_line + self.body[..at.min(self.body.len())].matches('\n').count()
    }

    /// The whole body line that holds byte offset `at` (trimmed).
    pub fn line_text(&self, body: &str, at: usize) -> String {
        let at = at.min(body.len());
        let start = body[..at].rfind('\n').map(|i| i + 1).unwrap_or(0);
        let end = body[at..].find('\n').map(|i| at + i).unwrap_or(body.len());
        body[start..end].trim().to_string()
    }
}

/// Every `fp_*` function defined in `sql`, in file order.
pub fn functions(sql: &str) -> Vec<Function> {
    let lines: Vec<&str> = sql.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        let Some(rest) = l.strip_prefix("CREATE FUNCTION fp_") else {
            i += 1;
            continue;
        };
        let name = format!("fp_{}", rest.split('(').next().unwrap_or_default().trim());
        // The header runs to the line that opens the dollar quote.
        let mut j = i;
        while j < lines.len() && !lines[j].trim_end().ends_with("AS $$") {
            j += 1;
        }
        let mut k = j + 1;
        while k < lines.len() && lines[k].trim() != "$$;" {
            k += 1;
        }
        if j >= lines.len() || k >= lines.len() {
            break;
        }
        let header = lines[i..=j].join("\n");
        let mut body = lines[j + 1..k].join("\n");
        body.push('\n');
        out.push(Function { name, header, body, body_line: j + 2 });
        i = k + 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_fenced_function_of_the_worker_role_migration() {
        let f = functions(fenceproof_harness::db::databases::MIGRATIONS[1].1);
        let names: Vec<&str> = f.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "fp_lease_acquire",
                "fp_lease_renew",
                "fp_lease_renew_many",
                "fp_lease_release",
                "fp_run_transition",
                "fp_claim",
                "fp_record_result",
                "fp_mark_unknown_own",
                "fp_mark_expired_unknown",
                "fp_converge"
            ]
        );
        let renew = &f[1];
        assert!(renew.body.contains("l.expires_at > clock_timestamp()"));
        let src: Vec<&str> = fenceproof_harness::db::databases::MIGRATIONS[1].1.lines().collect();
        let at = renew.body.find("WHERE").unwrap();
        assert!(src[renew.line_of(at) - 1].contains("WHERE l.run_id = p_run"), "line numbers match the file");
        let sql = renew.replacement(&renew.body);
        assert!(sql.starts_with(SEARCH_PATH_FOR_CREATE), "{sql}");
        assert!(sql[SEARCH_PATH_FOR_CREATE.len()..].starts_with("CREATE OR REPLACE FUNCTION fp_lease_renew("));
    }
}
