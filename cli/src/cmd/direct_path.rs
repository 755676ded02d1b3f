//! The direct path as docs/direct-path.md shows it, generated from the code: the four tables'
//! definitions read from `migrations/0001_protocol_schema.sql` (and the index of 0003), and each
//! reference statement of `protocol/src/sql.rs` with its step, what it must match, what it sets,
//! on which clock, and its text. Offline and deterministic: the SQL is read as text
//! ([`super::direct_sql`]), no server is started.

use fenceproof_harness::db::databases::MIGRATIONS;
use fenceproof_protocol::sql::{DIRECT, STEPS};

use super::direct_sql::{self, Clauses, Column, Table};

/// The migration called `name`.
fn migration(name: &str) -> &'static str {
    MIGRATIONS.iter().find(|(n, _)| *n == name).map(|(_, s)| *s).unwrap_or_default()
}

/// The protocol's four tables, with the indexes of every migration.
fn schema() -> Vec<Table> {
    let mut ts = direct_sql::tables(migration("0001_protocol_schema"));
    direct_sql::add_indexes(&mut ts, migration("0003_claim_index"));
    ts
}

/// What a default means when PostgreSQL reads it specially.
fn default_shown(d: &str) -> String {
    match d {
        "'epoch'" => "`'epoch'` (1970-01-01 00:00:00+00: a new lease row is already expired)".into(),
        "clock_timestamp()" => "`clock_timestamp()` (the database's clock at the insert)".into(),
        other => format!("`{other}`"),
    }
}

fn column_row(c: &Column) -> String {
    let null = if c.not_null { "NOT NULL" } else { "nullable" };
    let default = c.default.as_deref().map_or("-".to_string(), default_shown);
    let constraints = if c.constraints.is_empty() {
        "-".to_string()
    } else {
        c.constraints.iter().map(|k| format!("`{}`", k.replace('|', "\\|"))).collect::<Vec<_>>().join(", ")
    };
    format!("| `{}` | `{}` | {null} | {default} | {constraints} |\n", c.name, c.ty)
}

/// The tables: one Markdown table of columns each, then its table constraints and indexes.
pub fn tables_markdown() -> String {
    let mut s = String::new();
    for t in schema() {
        s.push_str(&format!("#### `{}`\n\n", t.name));
        s.push_str("| column | type | null | default | constraints |\n|---|---|---|---|---|\n");
        for c in &t.columns {
            s.push_str(&column_row(c));
        }
        for k in &t.constraints {
            s.push_str(&format!("\nTable constraint: `{k}`.\n"));
        }
        for i in &t.indexes {
            s.push_str(&format!("\nIndex: `{i}`.\n"));
        }
        s.push('\n');
    }
    s.trim_end().to_string() + "\n"
}

/// Where the clock is read, if anywhere.
const CLOCK: &str = "clock_timestamp()";

fn code_list(items: &[String]) -> String {
    items.iter().map(|i| format!("`{i}`")).collect::<Vec<_>>().join("; ")
}

/// The bullets of one statement: what it matches, sets, returns and locks, and its clock.
fn statement_bullets(c: &Clauses, text: &str) -> String {
    let mut s = String::new();
    let verb = match c.kind.as_str() {
        "INSERT" => "inserts into",
        "SELECT" => "reads",
        _ => "updates",
    };
    s.push_str(&format!("- **{verb}** `{}`", c.table));
    if let (Some(from), "UPDATE") = (&c.from, c.kind.as_str()) {
        s.push_str(&format!(", joined with `{from}`"));
    }
    s.push('\n');
    if c.kind == "SELECT" {
        s.push_str(&format!("- **columns**: `{}`\n", c.from.as_deref().unwrap_or_default()));
    }
    if !c.conditions.is_empty() {
        s.push_str(&format!("- **must match, every one**: {}\n", code_list(&c.conditions)));
    }
    if !c.sets.is_empty() {
        let what = if c.kind == "INSERT" { "values" } else { "sets, nothing else" };
        s.push_str(&format!("- **{what}**: {}\n", code_list(&c.sets)));
    }
    for t in &c.tail {
        let label = match t.split(' ').next() {
            Some("ON") => "on conflict",
            Some("ORDER") => "order",
            _ => "locks",
        };
        s.push_str(&format!("- **{label}**: `{t}`\n"));
    }
    if let Some(r) = &c.returning {
        s.push_str(&format!("- **returns**: `{r}`\n"));
    }
    s.push_str(&format!("- **clock**: {}\n", clock_use(c, text)));
    s
}

