//! `fenceproof writers --database-url URL`: which roles can still write the protocol's tables
//! directly, around the fenced fp_* functions (spec §13's revoke step). Read-only. Exit 0 when only
//! the tables' owner and superusers can, 1 when some other role can (a finding), 2 for bad input,
//! 3 when the database cannot be read.

use fenceproof_harness::db::{databases, writers};
use fenceproof_harness::report::exit;

/// List every role that can still write the protocol's tables directly, around the fp_*
/// functions (read-only; exit 1 when a role other than the owner or a superuser can).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The database to inspect.
    #[arg(long)]
    database_url: String,
    /// The schema holding the protocol's tables (default: the connection's current schema).
    #[arg(long)]
    schema: Option<String>,
    /// Print the list as JSON.
    #[arg(long)]
    json: bool,
    /// Print only the roles that bypass fencing and the closing line.
    #[arg(long, conflicts_with = "json")]
    quiet: bool,
}

pub async fn run(a: Args) -> u8 {
    let (database_url, schema) = (a.database_url.as_str(), a.schema.as_deref());
    let print = crate::cmd::Print::new(a.json, a.quiet);
    if let Err(msg) = crate::cmd::input::check(None, Some(database_url)) {
        return crate::fail::usage(msg);
    }
    let pool = match databases::pool(database_url, "fenceproof-writers", 1).await {
        Ok(p) => p,
        Err(e) => {
            let shown = fenceproof_harness::db::external::masked(database_url);
            eprintln!("fenceproof: cannot connect to {shown}: {e}");
            return exit::HARNESS;
        }
    };
    let found = writers::direct_writers(&pool, schema).await;
    pool.close().await;
    let found = match found {
        Ok(f) => f,
        Err(e) => {
            eprintln!("fenceproof: {e}");
            return exit::HARNESS;
        }
    };
    let bypass: Vec<&writers::DirectWriter> = found.iter().filter(|w| w.is_bypass()).collect();
    if print.json {
        outln!("{}", serde_json::to_string_pretty(&found).expect("json"));
    } else {
        out!("{}", print.text(&table(&found, &bypass)));
    }
    if bypass.is_empty() {
        exit::OK
    } else {
        exit::FAILED
    }
}

/// The writers as a table, and the closing line: who can write around the fp_* functions.
fn table(found: &[writers::DirectWriter], bypass: &[&writers::DirectWriter]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let w = found.iter().map(|r| r.role.len()).max().unwrap_or(4).max(4);
    let _ = writeln!(s, "{:<w$}  {:<5}  {:<22}  direct write privileges", "role", "login", "why it may");
    for r in found {
        let why = match (r.superuser, r.owner) {
            (true, _) => "superuser",
            (_, true) => "owns the tables",
            _ => "GRANTED: bypasses fencing",
        };
        let login = if r.can_login { "yes" } else { "no" };
        let _ = writeln!(s, "{:<w$}  {login:<5}  {why:<22}  {}", r.role, r.grants.join(", "));
    }
    if bypass.is_empty() {
        s.push_str("only the tables' owner and superusers can write the protocol's tables directly\n");
    } else {
        let names: Vec<&str> = bypass.iter().map(|w| w.role.as_str()).collect();
        let _ = writeln!(
            s,
            "{} role(s) can write around the fp_* functions: {} (revoke INSERT, UPDATE, DELETE, TRUNCATE on {} from them, spec §13)",
            bypass.len(),
            names.join(", "),
            writers::TABLES.join(", ")
        );
    }
    s
}
