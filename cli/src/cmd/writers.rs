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
}

pub async fn run(a: Args) -> u8 {
    let (database_url, schema, json) = (a.database_url.as_str(), a.schema.as_deref(), a.json);
    if url::Url::parse(database_url).map(|u| !u.scheme().starts_with("postgres")).unwrap_or(true) {
        eprintln!("fenceproof: --database-url must be a postgres:// URL");
        return exit::USAGE;
    }
    let pool = match databases::pool(database_url, "fenceproof-writers", 1).await {
        Ok(p) => p,
        Err(e) => {
            eprintln!("fenceproof: cannot connect to {database_url}: {e}");
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
    if json {
        println!("{}", serde_json::to_string_pretty(&found).expect("json"));
    } else {
        let w = found.iter().map(|r| r.role.len()).max().unwrap_or(4).max(4);
        println!("{:<w$}  {:<5}  {:<22}  direct write privileges", "role", "login", "why it may");
        for r in &found {
            let why = match (r.superuser, r.owner) {
                (true, _) => "superuser",
                (_, true) => "owns the tables",
                _ => "GRANTED: bypasses fencing",
            };
            println!(
                "{:<w$}  {:<5}  {:<22}  {}",
                r.role,
                if r.can_login { "yes" } else { "no" },
                why,
                r.grants.join(", ")
            );
        }
        if bypass.is_empty() {
            println!("only the tables' owner and superusers can write the protocol's tables directly");
        } else {
            let names: Vec<&str> = bypass.iter().map(|w| w.role.as_str()).collect();
            println!(
                "{} role(s) can write around the fp_* functions: {} (revoke INSERT, UPDATE, DELETE, TRUNCATE on {} from them, spec §13)",
                bypass.len(),
                names.join(", "),
                writers::TABLES.join(", ")
            );
        }
    }
    if bypass.is_empty() {
        exit::OK
    } else {
        exit::FAILED
    }
}
