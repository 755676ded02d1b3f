//! A small reader of the SQL fenceproof ships, for the generated direct-path page: the columns and
//! constraints of each `CREATE TABLE` and the `CREATE INDEX` lines of the migrations, and the
//! clauses of one statement (`SET` items, `WHERE` conditions, `RETURNING`), each split at its
//! top-level commas or `AND`s. It reads only the shapes the migrations and `protocol/src/sql.rs`
//! use, and its tests pin what it reads from them.

/// One column of a `CREATE TABLE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub ty: String,
    pub not_null: bool,
    pub default: Option<String>,
    /// `PRIMARY KEY`, `REFERENCES t(c)`, `CHECK (…)`, in the order written.
    pub constraints: Vec<String>,
}

/// One table: its columns and its table constraints (`UNIQUE (…)`), and the indexes on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub name: String,
    pub columns: Vec<Column>,
    pub constraints: Vec<String>,
    pub indexes: Vec<String>,
}

/// The words that end a column's type in its definition.
const AFTER_TYPE: &[&str] = &["NOT", "NULL", "DEFAULT", "CHECK", "REFERENCES", "PRIMARY", "UNIQUE"];

/// Every `CREATE TABLE` of `sql`, in order, with the `CREATE INDEX` lines of `sql` on each.
pub fn tables(sql: &str) -> Vec<Table> {
    let mut out: Vec<Table> = Vec::new();
    let mut current: Option<Table> = None;
    for line in sql.lines().map(|l| l.split(" --").next().unwrap_or(l).trim_end()) {
        if let Some(rest) = line.strip_prefix("CREATE TABLE ") {
            let name = rest.split_whitespace().next().unwrap_or_default().to_string();
            current = Some(Table { name, columns: vec![], constraints: vec![], indexes: vec![] });
        } else if line.starts_with(')') {
            out.extend(current.take());
        } else if let Some(t) = current.as_mut() {
            let item = line.trim().trim_end_matches(',');
            if item.starts_with("UNIQUE") || item.starts_with("PRIMARY KEY") || item.starts_with("CHECK") {
                t.constraints.push(item.to_string());
            } else if !item.is_empty() && !item.starts_with("--") {
                t.columns.push(column(item));
            }
        } else if line.starts_with("CREATE INDEX") || line.starts_with("CREATE UNIQUE INDEX") {
            let on = line.split(" ON ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or_default();
            if let Some(t) = out.iter_mut().find(|t| t.name == on) {
                t.indexes.push(line.trim_end_matches(';').to_string());
            }
        }
    }
    out
}

/// Add the `CREATE INDEX` lines of a later migration to the tables already read.
pub fn add_indexes(tables: &mut [Table], sql: &str) {
    for line in sql.lines().filter(|l| l.starts_with("CREATE INDEX") || l.starts_with("CREATE UNIQUE INDEX")) {
        let on = line.split(" ON ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or_default();
        if let Some(t) = tables.iter_mut().find(|t| t.name == on) {
            t.indexes.push(line.trim_end_matches(';').to_string());
        }
    }
}

/// One column definition: `name type [NOT NULL] [DEFAULT x] [CHECK (…)] [REFERENCES t(c)] [PRIMARY KEY]`.
fn column(item: &str) -> Column {
    let words = top_level_words(item);
    let name = words.first().cloned().unwrap_or_default();
    let type_end = (1..words.len()).find(|&i| AFTER_TYPE.contains(&words[i].as_str())).unwrap_or(words.len());
    let ty = words[1.min(words.len())..type_end].join(" ");
    let (mut not_null, mut default, mut constraints) = (false, None, Vec::new());
    let mut i = type_end;
    while i < words.len() {
        match words[i].as_str() {
            "NOT" => {
                not_null = true;
                i += 2;
            }
            "DEFAULT" => {
                default = words.get(i + 1).cloned();
                i += 2;
            }
            "PRIMARY" => {
                constraints.push("PRIMARY KEY".to_string());
                not_null = true;
                i += 2;
            }
            "CHECK" | "REFERENCES" => {
                constraints.push(format!("{} {}", words[i], words.get(i + 1).cloned().unwrap_or_default()));
                i += 2;
            }
            other => {
                constraints.push(other.to_string());
                i += 1;
            }
        }
    }
    Column { name, ty, not_null, default, constraints }
}

/// `text` split at its top-level blanks, a parenthesized group kept whole with the word it
/// follows (`clock_timestamp()`, `agent_runs(run_id)`) or as a word of its own (`(status IN (…))`).
fn top_level_words(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let (mut word, mut depth, mut quoted) = (String::new(), 0i32, false);
    for c in text.chars() {
        match c {
            '\'' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => depth -= 1,
            _ => {}
        }
        if c.is_whitespace() && depth == 0 && !quoted {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
        } else {
            word.push(c);
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// The clauses of a statement: each top-level keyword that starts one, with its text.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Clauses {
    /// `UPDATE`, `INSERT`, or `SELECT`.
    pub kind: String,
    /// The table it writes or reads first (`worker_leases`, `tool_operations o`).
    pub table: String,
    /// `SET` items, or an INSERT's `column = value` pairs.
    pub sets: Vec<String>,
    /// `FROM` of an UPDATE (a join) or a SELECT's columns.
    pub from: Option<String>,
    /// The `WHERE` conditions, split at top-level `AND`.
    pub conditions: Vec<String>,
    pub returning: Option<String>,
    /// `FOR UPDATE`, `FOR SHARE`, `ON CONFLICT …`, `ORDER BY …`.
    pub tail: Vec<String>,
}

/// The keywords that start a clause at the top level, in the order they may appear.
const KEYWORDS: &[&str] = &[
    "UPDATE",
    "INSERT INTO",
    "SELECT",
    "SET",
    "VALUES",
    "FROM",
    "WHERE",
    "ORDER BY",
    "ON CONFLICT",
    "FOR UPDATE",
    "FOR SHARE",
    "RETURNING",
];

/// `stmt` cut into its top-level clauses.
pub fn clauses(stmt: &str) -> Clauses {
    let flat = stmt.split_whitespace().collect::<Vec<_>>().join(" ");
    let cuts = keyword_cuts(&flat);
    let mut c = Clauses::default();
    let mut insert_columns = String::new();
    for (k, (at, kw)) in cuts.iter().enumerate() {
        let end = cuts.get(k + 1).map_or(flat.len(), |(e, _)| *e);
        let body = flat[at + kw.len()..end].trim().to_string();
        match *kw {
            "UPDATE" => (c.kind, c.table) = ("UPDATE".into(), body),
            "INSERT INTO" => {
                c.kind = "INSERT".into();
                let (t, cols) = body.split_once(' ').unwrap_or((body.as_str(), ""));
                c.table = t.to_string();
                insert_columns = cols.trim().trim_start_matches('(').trim_end_matches(')').to_string();
            }
            "SELECT" => (c.kind, c.from) = ("SELECT".into(), Some(body)),
            "SET" => c.sets = split_top(&body, ","),
            "VALUES" => {
                let values = body.trim_start_matches('(').trim_end_matches(')');
                let pairs = split_top(&insert_columns, ",").into_iter().zip(split_top(values, ","));
                c.sets = pairs.map(|(col, v)| format!("{col} = {v}")).collect();
            }
            "FROM" if c.kind == "SELECT" => c.table = body,
            "FROM" => c.from = Some(body),
            "WHERE" => c.conditions = split_top(&body, " AND "),
            "RETURNING" => c.returning = Some(body),
            other => c.tail.push(format!("{other} {body}").trim().to_string()),
        }
    }
    c
}

/// Where each keyword of [`KEYWORDS`] starts a clause at the top level of `flat` (outside
/// parentheses and quotes, on word boundaries), in order.
fn keyword_cuts(flat: &str) -> Vec<(usize, &'static str)> {
    let mut cuts: Vec<(usize, &'static str)> = Vec::new();
    let (mut depth, mut quoted) = (0i32, false);
    let bytes = flat.as_bytes();
    for (i, ch) in flat.char_indices() {
        match ch {
            '\'' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => depth -= 1,
            _ => {}
        }
        let inside_last = cuts.last().is_some_and(|(at, kw)| i < at + kw.len());
        if depth != 0 || quoted || inside_last || (i > 0 && bytes[i - 1] != b' ') {
            continue;
        }
        if let Some(kw) = KEYWORDS.iter().find(|k| {
            flat[i..].starts_with(**k) && flat[i + k.len()..].chars().next().is_none_or(|c| !c.is_alphanumeric())
        }) {
            cuts.push((i, *kw));
        }
    }
    cuts
}

/// `text` split at `sep` where it stands outside parentheses and quotes, each part trimmed.
pub fn split_top(text: &str, sep: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let (mut depth, mut quoted, mut start) = (0i32, false, 0);
    let mut i = 0;
    while i < text.len() {
        let c = text[i..].chars().next().unwrap_or(' ');
        match c {
            '\'' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => depth -= 1,
            _ => {}
        }
        if depth == 0 && !quoted && text[i..].starts_with(sep) {
            parts.push(text[start..i].trim().to_string());
            i += sep.len();
            start = i;
            continue;
        }
        i += c.len_utf8();
    }
    parts.push(text[start..].trim().to_string());
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fenceproof_protocol::sql;

    #[test]
    fn reads_the_columns_defaults_and_constraints_of_the_migration() {
        let sql = fenceproof_harness::db::databases::MIGRATIONS[0].1;
        let ts = tables(sql);
        let names: Vec<&str> = ts.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["agent_tasks", "agent_runs", "worker_leases", "tool_operations"]);
        let leases = &ts[2];
        let expires = leases.columns.iter().find(|c| c.name == "expires_at").unwrap();
        assert_eq!((expires.ty.as_str(), expires.not_null), ("timestamptz", true));
        assert_eq!(expires.default.as_deref(), Some("'epoch'"));
        let owner = leases.columns.iter().find(|c| c.name == "owner").unwrap();
        assert!(!owner.not_null && owner.default.is_none());
        let run = &leases.columns[0];
        assert_eq!(run.constraints, ["PRIMARY KEY", "REFERENCES agent_runs(run_id)"]);
        let ops = &ts[3];
        assert_eq!(ops.constraints, ["UNIQUE (run_id, step_id, effect_version)"]);
        let status = ops.columns.iter().find(|c| c.name == "status").unwrap();
        assert!(status.constraints[0].starts_with("CHECK (status IN ('prepared', 'dispatching'"), "{status:?}");
        let revision = ts[1].columns.iter().find(|c| c.name == "revision").unwrap();
        assert_eq!((revision.ty.as_str(), revision.default.as_deref()), ("bigint", Some("0")));
        assert_eq!(revision.constraints, ["CHECK (revision >= 0)"]);
        assert_eq!(ops.indexes.len(), 1, "{:?}", ops.indexes);
    }

    #[test]
    fn cuts_each_statement_into_what_it_matches_and_what_it_sets() {
        let acquire = clauses(sql::LEASE_ACQUIRE);
        assert_eq!((acquire.kind.as_str(), acquire.table.as_str()), ("UPDATE", "worker_leases"));
        assert_eq!(acquire.sets.len(), 4);
        assert_eq!(acquire.sets[1], "epoch = epoch + 1");
        assert_eq!(acquire.conditions, ["run_id = $1", "(owner IS NULL OR expires_at <= clock_timestamp())"]);
        assert_eq!(acquire.returning.as_deref(), Some("epoch, expires_at"));
        let claim = clauses(sql::CLAIM);
        assert_eq!(claim.conditions.len(), 1, "the subquery stays one condition: {:?}", claim.conditions);
        assert!(claim.conditions[0].contains("SKIP LOCKED"));
        let insert = clauses(sql::INTENT_INSERT);
        assert_eq!(insert.kind, "INSERT");
        assert_eq!(insert.sets.last().map(String::as_str), Some("status = 'prepared'"));
        assert_eq!(insert.tail, ["ON CONFLICT (operation_id) DO NOTHING"]);
        let lock = clauses(sql::COMMIT_LOCK_LEASE);
        assert_eq!((lock.kind.as_str(), lock.table.as_str()), ("SELECT", "worker_leases"));
        assert_eq!(lock.tail, ["FOR UPDATE"]);
        let renew = clauses(sql::LEASE_RENEW);
        assert_eq!(renew.conditions.len(), 4);
    }
}