/// Where statement `text` (cut as `c`) reads the database's clock: `none`, or the conditions, the
/// columns it sets and the columns it reads that call `clock_timestamp()`.
fn clock_use(c: &Clauses, text: &str) -> String {
    if !text.contains(CLOCK) {
        return "none".into();
    }
    let mut places: Vec<String> = c.conditions.iter().filter(|i| i.contains(CLOCK)).map(|i| format!("`{i}`")).collect();
    let set: Vec<String> = c
        .sets
        .iter()
        .filter(|i| i.contains(CLOCK))
        .map(|i| format!("`{}`", i.split(" = ").next().unwrap_or(i)))
        .collect();
    if !set.is_empty() {
        places.push(format!("the value of {}", set.join(", ")));
    }
    if c.kind == "SELECT" && c.from.as_deref().is_some_and(|f| f.contains(CLOCK)) {
        places.push("the columns it reads".into());
    }
    if places.is_empty() {
        places.push("its subquery".into());
    }
    format!(
        "the database's `clock_timestamp()` (the server's time when the statement runs: not `now()`, the transaction's start, and never the worker's), in {}",
        places.join("; ")
    )
}

/// Every reference statement: its step, transaction and meaning of no row, the clauses, the text.
pub fn statements_markdown() -> String {
    let mut s = String::new();
    for ((name, text), step) in DIRECT.iter().zip(STEPS) {
        s.push_str(&format!("#### `{name}`\n\n{}.\n\n", step.step));
        s.push_str(&format!("- **runs in**: {}\n", step.within));
        s.push_str(&statement_bullets(&direct_sql::clauses(text), text));
        s.push_str(&format!("- **no row means**: {}\n\n", step.no_row));
        s.push_str(&format!("```sql\n{text}\n```\n\n"));
    }
    s.trim_end().to_string() + "\n"
}

/// The rows of the default matrix the direct path skips, by id.
fn skipped() -> Vec<&'static str> {
    let all: Vec<_> = fenceproof_scenarios::all().into_iter().filter(|e| !e.opt_in()).collect();
    let ids: Vec<&str> = all.iter().map(|e| e.id).collect();
    let kept = crate::select::for_write_path_quiet(all, fenceproof_protocol::write_path::WritePath::Direct);
    ids.into_iter().filter(|id| !kept.iter().any(|e| e.id == *id)).collect()
}

/// `P-role, P-api, …`: the rows skipped on the direct path.
pub fn skipped_list() -> String {
    skipped().join(", ")
}

/// How many rows of the default matrix the direct path skips, and how many it runs.
pub fn skipped_count() -> String {
    skipped().len().to_string()
}

/// How many rows of the default matrix run on the direct path.
pub fn kept_count() -> String {
    let n = fenceproof_scenarios::all().into_iter().filter(|e| !e.opt_in()).count();
    (n - skipped().len()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_every_column_and_statement_and_marks_the_clock() {
        let t = tables_markdown();
        for col in ["`expires_at` | `timestamptz` | NOT NULL | `'epoch'`", "`UNIQUE (run_id, step_id, effect_version)`"]
        {
            assert!(t.contains(col), "{col} missing from\n{t}");
        }
        let s = statements_markdown();
        assert_eq!(s.matches("\n#### `").count() + 1, DIRECT.len());
        let renew = s.split("#### `lease_renew`").nth(1).unwrap().split("#### ").next().unwrap();
        assert!(renew.contains("`expires_at > clock_timestamp()`"), "{renew}");
        assert!(
            renew.contains("in `expires_at > clock_timestamp()`; the value of `expires_at`, `updated_at`"),
            "{renew}"
        );
        let read = s.split("#### `intent_read`").nth(1).unwrap().split("#### ").next().unwrap();
        assert!(read.contains("**clock**: none"), "{read}");
        assert!(skipped().contains(&fenceproof_scenarios::p_role_boundary::EXPERIMENT.id), "{:?}", skipped());
    }
}
